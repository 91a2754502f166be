"""Device, dtype and CPU-thread choice shared by every model-running stage and rank (GPU optional everywhere)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

import torch

from ..core.errors import whole_number

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


def launch_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's rank for choosing its GPU: ``LOCAL_RANK``, else ``RANK``; None when launched as neither."""
    env = os.environ if env is None else env
    for name in ("LOCAL_RANK", "RANK"):
        value = whole_number(env.get(name, ""))
        if value is not None:
            return value
    return None


def local_device_index(count: int | None = None, env: Mapping[str, str] | None = None) -> int:
    """This process's GPU among the ``count`` it sees (default: all): :func:`launch_rank` (else 0) modulo ``count``,
    the one choice of every rank, stage, faiss index and cell (ranks past the GPUs share them round-robin)."""
    count = torch.cuda.device_count() if count is None else count
    if count < 1:
        raise ValueError("no GPU visible to choose from")
    return (launch_rank(env) or 0) % count


def one_gpu_each(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one of several ranks, each on its own GPU (a lone process may use every GPU)."""
    env = os.environ if env is None else env
    if launch_rank(env) is None:
        return False
    ranks = ranks_per_node(env)
    world = env.get("WORLD_SIZE", "").strip()
    return ranks != 1 if ranks is not None else world != "1"


def gpu_count() -> int:
    """The GPUs torch sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def shares_a_gpu(env: Mapping[str, str] | None = None, gpus: int | None = None) -> bool:
    """Whether this rank's GPU is also a lower local rank's (the node's ranks outnumber its ``gpus``)."""
    env = os.environ if env is None else env
    gpus = gpu_count() if gpus is None else gpus
    ranks = ranks_per_node(env)
    if gpus < 1 or ranks is None or ranks <= gpus:
        return False
    return (whole_number(env.get("LOCAL_RANK") or 0) or 0) >= gpus


STAGE_PARTNER_ENV = "PGRA_STAGE_PARTNER_PID"  # a local worker: the pid of the worker that builds stages on its GPU


def stage_partner_alive(env: Mapping[str, str] | None = None) -> bool:
    """Whether the local worker that took this GPU first still runs (then this one builds no stage)."""
    value = whole_number((os.environ if env is None else env).get(STAGE_PARTNER_ENV, ""))
    if value is None or not 2 <= value < 2 ** 31:  # 0 names a process group, 1 is init
        return False
    try:
        os.kill(int(value), 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, another user's
        return True
    try:  # ended but not yet reaped by the launcher (which waits for its workers in turn): a zombie
        with open(f"/proc/{int(value)}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[:1] != ["Z"]
    except OSError:
        return True


def ranks_per_node(env: Mapping[str, str] | None = None) -> int | None:
    """How many ranks of this launch run on this node (``LOCAL_WORLD_SIZE``); None when not launched as ranks."""
    return whole_number((os.environ if env is None else env).get("LOCAL_WORLD_SIZE", "")) or None


CORE_SHARERS_ENV = "PGRA_CORE_SHARERS"  # a cell's child process: how many processes share this node's cores with it


def core_sharers(env: Mapping[str, str] | None = None) -> int:
    """How many processes compute on this node's cores, this one included (launch ranks, a cell's parent, or 1)."""
    env = os.environ if env is None else env
    return ranks_per_node(env) or whole_number(env.get(CORE_SHARERS_ENV, "")) or 1


# ----- a GPU expected but not seen -----
NO_GPU_WARNED = "PGRA_NO_GPU_WARNED"  # set once warned: the grid's workers and cells inherit it and stay silent
_warned = False


def cuda_expected(env: Mapping[str, str] | None = None) -> str | None:
    """Why this process looks like it has a GPU (``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi``), or None."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        first = listed.split(",")[0].strip()
        return None if not first or first.startswith("-") or first == "NoDevFiles" else \
            f"CUDA_VISIBLE_DEVICES={listed}"
    return "nvidia-smi is on the PATH" if shutil.which("nvidia-smi") else None


def warn_if_cuda_missing() -> bool:
    """Warn once (here and in child processes) when a GPU is expected but torch sees none; whether it warned."""
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


# ----- a GPU's compute mode -----
EXCLUSIVE_PROCESS = "Exclusive_Process"  # nvidia-smi's name: one process (one CUDA context) at a time on the GPU


def gpu_compute_mode(device: str) -> str | None:
    """nvidia-smi's compute mode of GPU ``device`` (``Default``, ``Exclusive_Process`` ...), or None when unknown."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, "--query-gpu=index,uuid,compute_mode", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and device.strip() in fields[:2]:
            return fields[2]
    return None


def exclusive_gpu_problem(devices: list[str], processes: int, what: str) -> str | None:
    """Why ``processes`` processes cannot share ``devices`` (one in ``EXCLUSIVE_PROCESS`` mode), or None."""
    if processes <= 1:
        return None
    for device in devices:
        if gpu_compute_mode(device) == EXCLUSIVE_PROCESS:
            return (f"GPU {device} is in EXCLUSIVE_PROCESS compute mode (nvidia-smi), which lets one process at a "
                    f"time use it, and {what}")
    return None


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
    """The environment the launcher (the parent process) started with (``/proc/<ppid>/environ``), or None."""
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    pairs = (item.decode(errors="replace").partition("=") for item in data.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def launcher_threads(env: Mapping[str, str] | None = None,
                     launcher_env: Mapping[str, str] | None | bool = False) -> int | None:
    """This rank's intra-op threads (None: the environment's): a launcher's own ``OMP_NUM_THREADS=1`` is replaced."""
    env = os.environ if env is None else env
    launched = ranks_per_node(env) is not None or any(k in env for k in ACCELERATE_MARKS)
    if not launched or env.get(THREADS_ENV, "").strip() != "1":
        return None
    start = _launcher_start_env() if launcher_env is False else launcher_env
    if isinstance(start, Mapping) and THREADS_ENV in start:  # the user's 1, passed through the launcher
        return None
    return max(1, node_cores() // (ranks_per_node(env) or 1))


def shared_threads(sharers: int | None, env: Mapping[str, str] | None = None) -> int | None:
    """Intra-op threads for each of ``sharers`` processes on this node (``cores // sharers``), or None to keep them."""
    env = os.environ if env is None else env
    if not sharers or sharers <= 1 or env.get(THREADS_ENV, "").strip():
        return None
    return max(1, node_cores() // sharers)


def apply_launcher_threads() -> int | None:
    """Give this rank :func:`launcher_threads` threads; the count, or None when nothing changed."""
    return apply_threads(launcher_threads())


def apply_threads(threads: int | None) -> int | None:
    """Give this process ``threads`` threads (torch, faiss, ``OMP_NUM_THREADS``); None: nothing changed."""
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


# oneDNN's instruction sets below its first bf16 one (ONEDNN_MAX_CPU_ISA): held there, bf16 matmuls are emulated
ONEDNN_BELOW_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (avx512_bf16 or AMX; else torch emulates it, 3x slower than fp32)
    and neither torch (``ATEN_CPU_CAPABILITY``) nor oneDNN (``ONEDNN_MAX_CPU_ISA``) is held below it."""
    if not cpu_flags() & set(CPU_BF16_FLAGS):
        return False
    held = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    if held.strip().upper() in ONEDNN_BELOW_BF16:
        return False
    return str(torch.backends.cpu.get_cpu_capability()).upper().startswith(("AVX512", "AMX"))


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """``auto``/None: bf16 on GPUs that support it, else fp16 on GPU; fp32 on CPU. ``bf16-if-native``: the same,
    but bf16 on a CPU that computes it in hardware (:func:`cpu_has_native_bf16`)."""
    if dtype in (None, "auto", "bf16-if-native"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if dtype == "bf16-if-native" and device.type == "cpu" and cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype '{dtype}', use one of auto, bf16-if-native, {', '.join(DTYPES)}")
    return DTYPES[dtype]
