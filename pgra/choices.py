"""Choices that come from a registry, read lazily when a parser or a config needs them (never hard-coded)."""

from __future__ import annotations

DTYPES = ("auto", "fp32", "fp16", "bf16")
MIXED_PRECISION = ("no", "fp16", "bf16")


def task_names() -> list[str]:
    """The registered task names (a task YAML path is accepted wherever a task is)."""
    from .tasks.registry import BUILTIN

    return list(BUILTIN)


def demo_selections() -> list[str]:
    """The registered demonstration-selection strategies."""
    from .selection import STRATEGIES

    return list(STRATEGIES)


def poolers() -> list[str]:
    from .retrieval.encoder import POOLERS

    return list(POOLERS)


def index_types() -> list[str]:
    from .retrieval.dense import INDEX_TYPES

    return list(INDEX_TYPES)


def bm25_methods() -> list[str]:
    from .retrieval.bm25 import METHODS

    return list(METHODS)


def reader_formats() -> list[str]:
    from .tasks.spec import READER_FORMATS

    return list(READER_FORMATS)
