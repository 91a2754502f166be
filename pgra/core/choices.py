"""The fixed choices of config fields several parts share (registries give the others)."""

from __future__ import annotations

DTYPES = ("auto", "fp32", "fp16", "bf16", "bf16-if-native")
MIXED_PRECISION = ("no", "fp16", "bf16")
ADAMW_IMPLS = ("auto", "foreach", "fused")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")  # torch.compile's modes
