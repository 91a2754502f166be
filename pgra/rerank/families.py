"""Every stage family, the built-in ones first: the lookups of a grid, a method, the reader, an export and
``pgra evaluate``. Here because the built-in families live on two floors (the first stage's ``candidates`` in
:mod:`pgra.retrieval.candidates_stage`, ``reranked`` and ``full_search`` in :mod:`pgra.rerank.stages`), imported
below like any module; a plug-in's family registers in :data:`pgra.stages.STAGES` from its own file."""

from __future__ import annotations

from ..core.errors import InputError
from ..core.registry import load_plugins
from ..retrieval import candidates_stage
from ..stages import STAGES, Stage
from . import stages

BUILTIN_FAMILIES = (candidates_stage.CandidatesStage, stages.RerankedStage, stages.FullSearchStage)


def families() -> list[type[Stage]]:
    """The registered stage families: the built-in ones first, in their fixed order, then the plug-ins'."""
    load_plugins()
    builtin = [family.family for family in BUILTIN_FAMILIES]
    order = {name: i for i, name in enumerate(builtin)}
    return sorted(STAGES.values(), key=lambda family: order.get(family.family, len(order)))


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


__all__ = ["BUILTIN_FAMILIES", "families", "get_stage", "stage_kinds", "stage_of_kind"]
