"""``no_retrieval``: the reader alone, with no evidence (the paper's "T5, no retrieval" row)."""

from __future__ import annotations

from .reader_method import ReaderMethod


class NoRetrieval(ReaderMethod):
    name = "no_retrieval"
    data = "candidates"  # only the inputs and labels are read
    evidence = "none"

    def n_passages(self) -> int:
        return 0
