"""The stages of the second stage, each reading a task's ``candidates``: ``reranked`` (the prompt-guided reranker's
top d, :mod:`pgra.rerank.reranker`), ``reranked-<name>`` (any other registered reranker's, :mod:`pgra.rerank.stage`)
and ``full_search`` (``pgra_full``'s top d of the whole corpus, :mod:`pgra.rerank.full_search`).

Their keys are what they always were: a reranked folder's the reranker's settings (:meth:`Reranker.key_settings`)
and the candidates' key; ``full_search``'s the prompt-guided reranker's settings but ``k``, and the candidates' key.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..artifacts import safe_name
from ..stages import STAGES, Stage, StageRequest
from .base import DEFAULT, RERANKERS, reranker_class
from .stage import FULL_SEARCH_KIND, RERANKED_KIND

RERANKED = "reranked"


def reranked_stage(reranker: str) -> str:
    """The stage (and folder) name of a reranker's top-d: ``reranked`` for the prompt-guided one (as always),
    ``reranked-<name>`` for another."""
    return RERANKED if reranker == DEFAULT else f"{RERANKED}-{safe_name(reranker, 'rerank.reranker', what='reranker name')}"


def _rerank_config(request: StageRequest, reranker: str, out: Path) -> Any:
    s = request.settings
    return replace(s.rerank, candidates=str(request.inputs["candidates"]), out=str(out), task="", index=s.index.out,
                   show_progress=s.show_progress, reranker=reranker)


@STAGES.register
class RerankedStage(Stage):
    """A reranker's top d of each input's candidates (one stage per reranker: ``reranked``, ``reranked-<name>``)."""

    family = RERANKED
    kind = RERANKED_KIND

    def __init__(self, reranker: str = DEFAULT) -> None:
        super().__init__(reranked_stage(reranker))
        self.reranker = reranker

    @classmethod
    def named(cls, name: str) -> RerankedStage | None:
        if name == RERANKED:
            return cls(DEFAULT)
        prefix = f"{RERANKED}-"
        if not name.startswith(prefix):
            return None
        RERANKERS.load_builtin()
        return next((cls(r) for r in RERANKERS if r != DEFAULT and f"{prefix}{r}" == name), None)

    @property
    def score_name(self) -> str:  # type: ignore[override]
        return reranker_class(self.reranker).score_name

    def config(self, request: StageRequest) -> Any:
        return _rerank_config(request, self.reranker, request.folder)

    def key_record(self, request: StageRequest, config: Any) -> dict[str, Any]:
        return {"rerank": reranker_class(self.reranker).key_settings(config), "candidates": request.keys["candidates"]}

    def run(self, config: Any, ctx: Any) -> Path:
        from .reranker import rerank

        return rerank(config, ctx)

    replayable = True

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False) -> Any:
        """The prompt-guided reranker as its folder recorded it (:meth:`PromptGuidedReranker.load`: its LM,
        demonstrations and prompt; a per-query strategy that embeds with the index's encoder reuses the loaded one),
        or any other reranker rebuilt from its folder's manifest (:class:`~pgra.rerank.stage.Replay`)."""
        from .stage import Replay, reranker_of

        if reranker_of(manifest) != DEFAULT:
            return Replay.load(folder, index.corpus, device, trust_remote_code)
        from ..retrieval.base import recorded_encoder
        from .core import PromptGuidedReranker

        encoder = index.encoder if recorded_encoder(index.manifest) else None
        return PromptGuidedReranker.load(folder, index.corpus, device, trust_remote_code, encoder=encoder)


@STAGES.register
class FullSearchStage(Stage):
    """``pgra_full``'s evidence: each input's top d of the whole corpus under the prompt-guided embedding, the
    rerank section's settings but ``k`` (its search covers every sentence)."""

    family = "full_search"
    kind = FULL_SEARCH_KIND
    score_name = "inner product"

    def config(self, request: StageRequest) -> Any:
        return _rerank_config(request, DEFAULT, request.folder)

    def key_record(self, request: StageRequest, config: Any) -> dict[str, Any]:
        guided = {k: v for k, v in reranker_class(DEFAULT).key_settings(config).items() if k != "k"}
        return {"full_search": guided, "candidates": request.keys["candidates"]}

    def run(self, config: Any, ctx: Any) -> Path:
        from .full_search import full_search

        return full_search(config, ctx)

    replayable = True

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False) -> Any:
        """The search of the whole corpus under the folder's prompt (:class:`~pgra.rerank.full_search.FullSearchReplay`:
        the corpus pass's embeddings must be where the folder recorded them)."""
        from .full_search import FullSearchReplay

        return FullSearchReplay.load(folder, index.corpus, device, trust_remote_code)


__all__ = ["RERANKED", "FullSearchStage", "RerankedStage", "reranked_stage"]
