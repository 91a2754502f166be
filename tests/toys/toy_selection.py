"""A toy demonstration strategy: the training inputs whose text is longest (a plug-in, one file), with an option
of its own (``demos.toy_skip``: the longest inputs it passes over), declared on the strategy like a built-in one's."""

from __future__ import annotations

from dataclasses import dataclass

from pgra.core.config import option
from pgra.selection import GlobalSelector


@dataclass
class LongestOptions:
    toy_skip: int = option(0, min=0, omit_default=True, help="toy_longest: the longest inputs passed over")


class Longest(GlobalSelector):
    name = "toy_longest"
    options = LongestOptions

    def draw(self) -> list[int]:
        ranked = sorted(range(len(self.train)), key=lambda i: (-len(self.train[i].text), i))
        return ranked[self.settings.toy_skip: self.settings.toy_skip + self.num_demos]

    @classmethod
    def uses_seed(cls, num_demos, settings) -> bool:
        return False
