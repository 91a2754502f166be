"""Stage 1: first-stage retrievers (dense encoders + faiss, BM25, any registered one) and their indexes.

:mod:`.base` holds the interface, registry and ``IndexConfig``; :mod:`.build` builds an index folder,
:mod:`.index` loads and searches one, :mod:`.retrieve` is the ``pgra retrieve`` stage."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "RETRIEVERS":  # the registry with the built-in retrievers in it (the config's choices read it)
        from .base import RETRIEVERS, load_builtin

        load_builtin()
        return RETRIEVERS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
