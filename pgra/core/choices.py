"""Choices that come from a registry, read lazily when a parser or a config needs them (never hard-coded)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

DTYPES = ("auto", "fp32", "fp16", "bf16", "bf16-if-native")
MIXED_PRECISION = ("no", "fp16", "bf16")
ADAMW_IMPLS = ("auto", "foreach", "fused")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")  # torch.compile's modes


def registry_names(module: str, attr: str) -> Callable[[], list[str]]:
    """A callable listing the keys (or items) of ``module.attr``, imported only when called."""

    def names() -> list[str]:
        registry = getattr(importlib.import_module(module), attr)
        return list(registry.names() if hasattr(registry, "names") else registry)  # a Registry loads its own

    names.__name__ = f"{attr.lower()}_names"
    return names


task_names = registry_names("pgra.tasks.registry", "BUILTIN")  # a task YAML path is accepted too
demo_selections = registry_names("pgra.selection", "STRATEGIES")
poolers = registry_names("pgra.retrieval.encoder", "POOLERS")
index_types = registry_names("pgra.retrieval.dense", "INDEX_TYPES")
bm25_methods = registry_names("pgra.retrieval.bm25", "METHODS")
retrievers = registry_names("pgra.retrieval", "RETRIEVERS")  # the built-in ones and any registered since
reader_formats = registry_names("pgra.tasks.spec", "READER_FORMATS")
methods = registry_names("pgra.methods", "METHODS")
