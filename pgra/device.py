"""Device and dtype choice shared by every model-running stage (GPU optional everywhere)."""

from __future__ import annotations

import torch

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16,
          "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


def resolve_device(device: str | None = None) -> torch.device:
    """``auto``/None: the process's CUDA device when there is one (LOCAL_RANK-aware), else CPU."""
    if device in (None, "auto"):
        if torch.cuda.is_available():
            import os

            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        return torch.device("cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """``auto``/None: bf16 on GPUs that support it, else fp16 on GPU; fp32 on CPU."""
    if dtype in (None, "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype '{dtype}', use one of auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]
