"""The environment a result was made in, as a reproduction log records it, and what a grid's cells recorded."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from ..storage.artifacts import library_versions, source_commit

# the CPU flags that select torch's and faiss's kernels (and so can move a number in its last digits)
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile",
              "asimd", "sve")


SIBLINGS = "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"  # Linux: the CPUs of cpu0's core


def threads_per_core() -> int | None:
    """How many logical CPUs share one physical core (2 where SMT pairs them: two such CPUs compute a
    compute-bound step about as fast as one; docs/experiments.md, *Times and tables on each CPU*); None off Linux."""
    try:
        text = Path(SIBLINGS).read_text(encoding="ascii")
        count = 0
        for part in text.strip().split(","):  # "0", "0,32" or "0-1"
            first, _, last = part.partition("-")
            count += int(last or first) - int(first) + 1
    except (OSError, ValueError):
        return None
    return count or None


def cpu_description() -> dict[str, Any]:
    """The CPU: model name, logical cores, threads per core and which :data:`SIMD_FLAGS` it has."""
    from .device import cpu_flags, cpu_model

    flags = cpu_flags()
    return {"model": cpu_model(), "cores": os.cpu_count(), "threads_per_core": threads_per_core(),
            "simd": [f for f in SIMD_FLAGS if f in flags]}


def _torch_part() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    out: dict[str, Any] = {"cpu_capability": None, "cuda": torch.version.cuda, "gpus": []}
    with contextlib.suppress(AttributeError, RuntimeError):
        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    if torch.cuda.is_available():
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        out["cudnn"] = torch.backends.cudnn.version()
        out["bf16"] = bool(torch.cuda.is_bf16_supported())
    return out


def gpu_driver() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), or None where there is none."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[0] if lines else None


# what holds a CPU's libraries (torch, faiss, MKL, oneDNN) to fewer instructions than it has: the readers' fp32
# numbers follow them (docs/experiments.md, the demo on AVX2)
SIMD_VARIABLES = ("ATEN_CPU_CAPABILITY", "FAISS_SIMD_LEVEL", "FAISS_OPT_LEVEL", "MKL_ENABLE_INSTRUCTIONS",
                  "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def environment_record() -> dict[str, Any]:
    """This machine's environment (see the module's docstring); every field is JSON."""
    torch_part = _torch_part()
    return {"pgra_commit": source_commit(), "versions": library_versions(),
            "platform": platform.platform(), "cpu": cpu_description(),
            "torch_cpu_capability": torch_part.get("cpu_capability"),
            "simd_env": {k: os.environ[k] for k in SIMD_VARIABLES if k in os.environ},
            "cuda": torch_part.get("cuda"), "cudnn": torch_part.get("cudnn"), "gpus": torch_part.get("gpus", []),
            "gpu_driver": gpu_driver() if torch_part.get("gpus") else None}


def _counted(values: list[Any]) -> list[dict[str, Any]]:
    """The distinct values (JSON-equal), in first-seen order, each with how many cells recorded it."""
    counts: dict[str, dict[str, Any]] = {}
    for v in values:
        counts.setdefault(json.dumps(v, sort_keys=True, default=str), {"value": v, "cells": 0})["cells"] += 1
    return list(counts.values())


def _section(record: dict[str, Any], name: str) -> dict[str, Any]:
    """``record[name]`` when it is an object, else an empty one (a record read from a file may hold anything)."""
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def cells_environment(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The distinct commits, versions and hardware the cells recorded, each with its count, and readers' precisions."""
    hardware = [{k: _section(_section(r, "cost"), "hardware").get(k) for k in ("device", "cpu", "cores")}
                for r in records]
    precision = [_section(_section(r, "config"), "reader").get("mixed_precision") for r in records]
    return {"cells": len(records), "git_commits": _counted([r.get("git_commit") for r in records]),
            "versions": _counted([r.get("versions") for r in records]), "hardware": _counted(hardware),
            "reader_precision": _counted(precision)}


__all__ = ["SIMD_FLAGS", "cells_environment", "cpu_description", "environment_record", "gpu_driver", "threads_per_core"]
