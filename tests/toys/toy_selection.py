"""A toy demonstration strategy: the training inputs whose text is longest (a plug-in, one file)."""

from __future__ import annotations

from pgra.selection import GlobalSelector


class Longest(GlobalSelector):
    name = "toy_longest"

    def draw(self) -> list[int]:
        ranked = sorted(range(len(self.train)), key=lambda i: (-len(self.train[i].text), i))
        return ranked[: self.num_demos]

    @classmethod
    def uses_seed(cls, num_demos, settings) -> bool:
        return False
