"""A toy reranker registered from outside the package: the shortest candidates first (a plug-in's whole file)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pgra.rerank.base import Reranker


class Shortest(Reranker):
    name = "toy_shortest"
    score_name = "minus length"

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        return [np.array([-len(c["text"]) for c in cs], dtype=np.float64) for cs in candidates]
