"""The corpus pass (``rerank.corpus_pass``, docs/stage2-reranking.md): every evidence sentence a task's reranking can
read, embedded once under its prompt into the keyed caches the per-candidate path fills, split over ranks, chunk by
chunk (a killed pass resumes from its last chunk); and the stage's plumbing it shares (reading a candidates split,
filling the caches). ``pgra_full``'s stage (:mod:`pgra.rerank.prompt_guided.full_search`) searches its vectors.
"""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import InputError
from ...core.faults import fault_point
from ...core.progress import progress
from ...data.corpus import CorpusStore
from ...retrieval.candidates_stage import load_split
from ...runtime.distributed import DistContext, gather_objects
from ...tasks import Example, TaskSpec
from ..config import RerankConfig
from ..stage import train_queries
from .cache import EmbeddingCache
from .in_memory import PromptGuidedReranker, evidence_cache_key, prompt_key


def embed_rows(reranker: PromptGuidedReranker, cache: EmbeddingCache, rows: np.ndarray, texts_of, demos: list[Example],
               cfg: RerankConfig, ctx: DistContext, desc: str, missing: np.ndarray | None = None) -> None:
    """Embed the missing rows of this rank's chunks of ``rows`` into ``cache``, chunk by chunk (``missing``: what
    :meth:`EmbeddingCache.missing` already returned for ``rows``, so as not to read them twice). The chunks are
    fixed, ``cfg.chunk_size`` rows each (chunk c: ``rows[c * size:(c + 1) * size]``), and rank r takes those with
    c % world_size == r: into an empty cache a row is embedded beside the same rows (the same batches, so the same
    float rounding) on any number of ranks."""
    size = cfg.chunk_size
    chunks = [rows[c * size:(c + 1) * size] for c in ctx.shard(-(-len(rows) // size))]
    mine_rows = np.concatenate(chunks) if chunks else rows[:0]  # this rank's only: other ranks are writing theirs
    todo = cache.missing(mine_rows) if missing is None else missing
    chunks = [chunk[np.isin(chunk, todo)] for chunk in chunks]
    chunks = [chunk for chunk in chunks if len(chunk)]
    show = cfg.show_progress and ctx.is_main
    # one line for the whole share, its ETA from the chunks done (each chunk's own bar would time one chunk)
    bar = progress(total=sum(map(len, chunks)), desc=f"{desc} ({len(chunks)} chunks)", unit=" texts",
                   disable=not show)
    for chunk in chunks:
        vecs = reranker.embed(texts_of(chunk), demos)
        cache.put(chunk, vecs)
        bar.update(len(chunk))
        fault_point("rerank.chunk")
    bar.close()


def open_cache(ctx: DistContext, root: str, key: dict[str, Any], size: int, dim: int) -> EmbeddingCache:
    """Rank 0 creates the cache folder; the others open it after a barrier. Refused (an InputError on
    ``cache_dir``, before anything is written) when the ranks of ``ctx`` run on several hosts: the cache's
    memory-mapped files are written in place, row by row, and a shared file system (NFS) keeps no mapping coherent
    between machines (two nodes writing rows of one page lose each other's)."""
    hosts = sorted(set(gather_objects(ctx, socket.gethostname())))
    if len(hosts) > 1:
        raise InputError(f"the embedding cache {root} would be written by ranks on {len(hosts)} hosts "
                         f"({', '.join(hosts[:3])}{', ...' if len(hosts) > 3 else ''}): its memory-mapped files are "
                         "written in place, which a shared file system does not keep coherent between machines; "
                         "rerank on one node (torchrun --nnodes 1; docs/beyond-one-machine.md)", field="cache_dir")
    if ctx.is_main:
        EmbeddingCache(root, key, size, dim)
    ctx.barrier()
    return EmbeddingCache(root, key, size, dim, create=False, report=ctx.is_main)


def query_caches_of(cfg: RerankConfig, ctx: DistContext, task: TaskSpec, data: dict[str, list[dict[str, Any]]],
                    splits: list[str], reranker: PromptGuidedReranker, demos: list[Example]) -> dict[str, EmbeddingCache]:
    """Each split's query cache under the shared prompt (keyed by the split's texts), its missing rows embedded."""
    base_key = prompt_key(reranker.embedder, cfg.lm, task, demos)
    caches = {}
    for split in splits:
        texts = [r["text"] for r in data[split]]
        qkey = {**base_key, "rows": f"queries:{split}",
                "texts": hashlib.sha256("\x00".join(texts).encode()).hexdigest()}
        qc = open_cache(ctx, cfg.cache_dir, qkey, len(texts), reranker.embedder.dim)
        embed_rows(reranker, qc, np.arange(len(texts)), lambda rows, t=texts: [t[i] for i in rows], demos, cfg, ctx,
                   f"queries ({split})")
        caches[split] = qc
    return caches


def pass_rows(mode: str, store: CorpusStore, data: dict[str, list[dict[str, Any]]]) -> np.ndarray:
    """The corpus rows a pass of ``mode`` embeds: every row (``corpus``) or every candidate of ``data``'s splits."""
    if mode == "corpus":
        return np.arange(len(store), dtype=np.int64)
    rows = [store.position(c["id"]) for recs in data.values() for r in recs for c in r["ctxs"]]
    return np.unique(np.asarray(rows, dtype=np.int64))


def run_corpus_pass(cfg: RerankConfig, ctx: DistContext, task: TaskSpec, store: CorpusStore, cand: dict[str, Any],
                    reranker: PromptGuidedReranker, demos: list[Example]) -> dict[str, Any]:
    """Embed the evidence rows of ``cfg.corpus_pass`` and every split's queries under the shared prompt of
    ``demos`` into the caches (what is cached already is read, not embedded); returns the pass's record: what it
    covered and the LM work it ran, summed over ranks (``texts``, ``tokens_run``)."""
    start, before = time.time(), reranker.embedder.stats.record()
    folder = Path(cfg.candidates)
    data = {s: load_split(folder / f"{s}.jsonl", task, 0) for s in cand["counts"]}  # every k, every split
    if "train" in data:  # the stage's training queries
        data["train"] = train_queries(cfg, data["train"], demos)
    rows = pass_rows(cfg.corpus_pass, store, data)
    key = evidence_cache_key(prompt_key(reranker.embedder, cfg.lm, task, demos), cand["index"]["corpus_content_sha256"])
    evidence = open_cache(ctx, cfg.cache_dir, key, len(store), reranker.embedder.dim)
    missing = evidence.missing(rows)
    embed_rows(reranker, evidence, rows, store.texts, demos, cfg, ctx, f"corpus pass ({cfg.corpus_pass})", missing)
    query_caches_of(cfg, ctx, task, data, list(data), reranker, demos)
    after = reranker.embedder.stats.record()
    spent = gather_objects(ctx, {k: after[k] - before[k] for k in ("texts", "tokens_run")})
    return {"mode": cfg.corpus_pass, "evidence_rows": int(len(rows)), "cached_before": int(len(rows) - len(missing)),
            "queries": int(sum(len(r) for r in data.values())), "texts": sum(s["texts"] for s in spent),
            "tokens_run": sum(s["tokens_run"] for s in spent), "seconds": round(time.time() - start, 1)}


__all__ = ["embed_rows", "load_split", "open_cache", "pass_rows", "query_caches_of", "run_corpus_pass"]
