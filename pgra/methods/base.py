"""The interface every compared method implements, and the one predictions schema they all write.

A method is built from an experiment's settings for one task (:class:`MethodInputs`), ``fit`` trains it into a
run folder on the task's training data (resumable), and ``load`` gives a :class:`Predictor` of a fitted run
that predicts any records of the task. Every prediction is one line of ``predictions_<split>.jsonl``::

    {"id", "text", "label", "prediction", "scores": {label: probability}, "evidence": [ids]}

``evidence`` holds the ids of the evidence sentences (or, for in-context learning, the demonstrations) the
prediction used, in the order the method used them. Methods that show labelled demonstrations (in-context
learning, the kNN vote's voters, PGRA's reranker prompt) add ``demo_labels``: their labels, for the report's
diagnostics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..tasks import TaskSpec

PREDICTION_FIELDS = ("id", "text", "label", "prediction", "scores", "evidence")


def prediction_line(record: dict[str, Any], prediction: str | None, scores: dict[str, float] | None,
                    evidence: list[Any]) -> dict[str, Any]:
    """One predictions-schema line for an interchange ``record`` (gold ``label`` is None when unlabelled)."""
    return {"id": record["id"], "text": record["text"], "label": record.get("label"), "prediction": prediction,
            "scores": scores, "evidence": list(evidence)}


@dataclass
class MethodInputs:
    """What the experiment gives a method for one task: the task, its stage folders and the settings."""

    task: TaskSpec
    candidates: Path                 # first-stage candidates of every split (``pgra retrieve``)
    reranked: Path | None            # the reranked candidates (``pgra rerank``); None when not built
    settings: Any                    # the cell's ExperimentConfig (reader, index, knn_vote ... sections)


@dataclass
class FitResult:
    """What fitting left in the run folder: training length, dev history and predictions already written."""

    steps: int = 0
    best_step: int = 0
    evaluations: list[dict[str, float]] = field(default_factory=list)  # [{"step", "dev"}] in step order
    predicted_splits: list[str] = field(default_factory=list)  # predictions_<split>.jsonl fit already wrote
    cost: dict[str, Any] | None = None  # LM work: {"lm_calls", "lm_tokens", ...} (None: the method runs no LM)


class Predictor(ABC):
    """A fitted method, loaded from its run folder."""

    task: TaskSpec

    @abstractmethod
    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Predictions-schema lines for interchange ``records`` (with ``ctxs`` where the method reads them)."""

    def default_data(self) -> Path | None:
        """The folder the run read its inputs from (``pgra evaluate``'s default ``--data``)."""
        return None

    def cost(self) -> dict[str, Any] | None:
        """LM work of the predictions made so far (``{"lm_calls", "lm_tokens", ...}``); None when none."""
        return None

    def evidence_of(self, record: dict[str, Any], line: dict[str, Any]) -> list[dict[str, Any]]:
        """``{"id", "text", "score"}`` of the evidence ``line`` used, in its order (from the record's ``ctxs``)."""
        by_id = {str(c["id"]): c for c in record.get("ctxs", [])}
        return [{"id": by_id[str(i)]["id"], "text": by_id[str(i)]["text"], "score": by_id[str(i)].get("score")}
                for i in line["evidence"]]


class Method(ABC):
    """One compared method. Subclasses set ``name``, ``data`` and implement ``fit`` and ``load``.

    ``data`` names the task folder whose records the method predicts: ``candidates`` (first-stage top-k per
    input) or ``reranked`` (the reranker's top-d); ``needs_reranking`` makes the experiment build the latter.
    """

    name: ClassVar[str]
    data: ClassVar[str] = "candidates"
    trained: ClassVar[bool] = True  # has a dev history (a reader); False for fixed rules such as a kNN vote
    # what a prediction's ``evidence`` ids name: "corpus" sentences (the readers' ctxs), "training" inputs
    # (demonstrations, voters) or "none"
    evidence: ClassVar[str] = "none"
    # True when ``evidence`` is in prompt order with the input after the last item (in-context learning)
    evidence_in_prompt: ClassVar[bool] = False

    def __init__(self, inputs: MethodInputs) -> None:
        self.inputs = inputs

    @property
    def needs_reranking(self) -> bool:
        return self.data == "reranked"

    @property
    def data_dir(self) -> Path:
        """The folder whose ``{split}.jsonl`` this method trains on and predicts."""
        folder = self.inputs.reranked if self.needs_reranking else self.inputs.candidates
        if folder is None:
            raise ValueError(f"method {self.name} needs the reranked candidates, which were not built")
        return folder

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

    @classmethod
    @abstractmethod
    def load(cls, out: Path, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
        """The fitted run in ``out``, ready to predict (``trust_remote_code``: the caller lets its models run their
        own code; what ``out`` recorded never does)."""
