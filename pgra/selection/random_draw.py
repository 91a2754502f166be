"""``random``: every query gets its own seeded random demonstrations (KATE's random baseline)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import option
from ..tasks.loaders import Example
from .base import STRATEGIES, Selector
from .paper import balanced_draw


@dataclass
class RandomOptions:
    """``random``'s options."""

    balanced: bool = option(False, flag="--demo-balanced",
                            help="random: draw the same number per label (the paper's draw is always balanced)")


@STRATEGIES.register
class RandomSelector(Selector):
    """m training examples per query (never itself), drawn from the seed and its text (``balanced``: over labels)."""

    name = "random"
    options = RandomOptions
    described = ("balanced",)

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        out = []
        for q in queries:
            pool, rng = self.allowed(q), np.random.default_rng([self.seed, zlib.crc32(q.text.strip().encode())])
            m = min(self.num_demos, len(pool))
            if self.settings.balanced:
                pools = {lab: [i for i in pool if self.train[i].label == lab] for lab in self.task.labels}
                out.append(balanced_draw(rng, self.task.labels, pools, m))
            else:
                out.append([pool[i] for i in rng.choice(len(pool), size=m, replace=False).tolist()])
        return out
