"""``fid``: Fusion-in-Decoder on the first-stage retriever's top d (the paper's FiD row)."""

from __future__ import annotations

from .reader_method import ReaderMethod


class FiD(ReaderMethod):
    name = "fid"
    data = "candidates"
