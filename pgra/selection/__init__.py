"""Demonstration selection: one interface (:class:`Selector`: ``fit(task, train)``, ``select(queries)``), one
file per strategy, and the registry the CLI reads its choices from.

    selector = pgra.get_selector("kate", num_demos=4, settings=pgra.SelectorSettings(encoder="models/minilm"))
    ids = selector.fit(task, train).select(queries)     # training positions per query, prompt order
"""

from __future__ import annotations

from .base import (
    GlobalSelector,
    SelectionCost,
    Selector,
    SelectorSettings,
    same_input,
    settings_key,
    with_index_encoder,
)
from .code_order import CodeOrderSelector
from .kate import KateSelector
from .paper import PaperSelector
from .random_draw import RandomSelector
from .skill_knn import SkillKnnSelector

STRATEGIES: dict[str, type[Selector]] = {
    c.name: c for c in (PaperSelector, CodeOrderSelector, RandomSelector, KateSelector, SkillKnnSelector)}


def register_selector(cls: type[Selector]) -> type[Selector]:
    """Add a strategy class to the registry under its ``name`` (the ``demo_selection`` / ``icl.selection`` value
    that picks it); returns it, so it works as a decorator."""
    STRATEGIES[cls.name] = cls
    return cls


def get_selector(name: str, num_demos: int = 8, seed: int = 13, settings: SelectorSettings | None = None,
                 lm: str = "", device: str | None = None, show_progress: bool = False,
                 dtype: str | None = None) -> Selector:
    """An unfitted selector of strategy ``name`` (``lm``: the stage's causal LM, Skill-KNN's default rewriter,
    loaded in ``dtype``)."""
    from ..errors import InputError

    if name not in STRATEGIES:
        raise InputError(f"unknown demonstration selection '{name}', use one of {list(STRATEGIES)}",
                         field="demo_selection")
    return STRATEGIES[name](num_demos=num_demos, seed=seed, settings=settings, lm=lm, device=device,
                            show_progress=show_progress, dtype=dtype)


__all__ = ["STRATEGIES", "CodeOrderSelector", "GlobalSelector", "KateSelector", "PaperSelector", "RandomSelector",
           "SelectionCost", "Selector", "SelectorSettings", "SkillKnnSelector", "get_selector", "register_selector", "same_input",
           "settings_key", "with_index_encoder"]
