"""The method that reads the toy stage (a new method on a new stage: this file and tests/toys/toy_stage.py)."""

from __future__ import annotations

from pgra.methods import register_method
from pgra.methods.reader_method import ReaderMethod


@register_method
class FiDTail(ReaderMethod):
    name = "fid_toy_tail"
    data = "toy_tail"  # the stage it reads: the grid builds it (and what it reads) for every task
