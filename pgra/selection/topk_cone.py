"""``topk_cone``: TopK + ConE (Peng et al. 2023; docs/selectors.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import MAX_ITEMS, option
from ..lm.prompts import demo_prefix
from ..tasks.loaders import Example
from .base import STRATEGIES, order_by_similarity, reverse_option
from .encoded import EncoderOptions, top_allowed
from .lm_scored import LMScoredSelector


@dataclass
class ConEOptions(EncoderOptions):
    """``topk_cone``'s options: the sentence encoder, the candidates re-ranked, the order."""

    cone_candidates: int = option(30, min=1, max=MAX_ITEMS, omit_default=True,
                                  help="topk_cone: nearest training inputs per query the LM re-ranks")
    reverse: bool = reverse_option()


@STRATEGIES.register
class TopKConESelector(LMScoredSelector):
    """The m candidates of least conditional entropy (ties: the nearer), the lowest by the query unless ``reverse``."""

    name = "topk_cone"
    options = ConEOptions
    described = ("cone_candidates", "reverse")

    def conditional_entropy(self, query: Example, candidates: list[int]) -> np.ndarray:
        """Mean token cross-entropy of the query's rendering after each candidate as the one demonstration."""
        logp, counts = self.score([demo_prefix(self.task, [self.train[c]]) for c in candidates],
                                  [self.task.render(query.text)])
        return -logp[:, 0] / np.maximum(counts[:, 0], 1)

    def select_new(self, queries: Sequence[Example]) -> list[list[int]]:
        rel = self.query_units(queries) @ self.train_units.T
        out = []
        for i, q in enumerate(queries):
            near = top_allowed(rel[i], self.allowed(q), max(self.settings.cone_candidates, self.num_demos))
            entropy = self.conditional_entropy(q, near)
            ranked = [near[j] for j in np.argsort(entropy, kind="stable")[: self.num_demos]]
            out.append(order_by_similarity(ranked, self.settings.reverse))
        return out
