"""Every compared method behind one interface (:class:`Method`), one file each, in one registry.

``METHODS`` (a :class:`~pgra.core.registry.Registry`) maps a name to its class; the CLI reads its choices from it. A new
method is one file whose class is added here, or registered with :func:`register_method` (a plug-in, a test); a
method with options declares them on itself (``options``: the experiment config's section named after it). Every
registered demonstration strategy ``s`` (a plug-in's too) is also a method ``icl_<s>``, and every registered reranker
``r`` that no method reads is ``fid_<r>`` (:class:`MethodRegistry`). The stage lookups are handed on from here,
every built-in stage family registered (:mod:`.base` imports them). Importing this package stays light (no torch): each method imports its heavy parts in ``fit``.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import InputError
from ..core.registry import Registry, defined_in, is_builtin
from ..results.predictions import Predictor
from ..stages import get_stage, stage_kinds, stage_of_kind
from .base import FitResult, Method, MethodInputs
from .fid import FiD
from .fid_reranked import RERANKED_READERS, fid_method, reranked_stage
from .icl import ICL, icl_method
from .knn_vote import KnnVote, KnnVoteConfig
from .linear_probe import LinearProbe, LinearProbeConfig
from .no_retrieval import NoRetrieval
from .pgra import PGRA
from .pgra_full import PGRAFull


class MethodRegistry(Registry[type[Method]]):
    """The methods, ``icl_<strategy>`` for every registered demonstration strategy that has no method of that name
    yet, and ``fid_<reranker>`` for every registered reranker no method reads yet (made when a name is looked up or
    listed, so a strategy or reranker registered later has one too)."""

    def _with_strategies(self) -> None:
        from ..rerank.base import RERANKERS
        from ..selection.registered import STRATEGIES

        for strategy in STRATEGIES.names():
            if f"icl_{strategy}" not in self:
                self.register(icl_method(strategy))
        read = {getattr(m, "data", None) for m in self.values()}
        for reranker in RERANKERS.names():
            if reranked_stage(reranker) not in read and f"fid_{reranker}" not in self:
                self.register(fid_method(reranker))

    def names(self) -> tuple[str, ...]:
        self._with_strategies()
        return super().names()

    def register(self, part: Any = None, *, name: str | None = None) -> Any:
        """As :meth:`Registry.register`; a method that still sets ``reranker`` (read before ``data`` named the stage
        itself) is refused: it would read the prompt-guided reranker's folder unseen."""
        if part is not None and "reranker" in vars(part):
            raise InputError(f"{defined_in(part)} sets `reranker` on the method {getattr(part, 'name', part)}, which "
                             "pgra no longer reads: name the stage it reads in `data` (reranked-<reranker>)",
                             field="methods")
        return super().register(part, name=name)

    def replaceable(self, held: type[Method]) -> bool:
        """A method pgra made (``icl_<s>``, ``fid_<r>``) gives way to the plug-in's own of that name."""
        return "made_from" in vars(held)

    def part(self, name: str, field: str | None = None) -> type[Method]:
        if name not in self:
            self._with_strategies()
        return super().part(name, field)


def _made_in(cls: type[Method]) -> str:
    """Where a method comes from: for an ``icl_<s>`` / ``fid_<r>`` pgra made (:func:`icl_method`,
    :func:`fid_method`), its strategy's or reranker's module (a plug-in's, whose own method may replace it), else
    its own (a subclass, which inherits ``made_from``, is its own module's)."""
    kind, name = vars(cls).get("made_from") or (None, None)
    if kind is None or not is_builtin(defined_in(cls)):
        return defined_in(cls)
    from ..rerank.base import RERANKERS
    from ..selection.registered import STRATEGIES

    source = (STRATEGIES if kind == "strategy" else RERANKERS).get(name)
    return defined_in(source if source is not None else cls)


METHODS = MethodRegistry("method", field="methods", module_of=_made_in, base=Method)
for _method in (NoRetrieval, FiD, PGRA, PGRAFull, KnnVote, LinearProbe, ICL,
                *map(icl_method, ("random", "kate", "skill_knn")), *RERANKED_READERS):
    METHODS.register(_method)
# manifest kind of a fitted run -> the method class that loads it
RUN_KINDS: dict[str, type[Method]] = {"reader": FiD, KnnVote.name: KnnVote, LinearProbe.name: LinearProbe,
                                      "icl": ICL}


def register_method(cls: type[Method], run_kind: str | None = None) -> type[Method]:
    """Add a method class to the registry under its ``name`` (and ``run_kind``, the ``kind`` its fitted runs'
    manifests record, when :func:`load_run` should load them); returns it, so it works as a decorator."""
    METHODS.register(cls)
    if run_kind:
        RUN_KINDS[run_kind] = cls
    return cls


def load_run(run, device: str | None = None, trust_remote_code: bool = False) -> Predictor:
    """The fitted method in a finished run folder, chosen by its manifest's kind (reader, knn_vote ...).
    ``trust_remote_code``: the caller lets its models run their own code (what the run recorded never does)."""
    from pathlib import Path

    from ..core.errors import InputError
    from ..storage.artifacts import MANIFEST, read_json

    run = Path(run)
    if not (run / MANIFEST).exists():
        raise InputError(f"{run} has no {MANIFEST}: not a finished run (pgra train / pgra experiment)", path=run)
    kind = read_json(run / MANIFEST).get("kind")
    if kind not in RUN_KINDS:
        raise InputError(f"{run} is a '{kind}' folder, not a run ({', '.join(RUN_KINDS)})", path=run)
    return RUN_KINDS[kind].load(run, device=device, trust_remote_code=trust_remote_code)


def get_method(name: str) -> type[Method]:
    """The method class registered as ``name``."""
    return METHODS.part(name)


__all__ = ["METHODS", "RUN_KINDS", "FitResult", "KnnVoteConfig", "LinearProbeConfig", "Method", "MethodInputs",
           "MethodRegistry", "fid_method", "get_method", "get_stage", "icl_method", "load_run", "register_method",
           "stage_kinds", "stage_of_kind"]
