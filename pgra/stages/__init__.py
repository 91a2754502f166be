"""The stage: a folder a grid builds once per task, from the folders of the stages it reads, and its methods read.

Every stage is one :class:`Stage`: its name (its folder under ``<out>/<task>/``), the stages it reads, its options
(its section of an experiment config), its config from the task's settings, what defines its result (hashed into its
key), how it writes its splits (:meth:`Stage.build`, run by the one runner of :mod:`pgra.stages.runner`, which locks
the folder, resumes split by split, meters and writes the manifest), what it will cost before it runs
(:meth:`Stage.plan`) and how its folder is read back (:meth:`Stage.open`). The built-in ones: ``candidates``
(:mod:`pgra.retrieval.candidates_stage`), ``reranked`` / ``reranked-<reranker>`` and ``full_search``
(:mod:`pgra.rerank.stages`). A method names the stage it reads; the grid derives its stages, their order and keys
from its methods, and builds each (reused by its key, claimed: :meth:`pgra.experiment.Experiment.build_stage`). A
plug-in stage is one file: a subclass registered with ``@STAGES.register`` that implements ``build`` (and ``plan``),
read by a method whose ``data`` names it.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from ..core.config import result_settings
from ..core.errors import InputError
from ..core.registry import Registry, defined_in, is_builtin, load_plugins
from ..runtime.cost import Priced


def key_of(payload: Any) -> str:
    """The key of a stage or cell: a short SHA-256 of its JSON payload."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def defining(cfg: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of a stage config that define its result (all but the cosmetic ones and ``drop``)."""
    return result_settings(cfg, without=drop)


class ModelNeed(NamedTuple):
    """A model a stage or a cell loads, as its config names it: checked before a grid runs, sized in its plan."""

    field: str                       # the config field naming it (``rerank.lm``, ``reader.model`` ...)
    name: str                        # a folder or a hub id
    what: str                        # how an error names it ("reader", "cross-encoder" ...)
    trust_remote_code: bool = False  # whether its config lets it run its own code
    local_only: bool = False         # loaded from a local folder only (no hub id)


CTX_BYTES = 60  # a candidate's id, score and keys besides its text, in a stage's line


@dataclass(frozen=True)
class StageRequest:
    """What a grid gives one stage of one task."""

    task: str                      # the task as the grid names it (a registered name or a task YAML file)
    settings: Any                  # the task's settings: the experiment config with its task overrides merged in
    folder: Path                   # the folder the stage writes
    inputs: Mapping[str, Path]     # the folders of the stages it reads, by stage name
    keys: Mapping[str, str]        # the keys of the stages it reads, and ``index``: the index's build key
    content: Callable[[], Mapping[str, Any]] = dict  # what of the task changes results (read when asked)

    @property
    def task_content(self) -> Mapping[str, Any]:
        """The task's spec and its data files' checksums (what of the task enters a first stage's key)."""
        return self.content()


@dataclass(frozen=True)
class Carried:
    """What an export carries of a stage folder, so that its replay runs on another machine: ``files`` (of the
    folder, copied beside its manifest), the one ``model`` its replay loads (the path as recorded; None: none) with
    its ``model_fingerprint``, and ``store``: a folder of precomputed vectors its replay searches (copied with
    ``--copy-index``, else pointed at)."""

    files: tuple[str, ...] = ()
    model: str | None = None
    model_fingerprint: str | None = None
    store: Path | None = None
    title: str = ""  # how a model card names the stage's work ("prompt-guided reranking", "cross-encoder" ...)


