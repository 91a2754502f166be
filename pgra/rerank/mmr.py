"""``mmr``: maximal marginal relevance (Carbonell & Goldstein 1998) over the first stage's own embeddings; no model.

Greedily, the next kept candidate is the one maximising ``lambda_ * rel(q, c) - (1 - lambda_) * max_s cos(c, s)``
over the candidates s already kept: ``rel`` is the first-stage score the candidates carry (a dense index's
cosine), ``cos`` the cosine of the candidates' vectors read back from the dense index (``index.faiss``, or for a
sharded flat index, built with ``dense.bounded_memory``, its stored vector shards ``vectors/``). A
candidate's score is its marginal value when it was picked; those never increase along the picks, so sorting by
them (ties in first-stage order) is the greedy order. ``lambda_`` 1 is the first stage's own order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import option
from ..core.errors import InputError
from .base import RERANKERS, Reranker


@dataclass
class MMROptions:
    """Options of the ``mmr`` reranker (``rerank.mmr.*``)."""

    lambda_: float = option(0.5, min=0.0, max=1.0, help="weight of relevance against diversity (1: first-stage order)")


def mmr_scores(relevance: np.ndarray, vectors: np.ndarray, lambda_: float) -> np.ndarray:
    """The marginal value of every candidate when greedy MMR picks it (all of them, in pick order by value)."""
    rel = np.asarray(relevance, dtype=np.float64)
    v = np.asarray(vectors, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    sim = v @ v.T
    n = len(rel)
    left = np.ones(n, bool)
    closest = np.full(n, -np.inf)  # max cosine to a kept candidate (none yet: no penalty)
    out = np.zeros(n)
    for _ in range(n):
        value = lambda_ * rel - (1 - lambda_) * np.where(np.isfinite(closest), closest, 0.0)
        j = int(np.argmax(np.where(left, value, -np.inf)))
        out[j], left[j] = value[j], False
        closest = np.maximum(closest, sim[j])
    return out


@RERANKERS.register
class MMR(Reranker):
    name = "mmr"
    title = "MMR"
    score_name = "marginal value"
    options = MMROptions

    def load(self) -> None:
        from ..retrieval.index import Index

        recorded = (self.candidates.get("index") or {}).get("path")
        if not (self.cfg.index or recorded):  # candidates imported without an index (`pgra fid import`)
            raise InputError("the mmr reranker reads a dense index's vectors; these candidates were imported without "
                             "one: pass --index (a dense index over the corpus they came from)", field="index")
        directory = Path(self.cfg.index or recorded)
        loaded = Index(directory, verify=False, use_gpu_faiss=False)
        searcher = loaded.searcher
        index = getattr(searcher, "faiss", None)
        # a sharded flat index (``dense.bounded_memory``) has no index.faiss: its vectors are the stored shards
        self._stored = getattr(searcher, "vectors", None) if index is None else None
        if index is None and self._stored is None:
            raise InputError(f"the mmr reranker compares the candidates by the first stage's vectors, and the index "
                             f"{directory} is a '{loaded.retriever}' index, which stores none; rerank candidates "
                             "retrieved from a dense index (`pgra build-index --retriever dense`), or choose another "
                             "reranker", field="rerank.reranker")
        if index is not None:
            try:
                index.reconstruct(0)
            except RuntimeError:  # an IVF index keeps no id -> vector map until asked
                import faiss

                faiss.extract_index_ivf(index).make_direct_map()
        self._index = index

    def vectors(self, ctxs: Sequence[dict[str, Any]]) -> np.ndarray:
        """The first-stage vectors of a query's candidates (by their corpus positions)."""
        positions = [int(self.corpus.position(c["id"])) for c in ctxs]
        if self._index is None:
            return self._stored.rows(np.asarray(positions, dtype=np.int64))
        return np.stack([self._index.reconstruct(p) for p in positions])

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        if any(c.get("score") is None for cs in candidates for c in cs):  # imported evidence may carry none
            raise InputError("the mmr reranker weighs the first stage's score of every candidate, and some "
                             "candidates carry none ('score'): choose another reranker", field="rerank.reranker")
        return [mmr_scores(np.array([float(c["score"]) for c in cs]), self.vectors(cs), self.settings.lambda_)
                for cs in candidates]


__all__ = ["MMR", "MMROptions", "mmr_scores"]
