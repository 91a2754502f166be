"""The one interface of every demonstration-selection strategy (OpenICL's retriever shape).

``selector.fit(task, train)`` once, then ``selector.select(queries)`` returns, for a whole split, the chosen
training positions per query in prompt order (the last one sits next to the query). Global strategies
(``paper``, ``code``) give every query the same demonstrations, which lets the reranker share one prompt prefix;
per-query strategies (``random``, ``kate``, ``skill_knn``) never select the query itself (identical text).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import choices
from ..config import option
from ..errors import InputError
from ..itself import same_text
from ..tasks.loaders import Example
from ..tasks.spec import TaskSpec

METRICS = ("cosine", "euclidean")
SKILL_VARIANTS = ("single", "consistency", "distinctiveness")


@dataclass
class SelectorSettings:
    """The strategy-specific settings (each strategy reads the ones it needs)."""

    balanced: bool = option(False, flag="--demo-balanced",
                            help="random: draw the same number per label (the paper's draw is always balanced)")
    encoder: str = option("", flag="--demo-encoder",
                          help="kate / skill_knn: sentence encoder (name or folder); default: the index's encoder")
    pooler: str = option("mean", flag="--demo-pooler", choices=choices.poolers,
                         help="kate / skill_knn: pooler of --demo-encoder (the index's own with the index's encoder)")
    max_length: int = option(128, min=1, help="kate / skill_knn: tokens per encoded input")
    metric: str = option("cosine", flag="--demo-metric", choices=METRICS,
                         help="kate: cosine or negative Euclidean distance")
    reverse: bool = option(False, flag="--demo-reverse",
                           help="most similar demonstration first (default: last, next to the query)")
    annotations: str = option("", io="in", flag="--skill-annotations",
                              help="skill_knn: JSONL of annotated {\"input\", \"skill\"} demonstrations")
    rewrite_lm: str = option("", io="in", flag="--skill-lm", help="skill_knn: causal LM that rewrites; default: the "
                                                         "stage's LM")
    instruction: str = option("Describe the skill needed to classify each sentence, without giving its answer.",
                              help="skill_knn: the line before the annotated demonstrations")
    variant: str = option("single", flag="--skill-variant", choices=SKILL_VARIANTS,
                          help="skill_knn: one rewrite, or m rewrites with shuffled demonstration order "
                               "(consistency: cosine of mean embeddings; distinctiveness: max cosine over pairs)")
    rewrites: int = option(5, min=1, help="skill_knn: rewrites per input for the two variants (m)")
    max_new_tokens: int = option(32, min=1, help="skill_knn: longest rewrite in tokens")
    batch_size: int = option(16, cosmetic=True, min=1, help="skill_knn: inputs per generation batch")
    cache_dir: str = option("cache/selection", cosmetic=True, io="store", help="encoded training sets and rewrites, kept across runs")


@dataclass
class SelectionCost:
    """LM work a selection took (Skill-KNN's rewrites; cached rewrites count what they cost when made)."""

    lm_calls: int = 0
    lm_tokens: int = 0
    rewrites_cached: int = 0
    rewrites_empty: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def same_input(query: Example, candidate: Example) -> bool:
    """The never-itself rule (:mod:`pgra.itself`) for two examples."""
    return same_text(query.text, candidate.text)


class Selector(ABC):
    """A demonstration-selection strategy: ``fit(task, train)``, then ``select(queries)``."""

    name: ClassVar[str]
    per_query: ClassVar[bool] = True

    def __init__(self, num_demos: int = 8, seed: int = 13, settings: SelectorSettings | None = None,
                 lm: str = "", device: str | None = None, show_progress: bool = False,
                 dtype: str | None = None) -> None:
        if num_demos < 0:
            raise InputError("num_demos must be >= 0", field="num_demos")
        self.num_demos, self.seed = num_demos, seed
        self.settings = settings or SelectorSettings()
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
    def uses_seed(cls, num_demos: int, settings: SelectorSettings) -> bool:
        """Whether ``seed`` can change what this strategy selects under these settings (False lets an experiment
        run an in-context learning method once, not once per seed). Seeded draws keep this default; no
        demonstrations at all need no seed."""
        return num_demos > 0

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
        """What defines this selection (for manifests and cache keys)."""
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


def order_by_similarity(ranked: list[int], reverse: bool) -> list[int]:
    """Prompt order of demonstrations ranked most similar first: the most similar last (next to the query), or
    first with ``reverse``."""
    return list(ranked) if reverse else list(reversed(ranked))


def settings_key(settings: SelectorSettings) -> dict[str, Any]:
    """What in ``settings`` defines a selection (no cache folder or batch size), with the annotation file's
    content hash: for the cache keys of the runs that use it."""
    from pathlib import Path

    from ..artifacts import sha256_file
    from ..config import result_settings

    key = result_settings(settings)
    if settings.annotations and Path(settings.annotations).is_file():
        key["annotations_sha256"] = sha256_file(settings.annotations)
    return key


def with_index_encoder(settings: SelectorSettings, index: dict[str, Any] | None) -> SelectorSettings:
    """``settings`` whose empty ``encoder`` defaults to the index's query encoder and pooler, when its retriever
    has one (a candidates manifest's ``index`` record)."""
    from dataclasses import replace

    from ..retrieval.base import recorded_encoder

    found = None if settings.encoder else recorded_encoder(index)
    if found is None:
        return settings
    encoder, pooler = found
    return replace(settings, encoder=encoder, pooler=settings.pooler if pooler is None else pooler)
