"""``pgra_full``'s stage (``full_search``): each input's top d of the whole corpus under the prompt-guided
embedding, the prompt-guided reranker's own second stage (its work: :mod:`.full_search`). Registered when the
reranker is (this package's ``__init__``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...retrieval.candidates_stage import CandidatesStage
from ...stages import STAGES, Carried, ModelNeed, PlanRequest, Stage, StagePlan, StageRequest
from ...stages.runner import StageRun
from ...storage.artifacts import MANIFEST
from ..stage import FULL_SEARCH_KIND, second_stage_config, second_stage_plan
from .reranker import PromptGuided


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
        return second_stage_config(request, PromptGuided.name)

    def key_record(self, request: StageRequest, config: Any) -> dict[str, Any]:
        guided = {k: v for k, v in PromptGuided.key_settings(config).items() if k != "k"}
        return {"full_search": guided, "candidates": request.keys["candidates"]}

    def build(self, config: Any, inputs: Any, run: StageRun) -> dict[str, Any] | None:
        """The corpus pass, then each input's search of the corpus (:func:`.full_search.search_stage`)."""
        from .full_search import search_stage

        return search_stage(config, run)

    def plan(self, request: PlanRequest) -> StagePlan:
        """Its LM's texts: the whole corpus, or only its queries (the inputs) when the reranked stage's corpus pass
        embedded it; the prompt-guided LM's price over them."""
        r = request
        texts = (r.inputs or None) if r.corpus_passed and PromptGuided.folder in r.stages else r.corpus
        return second_stage_plan(r, None if r.fits is None else PromptGuided.price(r.fits, self.family, r.inputs, texts), texts, 0)

    def models(self, rerank: Any) -> list[ModelNeed]:
        return PromptGuided.models(rerank)

    replayable = True

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False, model: str | Path | None = None,
               store: Path | None = None) -> Any:
        """The search of the whole corpus under the folder's prompt (:class:`~pgra.rerank.prompt_guided.full_search.FullSearchReplay`:
        the corpus pass's embeddings must be where the folder recorded them, or in ``store``)."""
        from .full_search import FullSearchReplay

        return FullSearchReplay.load(folder, index.corpus, device, trust_remote_code, lm=model, store=store)

    @classmethod
    def carried(cls, folder: Path, manifest: dict[str, Any]) -> Carried:
        """Its demonstrations, its LM and the corpus pass's embeddings it searches (checked complete here)."""
        from ...core.errors import InputError
        from .full_search import complete_store

        embedding = manifest.get("embedding")
        cache = embedding.get("cache") if isinstance(embedding, dict) else None
        if not isinstance(cache, str) or not cache:
            raise InputError("names no cache of the corpus pass's embeddings it searched (embedding.cache): run the "
                             "experiment's full_search stage again", path=folder / MANIFEST, field="embedding.cache")
        cache = Path(cache).resolve()
        complete_store(cache)
        return Carried(files=("demonstrations.json",), model=manifest["lm"], model_fingerprint=manifest["lm_fingerprint"],
                       store=cache, title="prompt-guided search of the whole corpus")
