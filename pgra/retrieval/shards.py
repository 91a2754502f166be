"""Exact search over vector shard files, top-k merges, re-scoring, recall, and the top-k merged across ranks.

Every merge orders hits by score, then lower position: the same hits for any shard size, chunk or rank count."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ..core.errors import IncompleteArtifactError
from ..runtime.distributed import DistContext, gather_objects
from ..storage.artifacts import load_npy
from .dense import search_faiss

MISSING_SCORE = np.float32(-np.finfo(np.float32).max)  # what faiss returns beside a -1 position


def merge_topk(scores: Sequence[np.ndarray], ids: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of several top-k lists of the same queries, by score then lower position, -1 last."""
    s = np.concatenate([np.asarray(x, dtype=np.float32) for x in scores], axis=1)
    i = np.concatenate([np.asarray(x, dtype=np.int64) for x in ids], axis=1)
    missing = i < 0
    s = np.where(missing, MISSING_SCORE, s)
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, i), missing, -s.astype(np.float64)), axis=1)
    order = order[:, :k]
    return np.take_along_axis(s, order, axis=1), np.take_along_axis(i, order, axis=1)


class VectorShards:
    """Unit vectors stored as ``.npy`` shards in position order (memory-mapped, or read into memory)."""

    def __init__(self, paths: Sequence[str | Path], mmap: bool = True) -> None:
        self.paths = [Path(p) for p in paths]
        self.arrays = [load_npy(p, mmap=mmap) for p in self.paths]
        rows = [a.shape[0] for a in self.arrays]
        self.offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        dims = {a.shape[1] for a in self.arrays if a.ndim == 2}
        if len(dims) > 1 or any(a.ndim != 2 for a in self.arrays):
            raise IncompleteArtifactError(f"{self.paths[0].parent}: vector shards of different shapes")
        self.dim = dims.pop() if dims else 0

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def rows(self, positions: np.ndarray) -> np.ndarray:
        """The vectors at ``positions`` (any order; -1 gives zeros)."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.zeros((positions.size, self.dim), dtype=np.float32)
        flat = positions.reshape(-1)
        shard = np.searchsorted(self.offsets, flat, side="right") - 1
        for s in np.unique(shard[flat >= 0]):
            sel = np.flatnonzero((shard == s) & (flat >= 0))
            local = flat[sel] - self.offsets[s]
            order = np.argsort(local, kind="stable")
            out[sel[order]] = self.arrays[s][local[order]]
        return out.reshape(*positions.shape, self.dim)

    def search(self, queries: np.ndarray, k: int, query_chunk: int = 256,
               shards: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k inner product over ``shards``, one in memory at a time; scores summed in float64, rounded to
        float32, so no score depends on the shard or chunk it falls in; ties to the lower position."""
        queries = np.ascontiguousarray(queries, dtype=np.float64)
        chosen = list(range(len(self.arrays)) if shards is None else shards)
        k = max(1, min(k, len(self)))
        starts = range(0, len(queries), query_chunk)
        best = [(np.full((len(queries[b:b + query_chunk]), 0), MISSING_SCORE, dtype=np.float32),
                 np.full((len(queries[b:b + query_chunk]), 0), -1, dtype=np.int64)) for b in starts]
        for s in chosen:
            if not len(self.arrays[s]):
                continue
            base = np.asarray(self.arrays[s], dtype=np.float64).T
            for c, b in enumerate(starts):
                d, i = _topk((queries[b:b + query_chunk] @ base).astype(np.float32), k)
                best[c] = merge_topk([best[c][0], d], [best[c][1], i + self.offsets[s]], k)
        if not best:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        return _pad(np.concatenate([b[0] for b in best]), np.concatenate([b[1] for b in best]), k)


def _topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` best columns of a score block, by score then lower column (ties at the cut included)."""
    if k >= scores.shape[1]:
        cols = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
        return merge_topk([scores], [cols], k)
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    cut = np.take_along_axis(scores, part, axis=1).min(axis=1)
    tied = (scores >= cut[:, None]).sum(axis=1) > k  # more columns reach the cut than fit: take the lowest
    rows_s, rows_i = np.take_along_axis(scores, part, axis=1), part.astype(np.int64)
    for r in np.flatnonzero(tied):
        cols = np.flatnonzero(scores[r] >= cut[r])
        order = np.lexsort((cols, -scores[r, cols].astype(np.float64)))[:k]
        rows_s[r], rows_i[r] = scores[r, cols[order]], cols[order]
    return merge_topk([rows_s], [rows_i], k)


def _pad(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k arrays widened to ``k`` columns with (MISSING_SCORE, -1) where fewer were found."""
    if scores.shape[1] >= k:
        return scores, ids
    extra = k - scores.shape[1]
    return (np.pad(scores, ((0, 0), (0, extra)), constant_values=MISSING_SCORE),
            np.pad(ids, ((0, 0), (0, extra)), constant_values=-1))


def rescore(vectors: VectorShards, queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """The top ``k`` of each query's ``candidates`` by exact inner product with the stored vectors."""
    queries = np.asarray(queries, dtype=np.float32)
    exact = np.einsum("qd,qcd->qc", queries, vectors.rows(candidates)).astype(np.float32)
    return merge_topk([exact], [candidates], k)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each query's exact top-k positions (-1 ignored) that ``found`` holds."""
    shares = []
    for f, e in zip(found, exact, strict=True):
        truth = set(e[e >= 0].tolist())
        if truth:
            shares.append(len(truth & set(f[f >= 0].tolist())) / len(truth))
    return float(np.mean(shares)) if shares else 1.0


def search_index(index, queries: np.ndarray, k: int, stored: VectorShards | None = None,
                 factor: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of a faiss ``index``; with ``stored`` vectors and ``factor``, its top ``k * factor`` re-scored exactly."""
    if stored is None or factor <= 0:
        return search_faiss(index, queries, k)
    k = min(k, index.ntotal)
    parts = []
    for start in range(0, len(queries), 64):  # 64 queries' candidate vectors in memory at a time
        q = queries[start:start + 64]
        parts.append(rescore(stored, q, search_faiss(index, q, k * factor)[1], k))
    if not parts:
        return search_faiss(index, queries, k)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def held_out_recall(search, shards: VectorShards, n_queries: int, k: int, seed: int) -> dict[str, float | int]:
    """recall@k of ``search`` against exact search on seeded stored vectors, each query's own position left out."""
    n = len(shards)
    k = min(k, n - 1)
    picks = np.sort(np.random.default_rng(seed).choice(n, min(n_queries, n), replace=False))
    queries = shards.rows(picks)

    def without_self(ids: np.ndarray) -> np.ndarray:
        return np.stack([row[row != own][:k] for row, own in zip(ids, picks, strict=True)])

    exact = without_self(_pad(*shards.search(queries, k + 1), k + 1)[1])
    found = without_self(_pad(*search(queries, k + 1), k + 1)[1])
    return {"k": int(k), "queries": int(len(picks)), "recall": round(recall_at_k(found, exact), 4)}


def merge_over_ranks(ctx: DistContext, scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray,
                                                                                              np.ndarray]:
    """Every rank's top-k of the same queries merged into the global top-k, on every rank."""
    parts = gather_objects(ctx, (scores, ids))
    merged = merge_topk([p[0] for p in parts], [p[1] for p in parts], k)
    return _pad(*merged, k)


__all__ = ["VectorShards", "held_out_recall", "merge_over_ranks", "merge_topk", "recall_at_k", "rescore",
           "search_index"]
