"""A cell's own process: the environment its child process sees (no launch, one GPU, its share of the cores), the
GPU memory it waits for, and how it ended.

Several cells may share one GPU (``cells_per_gpu``: torchrun with GPUs x that many ranks a node, or as many local
workers): the ranks or workers take GPUs round-robin (:func:`pgra.runtime.device.local_device_index`), and a cell
starts on a shared GPU only once the GPU has the memory it needs free (:func:`cell_gpu_need`,
:func:`wait_for_gpu_memory`).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from typing import Any

from ..core.errors import InputError
from ..runtime.device import (
    CORE_SHARERS_ENV,
    THREADS_ENV,
    exclusive_gpu_problem,
    launcher_threads,
    local_device_index,
    ranks_per_node,
    shared_threads,
)
from .claims import WORKER_ENV

# what torchrun / accelerate launch tell a process about its process group (a cell's child process gets none)
DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
            "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
            "TORCHELASTIC_ERROR_FILE",
            # MPICH / Intel MPI (hydra) and DeepSpeed's launcher: accelerate and DeepSpeed read them as a rank's
            "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE")
# what the other launchers tell a process: accelerate launch's plugin settings (``ACCELERATE_USE_DEEPSPEED`` makes
# every cell's reader a one-process DeepSpeed engine, which fails in MPI discovery; ``FSDP_*``, Megatron's), and
# the MPI / PMI rank variables of srun (pmi2, pmix) and mpirun (accelerate takes ``PMI_SIZE=2`` for a 2-process
# CPU job and asks for ``MASTER_ADDR``). Slurm's own ``SLURM_*`` stay: neither torch nor accelerate nor DeepSpeed
# reads ``SLURM_PROCID``-style ranks, and the claims record ``SLURM_JOB_ID``.
LAUNCHER_ENV_PREFIXES = ("ACCELERATE_", "FSDP_", "MEGATRON_LM_", "PARALLELISM_CONFIG_", "PMI_", "PMIX_",
                         "OMPI_COMM_WORLD_", "MV2_COMM_WORLD_")
KEPT_ENV = ("ACCELERATE_LOG_LEVEL",)  # a logging setting (pgra's quiet mode sets it), not a launch description


def launcher_variable(name: str) -> bool:
    """Whether the environment variable ``name`` describes the launch this process is a rank of (a cell's or a
    worker's child process, a single process of its own, must not see it)."""
    return name not in KEPT_ENV and (name in DIST_ENV or name.startswith(LAUNCHER_ENV_PREFIXES))


def single_process_env(device: int | None = None, worker: str = "", sharers: int | None = None) -> dict[str, str]:
    """This process's environment without the launch's variables (:func:`launcher_variable`); ``device``: the one
    visible GPU (an index into the GPUs visible now, modulo their count). Under a launcher that left its default of
    one thread a rank (:func:`pgra.runtime.device.launcher_threads`), ``OMP_NUM_THREADS`` is this node's cores over its
    ranks, as the rank itself was given; where it is unset, the cores over ``sharers``
    (:func:`pgra.runtime.device.shared_threads`: each of ``--launcher local``'s workers its share, not all the cores).
    ``sharers`` (default: this launch's ranks on the node) is kept for the child as
    :data:`pgra.runtime.device.CORE_SHARERS_ENV`, so that its cost records say what share of the cores it had."""
    sharers = sharers or ranks_per_node()
    threads = launcher_threads() or shared_threads(sharers)
    env = {k: v for k, v in os.environ.items() if not launcher_variable(k)}
    if threads is not None:
        env[THREADS_ENV] = str(threads)
    if sharers:
        env[CORE_SHARERS_ENV] = str(sharers)
    if device is not None:
        devices = visible_devices()
        env["CUDA_VISIBLE_DEVICES"] = devices[device % len(devices)]
    if worker:
        env[WORKER_ENV] = worker
    return env


def visible_devices() -> list[str]:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES``'s entries, else 0..count-1); empty without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def release_gpu_memory() -> bool:
    """Before a rank starts a cell's child process on its GPU: free what the stages left (their models, once
    unreferenced, and the blocks torch's caching allocator keeps), so that the child trains with the GPU's memory.
    Only when this process initialised CUDA (``empty_cache`` would otherwise create a CUDA context on the GPU,
    taking memory instead of freeing it). Whether it released."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    gc.collect()
    torch.cuda.empty_cache()
    return True


GIB = 2**30


def cells_sharing_a_gpu(cells_per_gpu: int, processes: int | None, gpus: int) -> int:
    """How many cells may run on one GPU at a time: ``cells_per_gpu``, or more where this node's ``processes``
    (the ranks of a launch, the workers of ``--launcher local``; None when unknown) outnumber the ``gpus`` times
    that: they take the GPUs round-robin, so up to ``ceil(processes / gpus)`` share one."""
    crowd = -(-processes // gpus) if processes and gpus > 0 else 1
    return max(cells_per_gpu, crowd)


def cell_gpu_need(total: int, sharing: int, cell_gpu_gb: float) -> int | None:
    """The bytes of GPU memory a cell needs free before it starts on a GPU of ``total`` bytes that ``sharing``
    cells may share: ``cell_gpu_gb`` GiB when given, else its share of the GPU (``total / sharing``) when the GPU
    is shared; None (no check) on a GPU of its own without ``cell_gpu_gb``. A share, not a measurement: a T5-base
    cell takes less than a sixth of an 80 GB GPU (its measured peak: docs/beyond-one-machine.md), so two or four cells pass at once; a cell that takes more than its
    share makes the next one wait until it ends."""
    if cell_gpu_gb > 0:
        return int(cell_gpu_gb * GIB)
    return total // sharing if sharing > 1 else None


def wait_for_gpu_memory(index: int, need: int, poll_s: float, wait_s: float, label: str) -> str | None:
    """Wait until GPU ``index`` (``torch.cuda.mem_get_info``) has ``need`` bytes free, polling every ``poll_s``
    seconds: None once it has (at once, or after waiting, said in one line each way), else why the cell is not
    started: at once when ``need`` is above the GPU's whole memory, or when it is still short after ``wait_s``."""
    import torch

    free, total = torch.cuda.mem_get_info(index)
    if need > total:
        return (f"the cell needs {need / GIB:.1f} GiB of GPU memory (cell_gpu_gb) and GPU {index} has "
                f"{total / GIB:.1f} GiB in all: lower cell_gpu_gb, or run the cell on a larger GPU")
    if free >= need:
        return None
    print(f"[{label}] waiting for {need / GIB:.1f} GiB free on GPU {index} ({free / GIB:.1f} of {total / GIB:.1f} "
          "GiB free now; the cells sharing it hold the rest)", flush=True)
    start = time.monotonic()
    while time.monotonic() - start < wait_s:
        time.sleep(poll_s)
        free, total = torch.cuda.mem_get_info(index)
        if free >= need:
            print(f"[{label}] GPU {index} has {free / GIB:.1f} GiB free after {time.monotonic() - start:.0f} s: "
                  "starting", flush=True)
            return None
    return (f"GPU {index} still had only {free / GIB:.1f} of the {need / GIB:.1f} GiB the cell needs free after "
            f"waiting {wait_s:.0f} s (wait_s): the cell was not started (a later run retries it)")


def torch_threads() -> int | None:
    """torch's intra-op thread count now (None when torch is not imported)."""
    torch = sys.modules.get("torch")
    return None if torch is None else torch.get_num_threads()


def restore_torch_threads(threads: int | None) -> None:
    """Give torch ``threads`` intra-op threads again: a cell's floats depend on how many threads its reductions
    split over, and a cell run inline must compute what the same cell computes in a fresh process."""
    torch = sys.modules.get("torch")
    if threads is not None and torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def ended(code: int) -> str:
    """How a child process ended, from its exit code (negative: the signal that killed it)."""
    if code >= 0:
        return f"ended with exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    oom = " (the kernel's OOM killer sends it when the node runs out of memory)" if name == "SIGKILL" else ""
    return f"was killed by {name}{oom}"



def check_gpu_sharing(grid: Any) -> None:
    """Refuse (an InputError naming ``parallel``, before anything runs) a multi-rank job whose GPU is in
    ``EXCLUSIVE_PROCESS`` compute mode (:func:`pgra.runtime.device.exclusive_gpu_problem`) where more than one process
    needs it: under ``parallel: cells`` the rank holds a CUDA context on its GPU (its process group, its stages),
    so the child process of each of its cells could not create one; ranks beyond the GPUs share them too."""
    if grid.ctx.world_size == 1:
        return
    devices = visible_devices()
    if not devices:
        return
    ranks = cells_sharing_a_gpu(1, ranks_per_node(), len(devices))
    processes = ranks * (2 if grid.cells_mode else 1)
    what = ("under parallel: cells a rank holds a CUDA context there while its cells' child processes need one of "
            "their own") if grid.cells_mode else f"{ranks} ranks of this launch share it"
    problem = exclusive_gpu_problem([devices[local_device_index(len(devices))]], processes, what)
    if problem is not None:
        raise InputError(f"{problem}: run with parallel: ddp and one rank per GPU, or one process per GPU without "
                         "torchrun (--launcher local or slurm, a Slurm array), or ask for the GPUs in the Default "
                         "compute mode (nvidia-smi -c DEFAULT, or your cluster's option for it)", field="parallel")

