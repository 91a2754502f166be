"""Demonstration selection behind one small interface.

``DemoSelector.select(task, train, query=None)`` returns the demonstrations in prompt order. Global
strategies (``paper``, ``code``) ignore ``query`` and give every text the same demonstrations, which is what
lets the reranker share one prompt prefix; per-query strategies (KATE, Skill-KNN) set ``per_query = True``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InputError
from ..tasks.loaders import Example
from ..tasks.spec import TaskSpec


class DemoSelector:
    name = "base"
    per_query = False

    def __init__(self, num_demos: int = 8, seed: int = 13) -> None:
        if num_demos < 0:
            raise InputError("num_demos must be >= 0", field="num_demos")
        self.num_demos = num_demos
        self.seed = seed

    def select(self, task: TaskSpec, train: Sequence[Example], query: Example | None = None) -> list[Example]:
        raise NotImplementedError


class PaperRandomSelector(DemoSelector):
    """The paper: m random training examples, balanced over labels (seeded), in shuffled order."""

    name = "paper"

    def select(self, task, train, query=None):
        rng = np.random.default_rng(self.seed)
        by_label = {lab: [ex for ex in train if ex.label == lab] for lab in task.labels}
        present = [lab for lab in task.labels if by_label[lab]]
        if not present or self.num_demos == 0:
            return []
        base, extra = divmod(self.num_demos, len(present))
        bonus = set(rng.choice(len(present), size=extra, replace=False).tolist()) if extra else set()
        chosen: list[Example] = []
        for j, lab in enumerate(present):
            want = min(base + (j in bonus), len(by_label[lab]))
            idx = rng.choice(len(by_label[lab]), size=want, replace=False)
            chosen += [by_label[lab][i] for i in sorted(idx.tolist())]
        return [chosen[i] for i in rng.permutation(len(chosen))]


class CodeOrderSelector(DemoSelector):
    """The released code: walk the training file, at most int(m/L)+1 per label, until >= m cover every label."""

    name = "code"

    def select(self, task, train, query=None):
        if self.num_demos == 0:
            return []
        cap = self.num_demos // task.num_labels + 1
        counts = dict.fromkeys(task.labels, 0)
        chosen: list[Example] = []
        for ex in train:
            if counts[ex.label] < cap:
                chosen.append(ex)
                counts[ex.label] += 1
            if len(chosen) >= self.num_demos and all(counts.values()):
                break
        return chosen


STRATEGIES: dict[str, type[DemoSelector]] = {c.name: c for c in (PaperRandomSelector, CodeOrderSelector)}


def get_selector(name: str, num_demos: int = 8, seed: int = 13) -> DemoSelector:
    if name not in STRATEGIES:
        raise InputError(f"unknown demonstration selection '{name}', use one of {list(STRATEGIES)}",
                         field="demo_selection")
    return STRATEGIES[name](num_demos=num_demos, seed=seed)
