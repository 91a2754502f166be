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


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 CPUs that compute bf16 in hardware (else it is emulated, slower)


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (avx512_bf16 or AMX): there bf16 is faster than fp32; without
    them torch emulates it, about 3x slower than fp32 (bench/README)."""
    return bool(cpu_flags() & set(CPU_BF16_FLAGS))


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """``auto``/None: bf16 on GPUs that support it, else fp16 on GPU; fp32 on CPU. ``bf16-if-native``: the same,
    but bf16 on a CPU that computes it in hardware (:func:`cpu_has_native_bf16`): fast everywhere, and a run's
    numbers then depend on the CPU (as ``auto``'s do on the GPU)."""
    if dtype in (None, "auto", "bf16-if-native"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if dtype == "bf16-if-native" and device.type == "cpu" and cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype '{dtype}', use one of auto, bf16-if-native, {', '.join(DTYPES)}")
    return DTYPES[dtype]