@dataclass(frozen=True)
class PlanRequest:
    """What the dry run knows of one task when it asks a stage its :meth:`Stage.plan`."""

    settings: Any                  # the task's settings (:meth:`Stage.own_options` reads its section)
    rerank: Any                    # the task's rerank config (an analysis's variant of it)
    retrieved_k: int               # the first stage's k
    inputs: int | None             # the task's inputs (None: unknown)
    corpus: int | None             # the corpus's sentences (None: unknown)
    stages: Sequence[str] = ()     # every stage the grid builds for the task
    corpus_passed: bool = False    # whether its reranked stage embedded the whole corpus
    fits: Any = None               # the bench fits (:class:`pgra.runtime.cost.Fits`; None: not priced)
    input_bytes: float = 0.0       # an input's record in a line of its files
    sentence_bytes: float = 0.0    # a corpus sentence in a line of its files

    def lines(self, line_bytes: float) -> float | None:
        """The bytes of a stage's files of one ``line_bytes`` line per input (None: the inputs are unknown)."""
        return self.inputs * line_bytes if self.inputs else None


@dataclass(frozen=True)
class StagePlan:
    """A stage's plan for one task (:meth:`Stage.plan`): ``priced`` its seconds (None: unpriced), ``texts`` what its
    LM embeds (its cache's rows; None: none, or unknown), ``disk`` its files' bytes (None: its own, or the inputs
    unknown) and ``line`` what an input's line holds, as a template and its number (``("k={} candidates", 150)``)."""

    priced: Priced | None = None
    texts: int | None = None
    disk: float | None = None
    line: tuple[str, int] = ("", 0)


class Stage(ABC):
    """One kind of stage folder. A subclass sets ``family`` (its registry name, and its folder's unless :meth:`named`
    says more), ``kind`` (its manifest's) and implements :meth:`config`, :meth:`key_record` and :meth:`build` (the
    one runner, :func:`pgra.stages.runner.run_stage`, does the rest)."""

    family: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    reads: ClassVar[tuple[str, ...]] = ("candidates",)  # the stages whose folders it reads
    score_name: ClassVar[str] = "score"  # what the ``score`` of its records' evidence is (results.html)
    options: ClassVar[type | None] = None  # the dataclass of its section ``<family>:`` (None: no options)
    # its build runs in every process of a launch (they share its work; it opens what it reads and begins its folder
    # itself), else on rank 0 alone, from the folders the runner opened
    every_rank: ClassVar[bool] = False

    def __init__(self, name: str = "") -> None:
        self.name = name or self.family

    @classmethod
    def named(cls, name: str) -> Stage | None:
        """The stage of this family whose folder is ``name``, or None (default: the family's one folder)."""
        return cls() if name == cls.family else None

    def own_options(self, settings: Any) -> Any:
        """Its section of the task's ``settings`` (its defaults where the config was made before it registered)."""
        return getattr(settings, self.family, None) or self.options() if self.options is not None else None

    @abstractmethod
    def config(self, request: StageRequest) -> Any:
        """Its config for one task: the settings' section, with its input and output folders."""

    @abstractmethod
    def key_record(self, request: StageRequest, config: Any) -> dict[str, Any]:
        """What defines its result (hashed into its key): the settings it reads and the keys of its inputs."""

    def run(self, config: Any, ctx: Any = None) -> Path:
        """Build its folder (every process of ``ctx`` together): the one runner over :meth:`build`."""
        from .runner import run_stage

        return run_stage(self, config, ctx)

    @abstractmethod
    def build(self, config: Any, inputs: Mapping[str, dict[str, Any]], run: Any) -> dict[str, Any] | None:
        """Write its splits through ``run.split(name, make)`` (:class:`~pgra.stages.runner.StageRun`, its processes
        ``run.ctx``) from the folders it reads (``inputs``: their manifests by stage name, opened by the runner;
        empty for an ``every_rank`` stage, which opens them, sets ``run.task``, ``run.inputs`` and ``run.config`` and
        begins the folder itself); returns its manifest's own fields (None on a process that writes none)."""

    @classmethod
    def open(cls, folder: str | Path) -> dict[str, Any]:
        """A folder this stage wrote, read and checked: its manifest (:func:`pgra.storage.artifacts.read_manifest`)."""
        from ..storage.artifacts import read_manifest

        return read_manifest(folder, cls.kind)

    def plan(self, request: PlanRequest) -> StagePlan:
        """What it will cost one task before it runs (the dry run's, where no record prices it). The default, an
        empty plan: unpriced, no LM, its size its own (the dry run says it is not counted)."""
        return StagePlan()

    def models(self, rerank: Any) -> list[ModelNeed]:
        """The models it loads for a task (``rerank``: the task's rerank config): checked before a grid runs, their
        downloads sized in its plan."""
        return []

    replayable: ClassVar[bool] = False  # whether :meth:`replay` can do its work again on new texts

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False, model: str | Path | None = None,
               store: Path | None = None) -> Any:
        """What does its work again on new texts (``Pipeline.load``): an object whose ``rerank(queries, candidates)``
        gives each text's evidence, loaded from its ``folder`` (and ``manifest``) over the loaded first-stage
        ``index``; ``model`` / ``store``: its model and searched store (:class:`Carried`) when not where the manifest
        recorded them (the same files or refused). A stage that cannot be replayed says so (the default)."""
        raise cls.not_replayable(folder)

    @classmethod
    def carried(cls, folder: Path, manifest: dict[str, Any]) -> Carried:
        """What ``pgra export`` carries of this stage's folder for :meth:`replay` to run elsewhere (checked here:
        a folder whose replay needs what an export cannot carry is an InputError saying why). A stage that does not
        say cannot be exported (the default)."""
        if not cls.replayable:
            raise cls.not_replayable(folder)
        raise InputError(f"{folder} was built by the {cls.family} stage, which does not say what its replay needs "
                         "elsewhere (Stage.carried): Pipeline.load(run) predicts with it where it was made",
                         path=folder, field="kind")

    @classmethod
    def not_replayable(cls, folder: Path) -> InputError:
        """The error of a run whose evidence came from this stage, which cannot replay its work on new texts."""
        return InputError(f"{folder} was built by the {cls.family} stage, which cannot be replayed on new texts: "
                          "score its files with `pgra evaluate`", path=folder, field="kind")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


