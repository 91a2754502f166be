"""The stages of the second stage, each reading a task's ``candidates``: ``reranked`` (the prompt-guided reranker's
top d, :mod:`pgra.rerank.reranker`), ``reranked-<name>`` (any other registered reranker's, :mod:`pgra.rerank.stage`)
and ``full_search`` (``pgra_full``'s top d of the whole corpus, :mod:`pgra.rerank.full_search`).

Their keys are what they always were: a reranked folder's the reranker's settings (:meth:`Reranker.key_settings`)
and the candidates' key; ``full_search``'s the prompt-guided reranker's settings but ``k``, and the candidates' key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..artifacts import MANIFEST, safe_name
from ..cost import Priced
from ..stages import CTX_BYTES, STAGES, Carried, Stage, StageRequest
from .base import DEFAULT, RERANKERS, reranker_class
from .stage import FULL_SEARCH_KIND, RERANKED_KIND

RERANKED = "reranked"


def reranked_stage(reranker: str) -> str:
    """The stage (and folder) name of a reranker's top-d: ``reranked`` for the prompt-guided one (as always),
    ``reranked-<name>`` for another."""
    return RERANKED if reranker == DEFAULT else f"{RERANKED}-{safe_name(reranker, 'rerank.reranker', what='reranker name')}"

RERANKED_CTX_BYTES = 50  # a reranked candidate's retrieval score and rank on top of a candidate's keys
DEMO_BYTES = 35  # a demonstration's id and label in a reranked line


def _line(rerank: Any, input_bytes: float, sentence_bytes: float, demos: int) -> tuple[float, str, int]:
    """A line of the input's record, its top d and ``demos`` demonstrations."""
    return (input_bytes + rerank.top_d * (sentence_bytes + CTX_BYTES + RERANKED_CTX_BYTES) + demos * DEMO_BYTES,
            "their top d={}", rerank.top_d)


