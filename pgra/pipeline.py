"""``Pipeline.load(run).predict(texts)``: retrieve, rerank and read raw texts exactly as the run did.

The run's manifests lead back to everything: a reader run names its data folder; a reranked folder names its
LM, demonstrations, k and d and its candidates folder; a candidates folder names its index and k. Evidence
embeddings come from the reranker's cache when present (only missing sentences run the LM)::

    pipe = pgra.Pipeline.load("runs/demo-experiment/wiki_topic/pgra/seed-1")
    out = pipe.predict(["The planet orbits the sun"])[0]
    out["prediction"], out["scores"], out["evidence"][0]    # label, probability per label, {id, text, score}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .artifacts import MANIFEST, read_json, read_manifest, verify_run
from .errors import InputError, StaleArtifactError
from .itself import without_itself
from .methods import load_run
from .predictions import Predictor


class _Reranking:
    """The reranking a ``pgra rerank`` folder did, replayable on new texts."""

    def __init__(self, reranked: Path, corpus, device: str | None, trust_remote_code: bool = False) -> None:
        from .loading import remote_code_allowed
        from .rerank.cache import EmbeddingCache
        from .rerank.embedder import LMEmbedder
        from .rerank.reranker import evidence_cache_key, prompt_key
        from .tasks import Example, task_from_manifest

        m = read_manifest(reranked, "reranked")
        cfg = m["config"]
        self.task = task_from_manifest(m, reranked / MANIFEST)
        self.k, self.top_d, self.prefix, self.corpus = int(m["k"]), int(m["top_d"]), m["prompt_prefix"], corpus
        # the LM runs its own code only when the caller allows it, never because the manifest says so
        trust = remote_code_allowed(m["lm"], trust_remote_code, cfg.get("trust_remote_code"), "reranking LM",
                                    reranked / MANIFEST)
        self.embedder = LMEmbedder(m["lm"], device=device, dtype=cfg["dtype"],
                                   attn_implementation=cfg["attn_implementation"],
                                   max_tokens_per_batch=cfg["max_tokens_per_batch"],
                                   max_batch_size=cfg["max_batch_size"], max_context=cfg["max_context"] or None,
                                   trust_remote_code=trust)
        if self.embedder.fingerprint != m["lm_fingerprint"]:
            raise StaleArtifactError(f"the LM at {m['lm']} is not the one {reranked} was reranked with (its files "
                                     "changed)")
        self.selector = None
        if m.get("per_query_demonstrations"):  # each text gets its own demonstrations, as the run's queries did
            self.selector = _per_query_selector(m, self.task)
            self.cache = None
            return
        demos = [Example(str(d["id"]), d["text"], d["label"]) for d in read_json(reranked / "demonstrations.json")]
        key = evidence_cache_key(prompt_key(self.embedder, m["lm"], self.task, demos), corpus.fingerprint)
        try:
            self.cache = EmbeddingCache(Path(m["embedding"]["cache"]).parent, key, len(corpus), self.embedder.dim,
                                        create=False)
        except Exception:  # no cache here (another machine, deleted): embed the evidence
            self.cache = None

    def _embed(self, texts: list[str]) -> np.ndarray:
        from .rerank.prompts import ANSWER_CUE

        return self.embedder.embed(texts, self.prefix, self.task.render, ANSWER_CUE)

    def evidence(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(unique rows, their embeddings)``: cached rows read from the cache, the others embedded now."""
        rows = np.unique(rows)
        vecs = np.empty((len(rows), self.embedder.dim), dtype=np.float32)
        done = ~np.isin(rows, self.cache.missing(rows)) if self.cache is not None else np.zeros(len(rows), bool)
        if done.any():
            vecs[done] = self.cache.get(rows[done])
        if (~done).any():
            vecs[~done] = self._embed(self.corpus.texts(rows[~done]))
        return rows, vecs

    def _rerank_per_query(self, texts: list[str], hits: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        from .rerank.prompts import ANSWER_CUE, demo_prefix
        from .rerank.scoring import reranked_ctxs
        from .tasks import Example

        out = []
        queries = [Example(f"input-{i}", t) for i, t in enumerate(texts)]
        for text, h, demos in zip(texts, hits, self.selector.select_examples(queries), strict=True):
            vecs = self.embedder.embed([text, *(c["text"] for c in h)], demo_prefix(self.task, demos), self.task.render,
                                       ANSWER_CUE)
            out.append(reranked_ctxs(h, vecs[0], vecs[1:], self.top_d))
        return out

    def rerank(self, texts: list[str], hits: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        from .rerank.scoring import reranked_ctxs

        hits = [h[: self.k] for h in hits]
        if self.selector is not None:
            return self._rerank_per_query(texts, hits)
        queries = self._embed(texts)
        rows_of = [np.fromiter((self.corpus.position(c["id"]) for c in h), dtype=np.int64) for h in hits]
        rows, vecs = self.evidence(np.concatenate(rows_of) if rows_of else np.zeros(0, np.int64))
        where = {int(r): i for i, r in enumerate(rows)}
        return [reranked_ctxs(h, q, vecs[[where[int(x)] for x in r]], self.top_d)
                for q, h, r in zip(queries, hits, rows_of, strict=True)]


def _per_query_selector(manifest: dict[str, Any], task):
    """The reranker's per-query selector, fitted again on the training split it selected from."""
    from dataclasses import replace

    from .config import from_dict
    from .interchange import read_records
    from .rerank.config import RerankConfig
    from .selection import get_selector
    from .selection.base import with_index_encoder
    from .tasks import Example

    cfg = from_dict(RerankConfig, manifest["config"], source="reranked manifest")
    train_file = Path(manifest["candidates"]["path"]) / "train.jsonl"
    train = [Example(str(r["id"]), r["text"], r.get("label")) for r in read_records(train_file, labels=task.labels)]
    settings = with_index_encoder(replace(cfg.demos), manifest["candidates"]["index"])
    return get_selector(cfg.demo_selection, cfg.num_demos, cfg.seed, settings, lm=cfg.lm).fit(task, train)


class Pipeline:
    """A finished run with the stages in front of it: raw texts in, labels, probabilities and evidence out."""

    def __init__(self, predictor: Predictor, index=None, k: int = 0, exclude_query_text: bool = False,
                 reranking: _Reranking | None = None, n_evidence: int = 0) -> None:
        self.predictor, self.index, self.k = predictor, index, k
        self.exclude_query_text, self.reranking, self.n_evidence = exclude_query_text, reranking, n_evidence

    @property
    def task(self):
        return self.predictor.task

    @classmethod
    def load(cls, run_dir: str | Path, device: str | None = None, trust_remote_code: bool = False) -> Pipeline:
        """Load a finished run (a reader run or a kNN-vote cell) and the index, LM and settings it used.
        ``trust_remote_code``: let the encoder and LMs run their own code; what the run's manifests recorded never
        does (a model that ran with its own code is refused without it)."""
        from .methods.reader_method import ReaderPredictor
        from .retrieval.index import Index
        from .retrieval.retrieve import read_candidates_manifest

        run = Path(run_dir)
        verify_run(run)  # a truncated best/model.safetensors: one error line, not a loader's traceback
        predictor = load_run(run, device=device, trust_remote_code=trust_remote_code)
        if not isinstance(predictor, ReaderPredictor):  # e.g. the kNN vote searches its own index
            return cls(predictor)
        n = predictor.n_passages
        if n == 0:
            return cls(predictor)
        data = Path(read_manifest(run, "reader")["data"])
        reranked = None
        manifest = read_manifest(data, ("reranked", "candidates"))
        if manifest["kind"] == "reranked":
            reranked, data = data, Path(manifest["candidates"]["path"])
        cand = read_candidates_manifest(data)
        index = Index(cand["index"]["path"], device=device, trust_remote_code=trust_remote_code)
        if index.corpus.fingerprint != cand["index"]["corpus_content_sha256"]:
            raise StaleArtifactError(f"index {cand['index']['path']} holds another corpus than the one {data} was "
                                     "retrieved from")
        reranking = _Reranking(reranked, index.corpus, device, trust_remote_code) if reranked is not None else None
        return cls(predictor, index, int(cand["k"]), bool(cand["config"].get("exclude_query_text")), reranking, n)

    def retrieve(self, texts: list[str]) -> list[list[dict[str, Any]]]:
        """The evidence each text gets (first stage, then the reranker when the run used one)."""
        extra = 1 if self.exclude_query_text else 0
        hits = self.index.search_hits(texts, self.k + extra)
        if self.exclude_query_text:
            hits = [without_itself(t, h) for t, h in zip(texts, hits, strict=True)]
        hits = [h[: self.k] for h in hits]
        return self.reranking.rerank(texts, hits) if self.reranking is not None else hits

    def predict(self, texts: list[str], batch_size: int = 64) -> list[dict[str, Any]]:
        """Per text: ``{"text", "prediction", "scores": {label: p}, "evidence": [{"id", "text", "score"}]}``."""
        out: list[dict[str, Any]] = []
        for start in range(0, len(texts), batch_size):
            chunk = [str(t) for t in texts[start:start + batch_size]]
            bad = [i + start for i, t in enumerate(chunk) if not t.strip()]
            if bad:
                raise InputError(f"input {bad[0] + 1} is empty", field="text")
            records = [{"id": f"input-{start + i}", "text": t} for i, t in enumerate(chunk)]
            if self.index is not None:
                for rec, ctxs in zip(records, self.retrieve(chunk), strict=True):
                    rec["ctxs"] = ctxs
            for rec, line in zip(records, self.predictor.predict(records), strict=True):
                out.append({"text": rec["text"], "prediction": line["prediction"], "scores": line["scores"],
                            "evidence": self.predictor.evidence_of(rec, line)})
        return out


__all__ = ["Pipeline"]
