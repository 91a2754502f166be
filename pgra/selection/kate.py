"""``kate``: the m training examples nearest to each query under a sentence encoder (Liu et al. 2022)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.config import option
from ..core.errors import InputError
from ..tasks.loaders import Example
from .base import STRATEGIES, Selector, order_by_similarity, reverse_option
from .encoded import CachedEncoder, EncoderOptions, similarities, top_allowed

METRICS = ("cosine", "euclidean")


@dataclass
class KateOptions(EncoderOptions):
    """``kate``'s options: the sentence encoder, the similarity, the order."""

    metric: str = option("cosine", flag="--demo-metric", choices=METRICS,
                         help="kate: cosine or negative Euclidean distance")
    reverse: bool = reverse_option()


@STRATEGIES.register
class KateSelector(Selector):
    """Nearest training examples by cosine (or negative Euclidean distance) of their encodings; the most
    similar sits next to the query unless ``reverse``. The encoded training set is cached on disk."""

    name = "kate"
    options = KateOptions

    @classmethod
    def uses_seed(cls, num_demos: int, settings) -> bool:
        return False  # nearest neighbours, ties broken by position: no draw

    def _fit(self) -> None:
        if not self.settings.encoder:
            raise InputError("kate needs a sentence encoder", field="demo_encoder")
        self.encoder = CachedEncoder(self.settings, self.device, self.show_progress, self.loaded_encoder)
        self.train_vectors = self.encoder.encode([ex.text for ex in self.train])

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        if not queries:
            return []
        scores = similarities(self.encoder.encode([q.text for q in queries], cache=False), self.train_vectors,
                              self.settings.metric)
        return [order_by_similarity(top_allowed(scores[i], self.allowed(q), self.num_demos), self.settings.reverse)
                for i, q in enumerate(queries)]

    def describe(self) -> dict:
        s = self.settings
        encoder = self.encoder.encoder.fingerprint if hasattr(self, "encoder") else s.encoder
        return {**super().describe(), "encoder": encoder, "pooler": s.pooler,
                "max_length": s.max_length, "metric": s.metric, "reverse": s.reverse}
