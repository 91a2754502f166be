"""``mmr``: maximal marginal relevance (Carbonell & Goldstein 1998) over the first stage's own embeddings; no model.

Greedily, the next kept candidate is the one maximising ``lambda_ * rel(q, c) - (1 - lambda_) * max_s cos(c, s)``
over the candidates s already kept: ``rel`` is the first-stage score the candidates carry (a dense index's
cosine), ``cos`` the cosine of the candidates' vectors read back from the dense index (``index.faiss``). A
candidate's score is its marginal value when it was picked; those never increase along the picks, so sorting by
them (ties in first-stage order) is the greedy order. ``lambda_`` 1 is the first stage's own order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import option
from ..errors import InputError
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
    options = MMROptions

    def load(self) -> None:
        from ..retrieval.index import Index

        directory = Path(self.cfg.index or self.candidates["index"]["path"])
        searcher = Index(directory, verify=False, use_gpu_faiss=False).searcher
        index = getattr(searcher, "faiss", None)
        if index is None:
            raise InputError(f"the mmr reranker reads a dense index's vectors; {directory} was built by "
                             f"'{self.candidates['index'].get('retriever', '?')}'", field="rerank.reranker")
        try:
            index.reconstruct(0)
        except RuntimeError:  # an IVF index keeps no id -> vector map until asked
            import faiss

            faiss.extract_index_ivf(index).make_direct_map()
        self._index = index

    def vectors(self, ctxs: Sequence[dict[str, Any]]) -> np.ndarray:
        """The first-stage vectors of a query's candidates (by their corpus positions)."""
        return np.stack([self._index.reconstruct(int(self.corpus.position(c["id"]))) for c in ctxs])

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        return [mmr_scores(np.array([float(c["score"]) for c in cs]), self.vectors(cs), self.settings.lambda_)
                for cs in candidates]


__all__ = ["MMR", "MMROptions", "mmr_scores"]
