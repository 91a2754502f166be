"""Stage 1: task-agnostic first-stage retrievers (dense encoders + faiss, BM25, any registered one) and their
indexes.

- :mod:`.base`: the :class:`~pgra.retrieval.base.Retriever` interface, its registry (``RETRIEVERS``) and the
  ``IndexConfig`` it is built from (importable from :mod:`.config` too);
- :mod:`.dense_retriever`, :mod:`.bm25_retriever`: the built-in retrievers, one file each (over :mod:`.dense`'s
  faiss indexes, :mod:`.encoder`'s sentence encoder and :mod:`.bm25`'s weight matrix);
- :mod:`.build`: ``build_index`` (the folder, its build key, resume, manifest);
  :mod:`.index`: ``Index``, a built index loaded and searched; :mod:`.retrieve`: the ``pgra retrieve`` stage.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "RETRIEVERS":  # the registry with the built-in retrievers in it (the config's choices read it)
        from .base import RETRIEVERS, load_builtin

        load_builtin()
        return RETRIEVERS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
