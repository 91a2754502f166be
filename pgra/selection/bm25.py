"""``bm25``: the m training inputs nearest each query under pgra's BM25 (OpenICL's BM25 retriever)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.config import option
from ..retrieval.bm25 import METHODS, BM25Config, BM25Index
from ..tasks.loaders import Example
from .base import STRATEGIES, Selector, order_by_similarity, reverse_option
from .encoded import top_allowed

QUERY_BATCH = 256  # queries scored at once (a dense batch x training-set matrix)


@dataclass
class BM25Options:
    """``bm25``'s options."""

    bm25_method: str = option("okapi", choices=METHODS, omit_default=True,
                              help="bm25: the BM25 variant (okapi = rank_bm25's, the paper's tokenisation)")
    reverse: bool = reverse_option()


@STRATEGIES.register
class BM25Selector(Selector):
    """The training inputs with the highest BM25 score against the query (ties keep training order); the best
    sits next to the query unless ``reverse``."""

    name = "bm25"
    options = BM25Options
    described = ("bm25_method", "reverse")
    draws = False

    def _fit(self) -> None:
        self.index = BM25Index.build([ex.text for ex in self.train], BM25Config(method=self.settings.bm25_method),
                                     show_progress=False)

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        out: list[list[int]] = []
        for start in range(0, len(queries), QUERY_BATCH):
            batch = list(queries[start:start + QUERY_BATCH])
            scores = self.index.scores([q.text for q in batch])
            out += [order_by_similarity(top_allowed(scores[i], self.allowed(q), self.num_demos),
                                        self.settings.reverse) for i, q in enumerate(batch)]
        return out
