"""The fixed choices of config fields shared by several parts (precisions, AdamW, torch.compile). Choices that come
from a registry are read from it where the field is declared (``choices=REGISTRY.names``): an import the drawing sees."""

from __future__ import annotations

DTYPES = ("auto", "fp32", "fp16", "bf16", "bf16-if-native")
MIXED_PRECISION = ("no", "fp16", "bf16")
ADAMW_IMPLS = ("auto", "foreach", "fused")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")  # torch.compile's modes
