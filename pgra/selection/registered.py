"""The registry of demonstration strategies, importable from here as before: its home is :mod:`.base`, beside the
:class:`~pgra.selection.base.Selector` interface its entries are (the registry hands itself to :mod:`.settings`,
which makes the ``demos`` section from it)."""

from __future__ import annotations

from .base import BUILTIN, STRATEGIES, register_selector

__all__ = ["BUILTIN", "STRATEGIES", "register_selector"]