# the stages' registry: the interface is on the ground floor so that every layer may name a stage; the built-in
# families register themselves where they live (retrieval, rerank) when imported, and :mod:`pgra.methods` (what
# reads the stages) imports them and hands on the lookups below: imports the drawing sees, none running upward
STAGES: Registry[type[Stage]] = Registry("stage", field="stage", name_of=lambda cls: getattr(cls, "family", ""),
                                         base=Stage)
register_stage = STAGES.register  # add a stage family under its ``family``; works as a decorator


def families() -> list[type[Stage]]:
    """The registered stage families: pgra's own first, as they registered (each after what it reads), then others."""
    load_plugins()
    return sorted(STAGES.values(), key=lambda family: not is_builtin(defined_in(family)))


def get_stage(name: str, field: str = "stage") -> Stage:
    """The stage whose folder is ``name``: ``candidates``, ``reranked`` (the prompt-guided reranker's top d),
    ``reranked-<reranker>``, ``full_search`` or a registered plug-in's; an unknown name is an InputError naming
    ``field`` and the families."""
    for family in families():
        stage = family.named(name)
        if stage is not None:
            return stage
    raise InputError(f"no stage is named '{name}' (stage families: {', '.join(STAGES)})", field=field)


def stage_of_kind(kind: str) -> type[Stage]:
    """The stage family whose folders' manifests have ``kind``; an InputError when none has."""
    for family in families():
        if family.kind == kind:
            return family
    raise InputError(f"no stage writes folders of kind '{kind}' (stage families: {', '.join(STAGES)})", field="kind")


def stage_kinds() -> tuple[str, ...]:
    """The manifest kinds of every registered stage's folder (built-in ones first): what a reader trains on and
    ``pgra evaluate`` scores (a plug-in stage's folder too)."""
    return tuple(dict.fromkeys(family.kind for family in families() if family.kind))


__all__ = ["CTX_BYTES", "STAGES", "Carried", "ModelNeed", "PlanRequest", "Stage", "StagePlan", "StageRequest", "defining", "families", "get_stage", "key_of",
           "register_stage", "stage_kinds", "stage_of_kind"]
