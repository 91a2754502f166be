"""Device, dtype and CPU-thread choice shared by every model-running stage and rank (GPU optional everywhere)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

import torch

from .errors import whole_number

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16, "float16": torch.float16,
          "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


def resolve_device(device: str | None = None) -> torch.device:
    """``auto``/None: the process's CUDA device when there is one (LOCAL_RANK-aware), else CPU."""
    if device in (None, "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", local_device_index())
        warn_if_cuda_missing()
        return torch.device("cpu")
    return torch.device(device)


def local_device_index(count: int | None = None) -> int:
    """This process's GPU among the ``count`` it sees (default: all of them): ``LOCAL_RANK`` (else ``RANK``, else
    0) modulo ``count``. The one choice of every rank (:func:`pgra.distributed.init_distributed`), stage and cell: under ``srun
    --gpus-per-task=1`` each rank sees one GPU (its device 0, whatever its ``LOCAL_RANK``), and ranks beyond the
    GPUs a node shows share them round-robin."""
    count = torch.cuda.device_count() if count is None else count
    if count < 1:
        raise ValueError("no GPU visible to choose from")
    return (whole_number(os.environ.get("LOCAL_RANK") or os.environ.get("RANK") or 0) or 0) % count


def ranks_per_node(env: Mapping[str, str] | None = None) -> int | None:
    """How many ranks of this launch run on this node (``LOCAL_WORLD_SIZE``: torchrun, accelerate launch); None
    when not launched as ranks."""
    return whole_number((os.environ if env is None else env).get("LOCAL_WORLD_SIZE", "")) or None


CORE_SHARERS_ENV = "PGRA_CORE_SHARERS"  # a cell's child process: how many processes share this node's cores with it


def core_sharers(env: Mapping[str, str] | None = None) -> int:
    """How many processes compute on this node's cores side by side with this one, itself included: the launch's
    ranks on this node (:func:`ranks_per_node`), else what the rank or launcher that started this process as a
    cell's child set (:data:`CORE_SHARERS_ENV`: the child sees no launch), else 1."""
    env = os.environ if env is None else env
    return ranks_per_node(env) or whole_number(env.get(CORE_SHARERS_ENV, "")) or 1


# ----- a GPU expected but not seen -----
NO_GPU_WARNED = "PGRA_NO_GPU_WARNED"  # set once warned: the grid's workers and cells inherit it and stay silent
_warned = False


