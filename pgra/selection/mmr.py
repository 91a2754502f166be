"""``mmr``: maximal marginal relevance (Carbonell and Goldstein 1998) over the sentence encoder's embeddings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import option
from ..tasks.loaders import Example
from .base import STRATEGIES, order_by_similarity, reverse_option
from .encoded import EncodedSelector, EncoderOptions


@dataclass
class MMROptions(EncoderOptions):
    """``mmr``'s options: the sentence encoder, the trade-off, the order."""

    mmr_lambda: float = option(0.5, min=0, max=1, omit_default=True,
                               help="mmr: weight of relevance to the query (1 = kate's nearest; the rest "
                                    "penalises similarity to the demonstrations already chosen)")
    reverse: bool = reverse_option()


def mmr_rank(relevance: np.ndarray, similarity: np.ndarray, m: int, lam: float) -> list[int]:
    """Greedy MMR: ``m`` positions, each the argmax of ``lam * rel - (1 - lam) * max sim to those chosen``."""
    chosen: list[int] = []
    redundancy = np.zeros(len(relevance))
    free = np.ones(len(relevance), bool)
    for _ in range(min(m, len(relevance))):
        gain = np.where(free, lam * relevance - (1 - lam) * redundancy, -np.inf)
        j = int(np.argmax(gain))
        chosen.append(j)
        free[j] = False
        redundancy = similarity[j] if len(chosen) == 1 else np.maximum(redundancy, similarity[j])
    return chosen


@STRATEGIES.register
class MMRSelector(EncodedSelector):
    """MMR over the allowed training inputs by cosine; the first chosen sits next to the query unless ``reverse``."""

    name = "mmr"
    options = MMROptions
    described = ("mmr_lambda", "reverse")

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        rel = self.query_units(queries) @ self.train_units.T
        out = []
        for i, q in enumerate(queries):
            pool = np.asarray(self.allowed(q), np.int64)
            units = self.train_units[pool]
            ranked = mmr_rank(rel[i, pool], units @ units.T, self.num_demos, self.settings.mmr_lambda)
            out.append(order_by_similarity(pool[ranked].tolist(), self.settings.reverse))
        return out
