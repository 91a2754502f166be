"""The config of ``pgra build-index`` (and of an experiment's ``index`` section), importable from here as before:
its home is :mod:`.base`, beside the retriever interface it configures and the registry its ``dense.*`` and
``bm25.*`` sections are read from (each retriever declares its options on itself:
:attr:`~pgra.retrieval.base.Retriever.options`)."""

from __future__ import annotations

from .base import BM25Section as BM25Section  # re-exported: their home is .base
from .base import DenseSection as DenseSection
from .base import IndexConfig

__all__ = ["IndexConfig"]
