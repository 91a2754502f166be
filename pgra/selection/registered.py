"""The registry of demonstration strategies, importable from here; its home is :mod:`.base`."""

from __future__ import annotations

from .base import BUILTIN, STRATEGIES, register_selector

__all__ = ["BUILTIN", "STRATEGIES", "register_selector"]
