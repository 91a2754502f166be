"""Compiled BM25 search (numba, when installed): per-query dense accumulation and a one-pass top-k heap.

The same float operations in the same order as ``q @ W`` (:meth:`pgra.retrieval.bm25.BM25Index.scores`), and
the same order as :func:`~pgra.retrieval.bm25.topk_positions` (score, then position): bit for bit the same hits."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

try:  # optional: `pip install numba` (in the `fast` and `dev` extras)
    import numba
except ImportError:  # pragma: no cover - exercised where numba is absent
    numba = None


def available() -> bool:
    """Whether the compiled kernel can run here."""
    return numba is not None


def _sift_down(heap_s, heap_p, i, k):
    # min-heap on (score, -position): the root is the worst kept document (lowest score, then highest position)
    while True:
        left = 2 * i + 1
        if left >= k:
            return
        child = left
        right = left + 1
        if right < k and (heap_s[right] < heap_s[left] or
                          (heap_s[right] == heap_s[left] and heap_p[right] > heap_p[left])):
            child = right
        if heap_s[child] < heap_s[i] or (heap_s[child] == heap_s[i] and heap_p[child] > heap_p[i]):
            heap_s[i], heap_s[child] = heap_s[child], heap_s[i]
            heap_p[i], heap_p[child] = heap_p[child], heap_p[i]
            i = child
        else:
            return


def _search(indptr, indices, data, q_indptr, q_terms, q_counts, shift, k, rows, out_scores, out_ids):
    n_docs = rows.shape[1]
    for r in numba.prange(q_indptr.shape[0] - 1):
        row = rows[r]
        row[:] = 0
        for j in range(q_indptr[r], q_indptr[r + 1]):
            t = q_terms[j]
            c = q_counts[j]
            for p in range(indptr[t], indptr[t + 1]):
                row[indices[p]] += c * data[p]
        if shift[r] != 0:  # bm25l / bm25+: what every document gets for the terms it lacks, before ranking
            for d in range(n_docs):
                row[d] += shift[r]
        heap_s = np.empty(k, dtype=row.dtype)
        heap_p = np.empty(k, dtype=np.int64)
        for d in range(k):  # the first k documents, then heapified
            heap_s[d] = row[d]
            heap_p[d] = d
        for i in range(k // 2 - 1, -1, -1):
            _sift_down(heap_s, heap_p, i, k)
        for d in range(k, n_docs):
            if row[d] > heap_s[0]:
                heap_s[0] = row[d]
                heap_p[0] = d
                _sift_down(heap_s, heap_p, 0, k)
        for i in range(k):  # best first: score descending, then position ascending (insertion sort; k is small)
            s, p = heap_s[i], heap_p[i]
            j = i - 1
            while j >= 0 and (out_scores[r, j] < s or (out_scores[r, j] == s and out_ids[r, j] > p)):
                out_scores[r, j + 1] = out_scores[r, j]
                out_ids[r, j + 1] = out_ids[r, j]
                j -= 1
            out_scores[r, j + 1] = s
            out_ids[r, j + 1] = p


if numba is not None:
    _sift_down = numba.njit(cache=True, nogil=True)(_sift_down)
    _search = numba.njit(cache=True, nogil=True, parallel=True)(_search)


@contextmanager
def torch_threads_kept() -> Iterator[None]:
    """Run a parallel numba region and give torch its thread count back after it: numba's OpenMP layer sets the
    process's count to every core, which would change the last digits of the next torch computation."""
    torch = sys.modules.get("torch")  # only when torch is in use: this module does not need it
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(before)
        torch.set_num_threads(threads)


def search_batch(weights, q, shift: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k ``(scores, ids)`` of each query row of ``q`` (CSR, distinct sorted terms with their counts) over the
    term-by-document ``weights`` (CSR); ``shift`` is added to each query's scores; ``rows``: a scratch array of
    at least ``(queries, documents)`` in the weights' dtype."""
    n = q.shape[0]
    scores = np.empty((n, k), dtype=weights.dtype)
    ids = np.empty((n, k), dtype=np.int64)
    with torch_threads_kept():
        _search(np.asarray(weights.indptr), np.asarray(weights.indices), np.asarray(weights.data),
                np.asarray(q.indptr), np.asarray(q.indices), np.asarray(q.data, dtype=weights.dtype),
                np.asarray(shift, dtype=weights.dtype), k, rows[:n], scores, ids)
    return scores, ids


__all__ = ["available", "search_batch"]
