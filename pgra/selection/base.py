"""The one interface of every demonstration-selection strategy (OpenICL's retriever shape)."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.config import option
from ..core.errors import InputError
from ..core.registry import Registry
from ..data.itself import same_text
from ..tasks.loaders import Example
from ..tasks.spec import TaskSpec
from .settings import SelectorSettings, use_strategies


def reverse_option() -> Any:
    """The ``reverse`` option of the strategies that rank demonstrations by similarity (one option they share)."""
    return option(False, flag="--demo-reverse",
                  help="most similar demonstration first (default: last, next to the query)")


@dataclass
class SelectionCost:
    """LM work a selection took (Skill-KNN's rewrites; cached rewrites count what they cost when made)."""

    lm_calls: int = 0
    lm_tokens: int = 0
    rewrites_cached: int = 0
    rewrites_empty: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def same_input(query: Example, candidate: Example) -> bool:
    """The never-itself rule (:mod:`pgra.data.itself`) for two examples."""
    return same_text(query.text, candidate.text)


class Selector(ABC):
    """A demonstration-selection strategy; ``options``: its options' dataclass (in ``demos``), or None."""

    name: ClassVar[str]
    per_query: ClassVar[bool] = True
    options: ClassVar[type | None] = None
    draws: ClassVar[bool] = True  # False: the seed changes nothing it selects
    described: ClassVar[tuple[str, ...]] = ()  # its settings that describe() records, last

    def __init__(self, num_demos: int = 8, seed: int = 13, settings: Any = None,
                 lm: str = "", device: str | None = None, show_progress: bool = False,
                 dtype: str | None = None, encoder: Any = None) -> None:
        if num_demos < 0:
            raise InputError("num_demos must be >= 0", field="num_demos")
        self.num_demos, self.seed = num_demos, seed
        self.settings = settings if settings is not None else SelectorSettings()
        self.loaded_encoder = encoder
        self.lm, self.device, self.dtype, self.show_progress = lm, device, dtype, show_progress
        self.cost = SelectionCost()
        self.task: TaskSpec | None = None
        self.train: list[Example] = []

    def fit(self, task: TaskSpec, train: Sequence[Example]) -> Selector:
        """Remember the labelled training examples (and prepare whatever ``select`` searches)."""
        labelled = [ex for ex in train if ex.label is not None]
        if self.num_demos > len(labelled):
            raise InputError(f"num_demos={self.num_demos} is more than the {len(labelled)} labelled training "
                             "inputs", field="num_demos")
        self.task, self.train = task, labelled
        self._fit()
        return self

    def _fit(self) -> None:
        """Strategy-specific preparation after ``fit`` stored the task and training set (none by default)."""
        return None

    @classmethod
    def uses_seed(cls, num_demos: int, settings: Any) -> bool:
        """Whether ``seed`` can change what this strategy selects (False: an experiment runs it once, not per seed)."""
        return cls.draws and num_demos > 0

    @abstractmethod
    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        """Positions in the fitted training set, per query, in prompt order (the last next to the query)."""

    def select_examples(self, queries: Sequence[Example]) -> list[list[Example]]:
        """``select`` as training examples."""
        return [[self.train[i] for i in row] for row in self.select(queries)]

    def allowed(self, query: Example) -> list[int]:
        """Training positions the never-itself rule leaves for ``query``."""
        return [i for i, ex in enumerate(self.train) if not same_input(query, ex)]

    def describe(self) -> dict[str, Any]:
        """What defines this selection (for manifests and cache keys): :meth:`record`, then :attr:`described`."""
        return {**self.record(), **{k: getattr(self.settings, k) for k in self.described}}

    def record(self) -> dict[str, Any]:
        """The part of :meth:`describe` a family of strategies shares."""
        return {"strategy": self.name, "num_demos": self.num_demos, "seed": self.seed}

    def release(self) -> None:
        """Free the models ``select`` loaded (the rewriting LM); they load again if a later ``select`` needs them."""
        return None


class GlobalSelector(Selector):
    """A strategy that draws one list of demonstrations for every query (``demos`` after ``fit``)."""

    per_query = False
    demos: list[int]

    def _fit(self) -> None:
        self.demos = self.draw()

    @abstractmethod
    def draw(self) -> list[int]:
        """The demonstrations every query gets, as training positions in prompt order."""

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        return [list(self.demos) for _ in queries]

    @property
    def demo_examples(self) -> list[Example]:
        """The demonstrations every query gets, in prompt order."""
        return [self.train[i] for i in self.demos]


# the strategies that ship with pgra, one module each (importing one registers it), in the order they are listed
BUILTIN = ("paper", "code_order", "random_draw", "kate", "skill_knn", "bm25", "mmr", "votek", "dpp", "mdl",
           "topk_cone")
STRATEGIES: Registry[type[Selector]] = Registry("demonstration selection", __package__, BUILTIN,
                                                field="demo_selection", base=Selector)
register_selector = STRATEGIES.register  # add a strategy class under its ``name``; works as a decorator
use_strategies(STRATEGIES)  # the ``demos`` section is made from it (.settings sits below: it is handed over)


def order_by_similarity(ranked: list[int], reverse: bool) -> list[int]:
    """Prompt order of demonstrations ranked most similar first: that one last (by the query) unless ``reverse``."""
    return list(ranked) if reverse else list(reversed(ranked))


def settings_key(settings: Any) -> dict[str, Any]:
    """What in ``settings`` defines a selection, with the annotation file's content hash: for cache keys."""
    from pathlib import Path

    from ..core.config import io_role, result_settings
    from ..storage.artifacts import sha256_file

    key = result_settings(settings)
    for f in dataclasses.fields(settings):  # an input file's content (Skill-KNN's annotations), not its path alone
        value = getattr(settings, f.name)
        if io_role(f) == "in" and isinstance(value, str) and value and Path(value).is_file():
            key[f"{f.name}_sha256"] = sha256_file(value)
    return key


def with_index_encoder(settings: Any, index: dict[str, Any] | None) -> Any:
    """``settings`` whose empty ``encoder`` defaults to the index's query encoder and pooler, where it has one."""
    from dataclasses import replace

    from ..retrieval.base import recorded_encoder

    found = None if settings.encoder else recorded_encoder(index)
    if found is None:
        return settings
    encoder, pooler = found
    return replace(settings, encoder=encoder, pooler=settings.pooler if pooler is None else pooler)
