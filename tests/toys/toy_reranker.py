"""A toy reranker registered from outside the package: the shortest candidates first, or the longest with its option
``longest`` (a plug-in's whole file, its options included)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pgra.core.config import option
from pgra.rerank.base import Reranker


@dataclass
class ShortestOptions:
    """The toy reranker's options (``rerank.toy_shortest.*``)."""

    longest: bool = option(False, help="the longest candidates first instead")


class Shortest(Reranker):
    name = "toy_shortest"
    score_name = "minus length"
    options = ShortestOptions

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        sign = 1.0 if self.settings.longest else -1.0
        return [np.array([sign * len(c["text"]) for c in cs], dtype=np.float64) for cs in candidates]
