"""Demonstration selection: :class:`Selector`, one file per strategy, their registry (docs/selectors.md)."""

from __future__ import annotations

from .base import (
    BUILTIN,
    STRATEGIES,
    GlobalSelector,
    SelectionCost,
    Selector,
    register_selector,
    same_input,
    settings_key,
    with_index_encoder,
)
from .settings import SelectorSettings, selector_settings

STRATEGIES.load_builtin()  # registered in BUILTIN's order (the order of the choices), whatever imports them
from .code_order import CodeOrderSelector  # noqa: E402
from .kate import KateSelector  # noqa: E402
from .paper import PaperSelector  # noqa: E402
from .random_draw import RandomSelector  # noqa: E402
from .skill_knn import SkillKnnSelector  # noqa: E402


def get_selector(name: str, num_demos: int = 8, seed: int = 13, settings: SelectorSettings | None = None,
                 lm: str = "", device: str | None = None, show_progress: bool = False,
                 dtype: str | None = None, encoder=None) -> Selector:
    """An unfitted selector of strategy ``name`` (``lm``: the stage's causal LM; ``encoder``: the index's)."""
    return STRATEGIES.part(name)(num_demos=num_demos, seed=seed, settings=settings, lm=lm, device=device,
                                 show_progress=show_progress, dtype=dtype, encoder=encoder)


__all__ = ["BUILTIN", "STRATEGIES", "CodeOrderSelector", "GlobalSelector", "KateSelector", "PaperSelector",
           "RandomSelector", "SelectionCost", "Selector", "SelectorSettings", "SkillKnnSelector", "get_selector",
           "register_selector", "same_input", "selector_settings", "settings_key", "with_index_encoder"]
