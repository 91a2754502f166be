"""The registry of demonstration strategies, in a module of its own: the interface (:mod:`.base`) and the ``demos``
section built from the strategies' options (:mod:`.settings`) both read it, and neither imports the other back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..registry import Registry

if TYPE_CHECKING:
    from .base import Selector

# the strategies that ship with pgra, one module each (importing one registers it), in the order they are listed
BUILTIN = ("paper", "code_order", "random_draw", "kate", "skill_knn", "bm25", "mmr", "votek", "dpp", "mdl",
           "topk_cone")
STRATEGIES: Registry[type[Selector]] = Registry("demonstration selection", __package__, BUILTIN,
                                                field="demo_selection")
register_selector = STRATEGIES.register  # add a strategy class under its ``name``; works as a decorator

__all__ = ["BUILTIN", "STRATEGIES", "register_selector"]
