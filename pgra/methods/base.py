"""The interface every compared method implements.

A method is built from an experiment's settings for one task (:class:`MethodInputs`), ``fit`` trains it into a
run folder on the task's training data (resumable), and ``load`` gives a :class:`~pgra.results.predictions.Predictor` of
a fitted run that predicts any records of the task, in the one predictions schema (:mod:`pgra.results.predictions`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..core.errors import InputError
from ..rerank import stages as _builtin_stages  # noqa: F401  (registers the built-in stage families methods read)
from ..results.predictions import Predictor
from ..stages import ModelNeed, get_stage

if TYPE_CHECKING:
    from ..icl.config import ICLConfig
    from ..reader.config import TrainConfig
    from ..retrieval.index import IndexConfig
    from ..runtime.cost import Priced
    from ..tasks import TaskSpec


class MethodSettings(Protocol):
    """What a method reads of a cell's settings: the sections of the experiment config (which has these
    attributes, and one section per method that declares ``options``, read with :meth:`Method.own_options`; a
    method never imports the experiment layer above it)."""

    index: IndexConfig
    reader: TrainConfig
    icl: ICLConfig
    log_with: str
    show_progress: bool


@dataclass
class MethodInputs:
    """What the experiment gives a method for one task: the task, its stage folders and the settings."""

    task: TaskSpec
    candidates: Path                 # first-stage candidates of every split (``pgra retrieve``)
    settings: MethodSettings         # the cell's ExperimentConfig (reader, index, knn_vote ... sections)
    folders: dict[str, Path] = field(default_factory=dict)  # every stage folder the grid built, by stage name

    def folder(self, stage: str) -> Path:
        """The folder of the stage ``stage`` (``candidates``, ``reranked``, ``reranked-<name>``, ``full_search``, a
        plug-in's); a ValueError when the grid did not build it."""
        known = {"candidates": self.candidates, **self.folders}
        if stage not in known:
            raise ValueError(f"the stage {stage} was not built for this task (built: {', '.join(known)})")
        return known[stage]


@dataclass
class FitResult:
    """What fitting left in the run folder: training length, dev history and predictions already written."""

    steps: int = 0
    best_step: int = 0
    evaluations: list[dict[str, float]] = field(default_factory=list)  # [{"step", "dev"}] in step order
    predicted_splits: list[str] = field(default_factory=list)  # predictions_<split>.jsonl fit already wrote
    cost: dict[str, Any] | None = None  # LM work: {"lm_calls", "lm_tokens", ...} (None: the method runs no LM)
    train_inputs: int | None = None  # the training inputs it fitted on (None: it trains nothing, or not recorded)
    # of the fit's seconds, those the processes of a launch split among them (a reader's training loop under DDP;
    # one process: what they would split); None: nothing is split (it runs whole on each rank, or on the main one)
    split_s: float | None = None


class Method(ABC):
    """One compared method. Subclasses set ``name``, ``data`` and implement ``fit`` and ``load``.

    ``data`` names the one stage (its folder) whose records the method predicts (:mod:`pgra.stages`):
    ``candidates`` (first-stage top-k per input), ``reranked`` (the prompt-guided reranker's top d),
    ``reranked-<name>`` (another reranker's: :func:`pgra.rerank.stages.reranked_stage`), ``full_search`` (the top d
    of the whole corpus under the prompt-guided reranker's prompt) or a registered plug-in stage's name; the
    experiment builds the stages its methods read and what those read.
    """

    name: ClassVar[str]
    data: ClassVar[str] = "candidates"
    trained: ClassVar[bool] = True  # has a dev history (a reader); False for fixed rules such as a kNN vote
    # what a prediction's ``evidence`` ids name: "corpus" sentences (the readers' ctxs), "training" inputs
    # (demonstrations, voters) or "none"
    evidence: ClassVar[str] = "none"
    # True when ``evidence`` is in prompt order with the input after the last item (in-context learning)
    evidence_in_prompt: ClassVar[bool] = False
    # the dataclass of its own options, declared in its file: the experiment config's section named after it
    options: ClassVar[type | None] = None

    def __init__(self, inputs: MethodInputs) -> None:
        self.inputs = inputs

    def own_options(self) -> Any:
        """Its section of the cell's settings (``settings.<name>``, of type :attr:`options`)."""
        return getattr(self.inputs.settings, self.name)

    @classmethod
    def reads_reranker(cls) -> str | None:
        """The reranker whose top d it reads (``data`` a reranked stage), else None (also when no family has the
        stage it names: :meth:`data_dir` refuses that where it matters)."""
        try:
            return getattr(get_stage(cls.data, "methods"), "reranker", None)
        except InputError:
            return None

    @classmethod
    def score_name(cls) -> str:
        """What the ``score`` of its corpus evidence is, as results.html labels it: its stage's
        (:attr:`pgra.stages.Stage.score_name`: a reranker's, the inner product of the full search, the first
        stage's score)."""
        return get_stage(cls.data, "methods").score_name

    @property
    def data_dir(self) -> Path:
        """The folder whose ``{split}.jsonl`` this method trains on and predicts."""
        try:
            return self.inputs.folder(self.data)
        except ValueError:
            raise ValueError(f"method {self.name} reads the stage {self.data}, which was not built") from None

    def splits(self) -> tuple[str, ...]:
        """The splits a cell predicts and scores (the report reads ``test``)."""
        return ("dev", "test")

    def depends_on_seed(self) -> bool:
        """Whether the seed given to ``fit`` can change the predictions under these settings. A method that
        returns False is run once per task (at the grid's first seed) instead of once per seed: repeating it
        would only copy the same run."""
        return True

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """The settings that define this method's runs (a change makes finished cells stale)."""

    @abstractmethod
    def fit(self, out: Path, seed: int) -> FitResult:
        """Train on the task's training split into ``out`` (resuming a killed fit); may predict splits too."""

    def finished(self, out: Path) -> None:  # noqa: B027 (a hook: nothing to delete by default)
        """Called once the cell's ``cell.json`` is written (main process only): delete what only resuming a killed
        ``fit`` needed (a reader's checkpoints). Nothing by default."""

    @classmethod
    def price(cls, fits: Any, settings: dict[str, Any], inputs: int | None, splits: dict[str, int] | None,
              disk: dict[str, Any] | None = None) -> Priced | None:
        """Its cell's cost model: the cell priced from the bench fits before it runs (``pgra experiment --dry-run``;
        used where no finished cell's record prices it). ``fits``: the plan's bench fits (:class:`pgra.runtime.cost.Fits` and the parts');
        ``settings``: the cell's settings as its ``cell.json`` holds them (:meth:`settings`); ``inputs``: the
        task's inputs; ``splits``: its inputs per split (None: unknown); ``disk``: the cosmetic settings of what it
        keeps. None: no fit prices it (the plan counts it unknown). By default, on a CPU, the measured fixed part of
        a cell plus its seconds per input of every split (``bench/bench_cpu_cell_costs.py``)."""
        return fits.cpu_price("cell", sum(splits.values())) if splits is not None else None

    def cost_options(self) -> dict[str, Any] | None:
        """The options its :meth:`price` reads as ``disk`` that are in no key (so in no settings). None by default."""
        return None

    def models(self) -> list[ModelNeed]:
        """The models its cell loads: checked before a grid runs, their downloads sized in its plan. None by
        default."""
        return []

    def planned_disk(self) -> Any:
        """What the cell holds on disk besides its predictions and record, for the plan (a
        :class:`pgra.reader.cost_model.CellDisk`); None (the default): nothing else."""
        return None

    @classmethod
    @abstractmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        """The fitted run in ``out``, ready to predict (``trust_remote_code``: the caller lets its models run their
        own code; what ``out`` recorded never does)."""
