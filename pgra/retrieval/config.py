"""The config of ``pgra build-index``, importable from here; its home is :mod:`.base`."""

from __future__ import annotations

from .base import BM25Section as BM25Section  # re-exported: their home is .base
from .base import DenseSection as DenseSection
from .base import IndexConfig

__all__ = ["IndexConfig"]
