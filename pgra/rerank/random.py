"""``random``: d of a query's k candidates at random (seeded), the sanity floor every reranker should beat.

A query's draw depends on the seed, its text and its candidates' ids only (not on its position or the other
queries), so a split reranked in parts or again draws the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.config import SEED_MAX, option
from .base import RERANKERS, Reranker


@dataclass
class RandomOptions:
    """Options of the ``random`` reranker (``rerank.random.*``)."""

    seed: int = option(0, min=0, max=SEED_MAX, help="seed of the draw")


def draw(seed: int, query: str, ids: Sequence[str]) -> np.ndarray:
    """Uniform scores in [0, 1) for ``ids``, fixed by the seed, the query's text and the candidates' ids."""
    h = hashlib.sha256(repr((seed, str(query), [str(i) for i in ids])).encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little")).random(len(ids))


@RERANKERS.register
class RandomReranker(Reranker):
    name = "random"
    title = "random"
    score_name = "random draw"
    options = RandomOptions

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        return [draw(self.settings.seed, q, [c["id"] for c in cs]) for q, cs in zip(queries, candidates, strict=True)]


__all__ = ["RandomOptions", "RandomReranker", "draw"]