def _lm_price(fits: Any, family: str, inputs: int | None, texts: int | None) -> Priced | None:
    """The prompt-guided LM's stage priced from the bench: its ``texts`` at the bench's seconds per embedded
    sentence (``rerank_scale.json``), plus on a CPU the stage's measured fixed part and seconds per input."""
    if not texts:
        return None
    seconds = fits.rerank_seconds(texts)
    if seconds is None:
        return None
    source = f"{fits.rerank_source}, {texts} candidates"
    fixed = fits.cpu_price(family, inputs)
    if fixed is not None:
        seconds, source = max(seconds + fixed.seconds, 0.0), f"{source}; plus {fixed.source}"
    return Priced(seconds, source, fits.device)


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

    def embedded_texts(self, rerank: Any, retrieved_k: int, inputs: int | None, corpus: int | None,
                       stages: Sequence[str], corpus_passed: bool = False) -> int | None:
        """Its inputs x k (x the retrieved k with ``corpus_pass: candidates``), at most the corpus when every text
        shares one prompt (the cache embeds a sentence once per task); the whole corpus with ``corpus_pass:
        corpus``."""
        from ..selection import STRATEGIES

        if rerank.corpus_pass == "corpus":
            return corpus
        shared = not STRATEGIES[rerank.demo_selection].per_query
        k = retrieved_k if rerank.corpus_pass == "candidates" else rerank.k or retrieved_k
        embedded = inputs * k if inputs and k else None
        return min(embedded, corpus) if embedded and corpus and shared else embedded

    def price(self, fits: Any, inputs: int | None, texts: int | None) -> Priced | None:
        """The prompt-guided reranker's LM over the texts it embeds (the bench measures that LM's embedding; another
        reranker's own work has no fit: None)."""
        return _lm_price(fits, self.family, inputs, texts) if self.reranker == DEFAULT else None

    def planned_line(self, rerank: Any, retrieved_k: int, input_bytes: float, sentence_bytes: float
                     ) -> tuple[float, str, int] | None:
        return _line(rerank, input_bytes, sentence_bytes, rerank.num_demos)

    def models(self, rerank: Any) -> list[str]:
        return [str(rerank.lm)] if self.reranker == DEFAULT else []

    replayable = True

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False, model: str | Path | None = None,
               store: Path | None = None) -> Any:
        """The prompt-guided reranker as its folder recorded it (:meth:`PromptGuidedReranker.load`: its LM,
        demonstrations and prompt; a per-query strategy that embeds with the index's encoder reuses the loaded one),
        or any other reranker rebuilt from its folder's manifest (:class:`~pgra.rerank.stage.Replay`) over
        ``index``'s folder; ``model``: its model's folder when not where the manifest says."""
        from .stage import Replay, reranker_of

        if reranker_of(manifest) != DEFAULT:
            return Replay.load(folder, index.corpus, device, trust_remote_code, model=model, index=index.directory)
        from ..retrieval.base import recorded_encoder
        from .core import PromptGuidedReranker

        # only a per-query strategy refits with it (loading it otherwise would load a model nothing uses)
        per_query = bool(manifest.get("per_query_demonstrations"))
        encoder = index.encoder if per_query and recorded_encoder(index.manifest) else None
        return PromptGuidedReranker.load(folder, index.corpus, device, trust_remote_code, lm=model, encoder=encoder)

    @classmethod
    def carried(cls, folder: Path, manifest: dict[str, Any]) -> Carried:
        """The prompt-guided reranker's demonstrations and LM (one set of demonstrations: a per-query selector is
        refitted on the training split, which an export does not carry), or another reranker's model."""
        from ..errors import InputError
        from .stage import model_of, reranker_of

        name = reranker_of(manifest)
        if name != DEFAULT:
            model, fingerprint = model_of(manifest)
            return Carried(model=model, model_fingerprint=fingerprint, title=reranker_class(name).title or name)
        if manifest.get("per_query_demonstrations"):
            raise InputError("a reranking with per-query demonstrations refits its selector on the training split at "
                             "load time, which an export does not carry: export a run whose reranker shows one set "
                             "of demonstrations", path=folder / MANIFEST, field="per_query_demonstrations")
        return Carried(files=("demonstrations.json",), model=manifest["lm"], model_fingerprint=manifest["lm_fingerprint"],
                       title="prompt-guided reranking")


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

    def embedded_texts(self, rerank: Any, retrieved_k: int, inputs: int | None, corpus: int | None,
                       stages: Sequence[str], corpus_passed: bool = False) -> int | None:
        """The whole corpus, or only its queries (``inputs``) when the reranked stage's corpus pass embedded it."""
        return (inputs or None) if corpus_passed and RERANKED in stages else corpus

    def price(self, fits: Any, inputs: int | None, texts: int | None) -> Priced | None:
        """The prompt-guided LM over the texts it embeds (the corpus, or only the queries after a corpus pass)."""
        return _lm_price(fits, self.family, inputs, texts)

    def planned_line(self, rerank: Any, retrieved_k: int, input_bytes: float, sentence_bytes: float
                     ) -> tuple[float, str, int] | None:
        return _line(rerank, input_bytes, sentence_bytes, 0)

    def models(self, rerank: Any) -> list[str]:
        return [str(rerank.lm)]

    replayable = True

    @classmethod
    def replay(cls, folder: Path, manifest: dict[str, Any], index: Any, device: str | None = None,
               trust_remote_code: bool = False, model: str | Path | None = None,
               store: Path | None = None) -> Any:
        """The search of the whole corpus under the folder's prompt (:class:`~pgra.rerank.full_search.FullSearchReplay`:
        the corpus pass's embeddings must be where the folder recorded them, or in ``store``)."""
        from .full_search import FullSearchReplay

        return FullSearchReplay.load(folder, index.corpus, device, trust_remote_code, lm=model, store=store)

    @classmethod
    def carried(cls, folder: Path, manifest: dict[str, Any]) -> Carried:
        """Its demonstrations, its LM and the corpus pass's embeddings it searches (checked complete here)."""
        from ..errors import InputError
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


__all__ = ["RERANKED", "FullSearchStage", "RerankedStage", "reranked_stage"]
