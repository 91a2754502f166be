"""``code``: the released PGRA code's demonstrations, walking the training file in order."""

from __future__ import annotations

from .base import STRATEGIES, GlobalSelector


@STRATEGIES.register
class CodeOrderSelector(GlobalSelector):
    """Walk the training file taking at most int(m/L)+1 per label, until >= m cover every label."""

    name = "code"
    draws = False  # the training file's order

    def draw(self) -> list[int]:
        if self.num_demos == 0:
            return []
        cap = self.num_demos // self.task.num_labels + 1
        counts = dict.fromkeys(self.task.labels, 0)
        chosen: list[int] = []
        for i, ex in enumerate(self.train):
            if counts[ex.label] < cap:
                chosen.append(i)
                counts[ex.label] += 1
            if len(chosen) >= self.num_demos and all(counts.values()):
                break
        return chosen
