"""``dpp``: the greedy MAP of a k-DPP over each query's nearest candidates (Ye et al. 2023; docs/selectors.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import MAX_ITEMS, option
from ..tasks.loaders import Example
from .base import STRATEGIES, order_by_similarity, reverse_option
from .encoded import EncodedSelector, EncoderOptions, top_allowed

EPS = 1e-10  # a candidate adding less than this to the determinant adds nothing new


@dataclass
class DPPOptions(EncoderOptions):
    """``dpp``'s options: the sentence encoder, the candidates, the relevance scale, the order."""

    dpp_candidates: int = option(100, min=1, max=MAX_ITEMS, omit_default=True,
                                 help="dpp: nearest training inputs per query the DPP chooses among")
    dpp_scale: float = option(0.1, above=0, omit_default=True,
                              help="dpp: relevance scale (smaller: relevance weighs more against diversity)")
    reverse: bool = reverse_option()


def dpp_kernel(query: np.ndarray, candidates: np.ndarray, scale: float) -> np.ndarray:
    """CEIL's kernel over unit ``candidates`` for a unit ``query``."""
    rel = (candidates @ query + 1) / 2
    r = np.exp((rel - rel.max()) / (2 * scale))
    return r[:, None] * (candidates @ candidates.T) * r[None, :]


def greedy_map(kernel: np.ndarray, m: int) -> list[int]:
    """The greedy MAP of a k-DPP (Chen et al. 2018): up to ``m`` positions, stopping when none adds to the det."""
    n = len(kernel)
    m = min(m, n)
    if m == 0:
        return []
    cis = np.zeros((m, n))
    di2 = np.diag(kernel).astype(np.float64).copy()
    j = int(np.argmax(di2))
    chosen = [j]
    while len(chosen) < m:
        k = len(chosen) - 1
        eis = (kernel[j] - cis[:k, j] @ cis[:k]) / np.sqrt(di2[j])
        cis[k] = eis
        di2 = di2 - eis ** 2
        di2[chosen] = -np.inf
        j = int(np.argmax(di2))
        if di2[j] < EPS:
            break
        chosen.append(j)
    return chosen


@STRATEGIES.register
class DPPSelector(EncodedSelector):
    """Per query: its ``dpp_candidates`` nearest allowed training inputs, the k-DPP's greedy MAP among them (filled
    up by relevance when the kernel's rank runs out); the first chosen next to the query unless ``reverse``."""

    name = "dpp"
    options = DPPOptions
    described = ("dpp_candidates", "dpp_scale", "reverse")

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        q_units = self.query_units(queries)
        rel = q_units @ self.train_units.T
        s, out = self.settings, []
        for i, q in enumerate(queries):
            near = top_allowed(rel[i], self.allowed(q), max(s.dpp_candidates, self.num_demos))
            units = self.train_units[near]
            picked = greedy_map(dpp_kernel(q_units[i], units, s.dpp_scale), self.num_demos)
            picked += [j for j in range(len(near)) if j not in picked][: self.num_demos - len(picked)]
            out.append(order_by_similarity([near[j] for j in picked], s.reverse))
        return out
