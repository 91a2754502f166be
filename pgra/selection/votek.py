"""``votek``: a task-level vote-k pool (Su et al. 2022), then each query's nearest pool members."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import MAX_ITEMS, option
from ..tasks.loaders import Example
from .base import STRATEGIES, order_by_similarity, reverse_option
from .encoded import EncodedSelector, EncoderOptions, top_allowed


@dataclass
class VoteKOptions(EncoderOptions):
    """``votek``'s options: the sentence encoder, the graph, the pool's size, the order."""

    votek_pool: int = option(100, min=1, max=MAX_ITEMS, omit_default=True,
                             help="votek: training inputs selected into the annotated pool (the budget M)")
    votek_k: int = option(150, min=1, max=MAX_ITEMS, omit_default=True, help="votek: neighbours per input in the graph")
    votek_rho: float = option(10.0, above=1, omit_default=True,
                              help="votek: discount base of a voter per chosen input among its neighbours")
    reverse: bool = reverse_option()


def knn_graph(units: np.ndarray, k: int) -> np.ndarray:
    """``A[v, u] = 1`` when u is among v's ``k`` nearest others by cosine (ties: the lower position)."""
    n = len(units)
    sim = units @ units.T
    np.fill_diagonal(sim, -np.inf)
    graph = np.zeros((n, n), np.float64)
    k = min(k, n - 1)
    if k > 0:
        nearest = np.argsort(-sim, axis=1, kind="stable")[:, :k]
        graph[np.arange(n)[:, None], nearest] = 1.0
    return graph


def vote_k(graph: np.ndarray, size: int, rho: float) -> list[int]:
    """Greedy vote-k over ``graph`` (:func:`knn_graph`): ``size`` positions in the order chosen."""
    n = len(graph)
    chosen: list[int] = []
    free = np.ones(n, bool)
    covered = np.zeros(n)  # per voter v: chosen inputs among its neighbours
    for _ in range(min(size, n)):
        weight = np.where(free, rho ** -covered, 0.0)  # chosen voters no longer vote
        score = np.where(free, weight @ graph, -np.inf)
        u = int(np.argmax(score))
        chosen.append(u)
        free[u] = False
        covered += graph[:, u]
    return chosen


@STRATEGIES.register
class VoteKSelector(EncodedSelector):
    """The vote-k pool, then the m nearest pool members per query; the nearest next to the query unless ``reverse``."""

    name = "votek"
    options = VoteKOptions
    described = ("votek_pool", "votek_k", "votek_rho", "reverse")

    def _fit_encoded(self) -> None:
        s = self.settings
        self.pool = sorted(vote_k(knn_graph(self.train_units, s.votek_k), max(s.votek_pool, self.num_demos),
                                  s.votek_rho))

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        rel = self.query_units(queries) @ self.train_units.T
        pool = set(self.pool)
        return [order_by_similarity(top_allowed(rel[i], [j for j in self.allowed(q) if j in pool], self.num_demos),
                                    self.settings.reverse) for i, q in enumerate(queries)]
