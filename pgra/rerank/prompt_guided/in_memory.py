"""The in-memory reranker: the LM embedder, the demonstrations and the scoring (Eq. 3) behind one call.

``PromptGuidedReranker.rerank(queries, candidates)`` takes texts and each text's first-stage candidates (dicts with ``id``,
``text`` and the first-stage ``score``) and returns each text's top d, best first, each with the reranker's
probability as ``score`` and its ``retrieval_score`` and ``retrieval_rank``. The stage (``pgra rerank``) builds
one from its config and calls it on every split with the embeddings its caches hold; ``Pipeline`` loads the one
a reranked folder describes (:meth:`PromptGuidedReranker.load`) and calls it on raw texts::

    reranker = pgra.PromptGuidedReranker.load("runs/demo-experiment/mr/reranked", index.corpus)
    hits = index.search_hits(["A warm, funny and beautifully acted film."], k=reranker.k)
    top = reranker.rerank(["A warm, funny and beautifully acted film."], hits)[0]    # [{id, text, score, retrieval_rank ...}]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...core.config import from_dict
from ...core.errors import InputError, StaleArtifactError
from ...data.corpus import CorpusStore
from ...data.interchange import read_records
from ...lm.loading import remote_code_allowed
from ...lm.prompts import ANSWER_CUE, HEADER, demo_prefix, render_demo
from ...selection import get_selector
from ...selection.base import Selector, with_index_encoder
from ...storage.artifacts import MANIFEST, read_json, read_manifest
from ...tasks import Example, TaskSpec, task_from_manifest
from ..base import ranked
from ..config import RerankConfig, rerank_config
from ..stage import RERANKED_KIND, candidates_of
from .cache import EmbeddingCache
from .embedder import LMEmbedder
from .scoring import score_candidates

# one query's vectors: (its embedding, its candidates' embeddings in candidate order)
Vectors = Callable[[int], tuple[np.ndarray, np.ndarray]]


def prompt_key(embedder: LMEmbedder, lm_name: str, task: TaskSpec, demos: list[Example]) -> dict[str, Any]:
    """What an embedding depends on besides its text: the LM, its precision and context, and the prompt."""
    return {"lm": embedder.fingerprint, "lm_name": lm_name, "dtype": str(embedder.dtype),
            "max_context": embedder.max_context, "header": HEADER, "cue": ANSWER_CUE,
            "template": task.rerank_template, "demos": [render_demo(task, d) for d in demos]}


def evidence_cache_key(base_key: dict[str, Any], corpus_fingerprint: str) -> dict[str, Any]:
    """The key of the evidence-embedding cache (one row per corpus position)."""
    return {**base_key, "rows": "corpus", "corpus": corpus_fingerprint}


class PromptGuidedReranker:
    """One reranking: an LM embedder, the demonstrations (one shared list, or a fitted per-query ``selector``),
    k and d, and the scoring. ``corpus`` and ``evidence_cache`` (the shared prompt's corpus-row cache) let
    :meth:`rerank` read cached evidence embeddings and embed each corpus sentence once per call."""

    def __init__(self, task: TaskSpec, embedder: LMEmbedder, top_d: int, k: int = 0, demos: Sequence[Example] = (),
                 selector: Selector | None = None, prefix_cache: bool = True, corpus: CorpusStore | None = None,
                 evidence_cache: EmbeddingCache | None = None) -> None:
        self.task, self.embedder, self.top_d, self.k = task, embedder, top_d, k
        self.demos, self.selector, self.prefix_cache = list(demos), selector, prefix_cache
        self.corpus, self.evidence_cache = corpus, evidence_cache

    @classmethod
    def from_config(cls, cfg: RerankConfig, task: TaskSpec, demos: Sequence[Example] = (), **kwargs: Any) -> PromptGuidedReranker:
        """The reranker of a stage's config (its LM loaded with the config's LM block)."""
        embedder = LMEmbedder(cfg.lm, **cfg.lm_settings(), trust_remote_code=cfg.trust_remote_code)
        return cls(task, embedder, cfg.top_d, cfg.k, demos, prefix_cache=cfg.prefix_cache, **kwargs)

    @classmethod
    def load(cls, reranked: str | Path, corpus: CorpusStore | None, device: str | None = None,
             trust_remote_code: bool = False, lm: str | Path | None = None, encoder: Any = None) -> PromptGuidedReranker:
        """The reranking a ``pgra rerank`` folder did, to replay on new texts: its LM (refused if its files
        changed), k and d, its demonstrations (a per-query strategy fitted again on the training split it selected
        from) and, when still there, its evidence cache. ``trust_remote_code``: let the LM run its own code; what
        the manifest recorded never does. ``lm``: the LM's folder when it is no longer where the manifest says (an
        exported run's copy); it must be the same files. ``encoder``: the index's sentence encoder, already loaded,
        which a per-query strategy that embeds inputs with that model (KATE by default) uses instead of loading it
        again."""
        reranked = Path(reranked)
        m = read_manifest(reranked, RERANKED_KIND)
        if m.get("reranker", "prompt_guided") != "prompt_guided":
            raise InputError(f"{reranked} was reranked by '{m['reranker']}', not the prompt-guided reranker: "
                             "pgra.rerank.stage.Replay.load replays it", path=reranked / MANIFEST, field="reranker")
        if lm is not None:
            m = {**m, "lm": str(lm)}
        task = task_from_manifest(m, reranked / MANIFEST)
        trust = remote_code_allowed(m["lm"], trust_remote_code, m["config"].get("trust_remote_code"), "reranking LM",
                                    reranked / MANIFEST)
        cfg = from_dict(rerank_config(), m["config"], source="reranked manifest")
        embedder = LMEmbedder(m["lm"], **{**cfg.lm_settings(), "device": device}, trust_remote_code=trust)
        if embedder.fingerprint != m["lm_fingerprint"]:
            raise StaleArtifactError(f"the LM at {m['lm']} is not the one {reranked} was reranked with (its files "
                                     "changed)")
        kwargs: dict[str, Any] = {"prefix_cache": cfg.prefix_cache, "corpus": corpus}
        if m.get("per_query_demonstrations"):  # each text gets its own demonstrations, as the run's queries did
            kwargs["selector"] = _refit_selector(reranked, m, cfg, task, encoder)
        else:
            kwargs["demos"] = [Example(str(d["id"]), d["text"], d["label"])
                               for d in read_json(reranked / "demonstrations.json")]
            if corpus is not None:
                key = evidence_cache_key(prompt_key(embedder, m["lm"], task, kwargs["demos"]), corpus.fingerprint)
                with suppress(Exception):  # no cache here (another machine, deleted): the evidence is embedded
                    kwargs["evidence_cache"] = EmbeddingCache(Path(m["embedding"]["cache"]).parent, key, len(corpus),
                                                              embedder.dim, create=False)
        return cls(task, embedder, int(m["top_d"]), int(m["k"]), **kwargs)

    @property
    def per_query(self) -> bool:
        """Whether every query gets its own demonstrations (a per-query selector)."""
        return self.selector is not None

    def embed(self, texts: Sequence[str], demos: Sequence[Example], show_progress: bool = False,
              desc: str = "embedding") -> np.ndarray:
        """Unit embeddings of ``texts`` under the prompt of ``demos``: the demonstrations' KV cache reused, or
        (``prefix_cache`` off) whole prompts, the paper code's way."""
        prefix = demo_prefix(self.task, demos)
        if self.prefix_cache:
            return self.embedder.embed(texts, prefix, self.task.render, ANSWER_CUE, show_progress=show_progress,
                                       desc=desc)
        ids = [self.embedder.prompt_ids(prefix, self.task.render, ANSWER_CUE, t) for t in texts]
        return self.embedder.embed_full(ids, batch_size=4, show_progress=show_progress)

    def demonstrations(self, queries: Sequence[str]) -> list[list[Example]]:
        """Each query's demonstrations: the shared list, or the selector's choice for it."""
        if self.selector is None:
            return [self.demos] * len(queries)
        return self.selector.select_examples([Example(f"input-{i}", t) for i, t in enumerate(queries)])

    def rerank(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]],
               vectors: Vectors | None = None) -> list[list[dict[str, Any]]]:
        """Per query, its first k candidates' top d, best first (fewer when it has fewer). ``vectors(i)``: query
        i's embedding and its candidates' (the stage reads them from its caches); by default they are embedded
        here, cached evidence read from the evidence cache."""
        candidates = [list(c[: self.k]) if self.k else list(c) for c in candidates]
        if vectors is None:
            vectors = self._per_query_vectors(queries, candidates) if self.per_query else \
                self._shared_vectors(queries, candidates)
        return [ranked(c, score_candidates(*vectors(i), self.top_d)[1], self.top_d) for i, c in enumerate(candidates)]

    def _per_query_vectors(self, queries: Sequence[str], candidates: list[list[dict[str, Any]]]) -> Vectors:
        """Each query and its candidates under that query's own prompt."""
        rows = [self.embed([q, *(c["text"] for c in cs)], demos)
                for q, cs, demos in zip(queries, candidates, self.demonstrations(queries), strict=True)]
        return lambda i: (rows[i][0], rows[i][1:])

    def _shared_vectors(self, queries: Sequence[str], candidates: list[list[dict[str, Any]]]) -> Vectors:
        """The queries in one call, every distinct evidence sentence once (cached ones read, not embedded)."""
        q = self.embed(queries, self.demos)
        if self.corpus is None:  # no corpus rows to share: the candidates' own texts
            sizes = np.cumsum([0, *(len(cs) for cs in candidates)])
            e = self.embed([c["text"] for cs in candidates for c in cs], self.demos)
            return lambda i: (q[i], e[sizes[i]:sizes[i + 1]])
        rows_of = [np.fromiter((self.corpus.position(c["id"]) for c in cs), dtype=np.int64) for cs in candidates]
        rows, vecs = self.evidence(np.concatenate(rows_of) if rows_of else np.zeros(0, np.int64))
        where = {int(r): j for j, r in enumerate(rows)}
        return lambda i: (q[i], vecs[[where[int(x)] for x in rows_of[i]]])

    def evidence(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(unique corpus rows, their embeddings)`` under the shared prompt: cached rows read from the evidence
        cache, the others embedded now."""
        rows = np.unique(rows)
        vecs = np.empty((len(rows), self.embedder.dim), dtype=np.float32)
        cache = self.evidence_cache
        done = ~np.isin(rows, cache.missing(rows)) if cache is not None else np.zeros(len(rows), bool)
        if done.any():
            vecs[done] = cache.get(rows[done])
        if (~done).any():
            vecs[~done] = self.embed(self.corpus.texts(rows[~done]), self.demos)
        return rows, vecs


def _refit_selector(reranked: Path, manifest: dict[str, Any], cfg: RerankConfig, task: TaskSpec,
                    encoder: Any = None) -> Selector:
    """A reranked folder's per-query selector, fitted again on the training split it selected from."""
    train_file = candidates_of(reranked, manifest) / "train.jsonl"
    train = [Example(str(r["id"]), r["text"], r.get("label")) for r in read_records(train_file, labels=task.labels)]
    settings = with_index_encoder(replace(cfg.demos), manifest["candidates"]["index"])
    return get_selector(cfg.demo_selection, cfg.num_demos, cfg.seed, settings, lm=cfg.lm,
                        encoder=encoder).fit(task, train)


__all__ = ["PromptGuidedReranker", "evidence_cache_key", "prompt_key"]
