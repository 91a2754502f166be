"""``paper``: m random training examples balanced over labels, one seeded draw for every query."""

from __future__ import annotations

import numpy as np

from .base import STRATEGIES, GlobalSelector


def balanced_draw(rng: np.random.Generator, labels: list[str], pools: dict[str, list[int]], m: int) -> list[int]:
    """``m`` positions spread evenly over the labels (the remainder to random labels), drawn, then shuffled."""
    present = [lab for lab in labels if pools.get(lab)]
    if not present or m == 0:
        return []
    base, extra = divmod(m, len(present))
    bonus = set(rng.choice(len(present), size=extra, replace=False).tolist()) if extra else set()
    chosen: list[int] = []
    for j, lab in enumerate(present):
        want = min(base + (j in bonus), len(pools[lab]))
        idx = rng.choice(len(pools[lab]), size=want, replace=False)
        chosen += [pools[lab][i] for i in sorted(idx.tolist())]
    return [chosen[i] for i in rng.permutation(len(chosen))]


@STRATEGIES.register
class PaperSelector(GlobalSelector):
    """The paper: m random training examples, balanced over labels (seeded), in shuffled order."""

    name = "paper"

    def draw(self) -> list[int]:
        pools = {lab: [i for i, ex in enumerate(self.train) if ex.label == lab] for lab in self.task.labels}
        return balanced_draw(np.random.default_rng(self.seed), self.task.labels, pools, self.num_demos)