def cuda_expected(env: Mapping[str, str] | None = None) -> str | None:
    """Why this machine looks like it has a GPU for this process (``CUDA_VISIBLE_DEVICES`` naming devices, else
    ``nvidia-smi`` on the PATH), or None. ``CUDA_VISIBLE_DEVICES`` empty or ``-1`` hides the GPUs on purpose."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        first = listed.split(",")[0].strip()
        return None if not first or first.startswith("-") or first == "NoDevFiles" else \
            f"CUDA_VISIBLE_DEVICES={listed}"
    return "nvidia-smi is on the PATH" if shutil.which("nvidia-smi") else None


def warn_if_cuda_missing() -> bool:
    """One line on stderr, once (in this process and the pgra processes it starts), when a GPU is expected
    (:func:`cuda_expected`) but torch sees none: the run would otherwise go on on the CPU, in fp32, silently.
    Whether it warned now."""
    global _warned
    if _warned or os.environ.get(NO_GPU_WARNED) == "1" or torch.cuda.is_available():
        return False
    reason = cuda_expected()
    if reason is None:
        return False
    _warned = True
    os.environ[NO_GPU_WARNED] = "1"
    build = "a CPU-only build: install a CUDA torch, docs/setup.md" if torch.version.cuda is None else \
        f"built for CUDA {torch.version.cuda}: check the driver and the GPUs allotted to the job"
    print(f"warning: {reason} but torch {torch.__version__} sees no GPU ({build}); running on the CPU in fp32",
          file=sys.stderr, flush=True)
    return True


# ----- CPU threads per rank -----
THREADS_ENV = "OMP_NUM_THREADS"
ACCELERATE_MARKS = ("ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_USE_DEEPSPEED")  # what every accelerate launch sets


def node_cores() -> int:
    """The CPUs this process may run on (its affinity: what Slurm or taskset allotted), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _launcher_start_env() -> dict[str, str] | None:
    """The environment the parent process (the launcher: torchrun's agent, ``accelerate launch``) started with
    (Linux ``/proc/<ppid>/environ``: what the user gave it, before it set anything); None when unreadable."""
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    pairs = (item.decode(errors="replace").partition("=") for item in data.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def launcher_threads(env: Mapping[str, str] | None = None,
                     launcher_env: Mapping[str, str] | None | bool = False) -> int | None:
    """The intra-op thread count for this rank and each cell it runs in a child process, or None to leave the
    environment's alone.

    torchrun (more than one process per node) and ``accelerate launch`` set ``OMP_NUM_THREADS=1`` for every rank
    when the user did not set it, so faiss, BLAS and torch would run on one thread a rank. The rule: under such a
    launcher (``LOCAL_WORLD_SIZE`` or :data:`ACCELERATE_MARKS` set), an ``OMP_NUM_THREADS`` of ``1`` that the launcher's
    own start environment (``launcher_env``, default: read from ``/proc/<ppid>/environ``) does not hold is the
    launcher's default, and becomes ``cores // ranks on this node`` (at least 1; cores: :func:`node_cores`).
    Any other value, a ``1`` the user gave the launcher, or no launcher: None (kept). Where the launcher's start
    environment cannot be read, ``1`` under a launcher is taken for its default."""
    env = os.environ if env is None else env
    launched = ranks_per_node(env) is not None or any(k in env for k in ACCELERATE_MARKS)
    if not launched or env.get(THREADS_ENV, "").strip() != "1":
        return None
    start = _launcher_start_env() if launcher_env is False else launcher_env
    if isinstance(start, Mapping) and THREADS_ENV in start:  # the user's 1, passed through the launcher
        return None
    return max(1, node_cores() // (ranks_per_node(env) or 1))


def apply_launcher_threads() -> int | None:
    """Give this rank :func:`launcher_threads` threads (torch's intra-op pool, faiss's OpenMP pool when loaded,
    and ``OMP_NUM_THREADS`` for the libraries and child processes that start later); the count, or None when
    nothing changed."""
    threads = launcher_threads()
    if threads is None:
        return None
    os.environ[THREADS_ENV] = str(threads)
    torch.set_num_threads(threads)
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss.omp_set_num_threads(threads)
    return threads


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 CPUs that compute bf16 in hardware (else it is emulated, slower)


def cpu_info() -> dict[str, str]:
    """The first processor's fields in Linux ``/proc/cpuinfo`` (``model name``, ``flags`` ...); empty elsewhere."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep:
                    info.setdefault(key.strip(), value.strip())
                elif info and not line.strip():  # the blank line after the first processor
                    break
    except OSError:
        pass
    return info


def cpu_flags() -> set[str]:
    """The CPU's feature flags (``flags`` on x86, ``Features`` on ARM; empty without /proc/cpuinfo)."""
    info = cpu_info()
    return set((info.get("flags") or info.get("Features") or "").split())


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's processor or machine name."""
    import platform

    return cpu_info().get("model name") or platform.processor() or platform.machine()


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (avx512_bf16 or AMX) and torch may use it: there bf16 is faster
    than fp32; without them torch emulates it, about 3x slower than fp32 (bench/README). Torch held below AVX-512
    (``ATEN_CPU_CAPABILITY=avx2``, the way to run as an AVX2-only CPU does) counts as without them."""
    if not cpu_flags() & set(CPU_BF16_FLAGS):
        return False
    return str(torch.backends.cpu.get_cpu_capability()).upper().startswith(("AVX512", "AMX"))


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
