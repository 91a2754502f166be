"""``pgra``: Fusion-in-Decoder on the prompt-guided reranker's top d (the paper's method)."""

from __future__ import annotations

from .reader_method import ReaderMethod


class PGRA(ReaderMethod):
    name = "pgra"
    data = "reranked"
