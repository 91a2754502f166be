"""``kate``: the m training examples nearest to each query under a sentence encoder (Liu et al. 2022)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.config import option
from ..tasks.loaders import Example
from .base import STRATEGIES, order_by_similarity, reverse_option
from .encoded import EncodedSelector, EncoderOptions, similarities, top_allowed

METRICS = ("cosine", "euclidean")


@dataclass
class KateOptions(EncoderOptions):
    """``kate``'s options: the sentence encoder, the similarity, the order."""

    metric: str = option("cosine", flag="--demo-metric", choices=METRICS,
                         help="kate: cosine or negative Euclidean distance")
    reverse: bool = reverse_option()


@STRATEGIES.register
class KateSelector(EncodedSelector):
    """Nearest training examples by cosine (or negative Euclidean distance), the nearest last unless ``reverse``."""

    name = "kate"
    options = KateOptions
    described = ("metric", "reverse")

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        scores = similarities(self.encoder.encode([q.text for q in queries], cache=False), self.train_vectors,
                              self.settings.metric)
        return [order_by_similarity(top_allowed(scores[i], self.allowed(q), self.num_demos), self.settings.reverse)
                for i, q in enumerate(queries)]
