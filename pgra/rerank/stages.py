"""The second stage every reranker has, reading a task's ``candidates``: its top d (``reranked`` for the
prompt-guided one, ``reranked-<name>``: :meth:`Reranker.build_stage`), keyed by the reranker's settings
(:meth:`Reranker.key_settings`) and the candidates'. Importing this module registers every built-in stage family:
the candidates' (the stage they read), this one and those a reranker brings (the prompt-guided one's ``full_search``,
:mod:`pgra.rerank.prompt_guided.search_stage`), loaded with the built-in rerankers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..retrieval.candidates_stage import CandidatesStage
from ..stages import STAGES, Carried, ModelNeed, PlanRequest, Stage, StagePlan, StageRequest
from ..stages.runner import StageRun
from ..storage.artifacts import safe_name
from .base import RERANKERS, reranker_class
from .stage import RERANKED_KIND, second_stage_config, second_stage_plan

RERANKED = "reranked"


def reranked_stage(reranker: str) -> str:
    """The stage (and folder) name of a reranker's top-d: its own :attr:`Reranker.folder` (the prompt-guided one's
    ``reranked``, as always), else ``reranked-<name>``."""
    if reranker not in RERANKERS:  # (the built-in ones are registered on import: no plug-in loaded for them)
        RERANKERS.load_builtin()
    own = getattr(RERANKERS.get(reranker), "folder", "")
    return own or f"{RERANKED}-{safe_name(reranker, 'rerank.reranker', what='reranker name')}"


@STAGES.register
class RerankedStage(Stage):
    """A reranker's top d of each input's candidates (one stage per reranker: ``reranked``, ``reranked-<name>``)."""

    family = RERANKED
    kind = RERANKED_KIND
    reads = (CandidatesStage.family,)
    every_rank = True

    def __init__(self, reranker: str) -> None:
        super().__init__(reranked_stage(reranker))
        self.reranker = reranker

    @classmethod
    def named(cls, name: str) -> RerankedStage | None:
        if name != RERANKED and not name.startswith(f"{RERANKED}-"):
            return None
        RERANKERS.load_builtin()
        return next((cls(r) for r in RERANKERS if reranked_stage(r) == name), None)

    @property
    def score_name(self) -> str:  # type: ignore[override]
        return reranker_class(self.reranker).score_name

    def config(self, request: StageRequest) -> Any:
        return second_stage_config(request, self.reranker)

    def key_record(self, request: StageRequest, config: Any) -> dict[str, Any]:
        return {"rerank": reranker_class(self.reranker).key_settings(config), "candidates": request.keys["candidates"]}

    def build(self, config: Any, inputs: Any, run: StageRun) -> dict[str, Any] | None:
        """Its reranker's :meth:`Reranker.build_stage` (the prompt-guided one's keeps the embedding caches)."""
        return reranker_class(config.reranker, "rerank.reranker").build_stage(config, run)

    def plan(self, request: PlanRequest) -> StagePlan:
        """Its LM's texts: its inputs x k (x the retrieved k with ``corpus_pass: candidates``), at most the corpus
        when every text shares one prompt (the cache embeds a sentence once per task); the whole corpus with
        ``corpus_pass: corpus``. Its reranker's price over them (:meth:`Reranker.price`)."""
        from ..selection import STRATEGIES

        r, rerank = request, request.rerank
        k = r.retrieved_k if rerank.corpus_pass == "candidates" else rerank.k or r.retrieved_k
        texts = r.inputs * k if r.inputs and k else None
        if rerank.corpus_pass == "corpus":
            texts = r.corpus
        elif texts and r.corpus and not STRATEGIES[rerank.demo_selection].per_query:
            texts = min(texts, r.corpus)
        priced = None if r.fits is None else reranker_class(self.reranker).price(r.fits, self.family, r.inputs, texts)
        return second_stage_plan(r, priced, texts, rerank.num_demos)

    def models(self, rerank: Any) -> list[ModelNeed]:
        return reranker_class(self.reranker).models(rerank)

    replayable = True

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False, model: str | Path | None = None,
               store: Path | None = None) -> Any:
        """Its reranker as its folder recorded it, over ``index`` (:class:`~pgra.rerank.stage.Replay`); ``model``:
        its model's folder when not where the manifest says."""
        from .stage import Replay

        return Replay.load(folder, index, device, trust_remote_code, model=model)

    @classmethod
    def carried(cls, folder: Path, manifest: dict[str, Any]) -> Carried:
        """Its reranker's own (:meth:`Reranker.own_carried`: the prompt-guided one's demonstrations and LM), else
        its one model."""
        from .stage import model_of, reranker_of

        kind = reranker_class(reranker_of(manifest))
        own = kind.own_carried(folder, manifest)
        if own is not None:
            return own
        model, fingerprint = model_of(manifest)
        return Carried(model=model, model_fingerprint=fingerprint, title=kind.title or kind.name)


RERANKERS.import_builtin()  # their own stages too (the prompt-guided reranker's full search); no plug-in yet


def rerank(cfg: Any, ctx: Any = None) -> Path:
    """``pgra rerank``: a candidates folder reranked by ``cfg.reranker`` through the one runner; returns the folder."""
    return RerankedStage(cfg.reranker).run(cfg, ctx)


__all__ = ["RERANKED", "RerankedStage", "rerank", "reranked_stage"]
