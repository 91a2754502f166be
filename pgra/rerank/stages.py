"""The second stages, each reading a task's ``candidates``: a reranker's top d (``reranked`` for the prompt-guided
one, ``reranked-<name>``: each reranker's own stage, :meth:`Reranker.build_stage`) and ``full_search`` (``pgra_full``'s
top d of the whole corpus, :mod:`pgra.rerank.prompt_guided.full_search`). Their keys are what they always were: the reranker's
settings (:meth:`Reranker.key_settings`; the full search's: the prompt-guided one's but ``k``) and the candidates'.
Importing this module registers every built-in stage family (the candidates' too: the stage they read).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..retrieval.candidates_stage import CandidatesStage
from ..runtime.cost import Priced
from ..stages import CTX_BYTES, STAGES, Carried, ModelNeed, PlanRequest, Stage, StagePlan, StageRequest
from ..stages.runner import StageRun
from ..storage.artifacts import MANIFEST, safe_name
from .base import RERANKERS, reranker_class
from .prompt_guided.reranker import PromptGuided
from .stage import FULL_SEARCH_KIND, RERANKED_KIND

RERANKED = "reranked"


def reranked_stage(reranker: str) -> str:
    """The stage (and folder) name of a reranker's top-d: its own :attr:`Reranker.folder` (the prompt-guided one's
    ``reranked``, as always), else ``reranked-<name>``."""
    RERANKERS.load_builtin()
    own = getattr(RERANKERS.get(reranker), "folder", "")
    return own or f"{RERANKED}-{safe_name(reranker, 'rerank.reranker', what='reranker name')}"


RERANKED_CTX_BYTES = 50  # a reranked candidate's retrieval score and rank on top of a candidate's keys
DEMO_BYTES = 35  # a demonstration's id and label in a reranked line


def _plan(request: PlanRequest, priced: Priced | None, texts: int | None, demos: int) -> StagePlan:
    """A second stage's plan: its files a line per input of its record, its top d and ``demos`` demonstrations."""
    r, d = request, request.rerank.top_d
    line = r.input_bytes + d * (r.sentence_bytes + CTX_BYTES + RERANKED_CTX_BYTES) + demos * DEMO_BYTES
    return StagePlan(priced, texts, r.lines(line), ("their top d={}", d))


def _rerank_config(request: StageRequest, reranker: str, out: Path) -> Any:
    s = request.settings
    return replace(s.rerank, candidates=str(request.inputs["candidates"]), out=str(out), task="", index=s.index.out,
                   show_progress=s.show_progress, reranker=reranker)


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
        return _rerank_config(request, self.reranker, request.folder)

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
        return _plan(r, priced, texts, rerank.num_demos)

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


@STAGES.register
class FullSearchStage(Stage):
    """``pgra_full``'s evidence: each input's top d of the whole corpus under the prompt-guided embedding, the
    rerank section's settings but ``k`` (its search covers every sentence)."""

    family = "full_search"
    kind = FULL_SEARCH_KIND
    reads = (CandidatesStage.family,)
    every_rank = True
    score_name = "inner product"

    def config(self, request: StageRequest) -> Any:
        return _rerank_config(request, PromptGuided.name, request.folder)

    def key_record(self, request: StageRequest, config: Any) -> dict[str, Any]:
        guided = {k: v for k, v in PromptGuided.key_settings(config).items() if k != "k"}
        return {"full_search": guided, "candidates": request.keys["candidates"]}

    def build(self, config: Any, inputs: Any, run: StageRun) -> dict[str, Any] | None:
        """The corpus pass, then each input's search of the corpus (:func:`pgra.rerank.prompt_guided.full_search.search_stage`)."""
        from .prompt_guided.full_search import search_stage

        return search_stage(config, run)

    def plan(self, request: PlanRequest) -> StagePlan:
        """Its LM's texts: the whole corpus, or only its queries (the inputs) when the reranked stage's corpus pass
        embedded it; the prompt-guided LM's price over them."""
        r = request
        texts = (r.inputs or None) if r.corpus_passed and RERANKED in r.stages else r.corpus
        return _plan(r, None if r.fits is None else PromptGuided.price(r.fits, self.family, r.inputs, texts), texts, 0)

    def models(self, rerank: Any) -> list[ModelNeed]:
        return PromptGuided.models(rerank)

    replayable = True

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False, model: str | Path | None = None,
               store: Path | None = None) -> Any:
        """The search of the whole corpus under the folder's prompt (:class:`~pgra.rerank.prompt_guided.full_search.FullSearchReplay`:
        the corpus pass's embeddings must be where the folder recorded them, or in ``store``)."""
        from .prompt_guided.full_search import FullSearchReplay

        return FullSearchReplay.load(folder, index.corpus, device, trust_remote_code, lm=model, store=store)

    @classmethod
    def carried(cls, folder: Path, manifest: dict[str, Any]) -> Carried:
        """Its demonstrations, its LM and the corpus pass's embeddings it searches (checked complete here)."""
        from ..core.errors import InputError
        from .prompt_guided.full_search import complete_store

        embedding = manifest.get("embedding")
        cache = embedding.get("cache") if isinstance(embedding, dict) else None
        if not isinstance(cache, str) or not cache:
            raise InputError("names no cache of the corpus pass's embeddings it searched (embedding.cache): run the "
                             "experiment's full_search stage again", path=folder / MANIFEST, field="embedding.cache")
        cache = Path(cache).resolve()
        complete_store(cache)
        return Carried(files=("demonstrations.json",), model=manifest["lm"], model_fingerprint=manifest["lm_fingerprint"],
                       store=cache, title="prompt-guided search of the whole corpus")


def rerank(cfg: Any, ctx: Any = None) -> Path:
    """``pgra rerank``: a candidates folder reranked by ``cfg.reranker`` through the one runner; returns the folder."""
    return RerankedStage(cfg.reranker).run(cfg, ctx)


__all__ = ["RERANKED", "FullSearchStage", "RerankedStage", "rerank", "reranked_stage"]
