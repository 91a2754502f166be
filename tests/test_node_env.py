"""The node path as real hardware runs it (issue 49), decided on a CPU: what a cell's child process inherits from
the launchers, which GPU and process-group backend a rank picks, when a rank frees the GPU for its cells, the
warning when a GPU was expected but torch sees none, the CPU threads a rank gets under a launcher, and when a job
with nothing left to claim leaves the cells other live jobs hold; several cells on one GPU (``cells_per_gpu``): which GPU
each rank or local worker takes, and the memory a cell waits for before it starts on a shared GPU."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pgra.experiment import cell_process, workers
from pgra.experiment.cell_process import release_gpu_memory, single_process_env
from pgra.experiment.claims import claim_path
from pgra.experiment.layout import CellPlan
from pgra.experiment.workers import WATCH, GridRun, leave_held_cells
from pgra.runtime import device as pgra_device
from pgra.runtime import distributed
from pgra.runtime.device import (
    NO_GPU_WARNED,
    cuda_expected,
    launcher_threads,
    local_device_index,
    resolve_device,
    warn_if_cuda_missing,
)

ROOT = Path(__file__).resolve().parents[1]

# what the launchers put in a rank's environment, by launcher
LAUNCHERS = {
    "accelerate launch (deepspeed_zero2.yaml)": {
        "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2",
        "ACCELERATE_DEEPSPEED_CONFIG_FILE": "none", "ACCELERATE_MIXED_PRECISION": "bf16",
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "1", "ACCELERATE_DYNAMO_BACKEND": "NO"},
    "accelerate launch (fsdp)": {"ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "FULL_SHARD",
                                 "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"},
    "accelerate launch (megatron)": {"ACCELERATE_USE_MEGATRON_LM": "true", "MEGATRON_LM_TP_DEGREE": "2"},
    "srun --mpi=pmi2": {"PMI_SIZE": "2", "PMI_RANK": "1", "PMI_FD": "7"},
    "srun --mpi=pmix": {"PMIX_RANK": "1", "PMIX_NAMESPACE": "slurm.pmix.42.0"},
    "mpirun (Open MPI)": {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
                          "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
    "mpirun (MVAPICH2)": {"MV2_COMM_WORLD_SIZE": "2", "MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_LOCAL_RANK": "1"},
    "mpirun (MPICH / Intel MPI)": {"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
    "deepspeed launcher": {"CROSS_RANK": "0", "CROSS_SIZE": "1", "LOCAL_SIZE": "2"},
    "torchrun": {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"},
}
# what a cell's child keeps: the job's own settings and Slurm's description of the job
KEPT = {"ACCELERATE_LOG_LEVEL": "error", "SLURM_JOB_ID": "42", "SLURM_PROCID": "1", "SLURM_CPUS_PER_TASK": "8",
        "OMPI_MCA_btl": "^openib", "HF_HOME": "/tmp/hf", "OMP_NUM_THREADS": "3"}


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# ----- item 2: a cell's child process sees no launcher -----
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_cell_child_inherits_none_of_the_launchers_variables(launcher, monkeypatch, no_cuda):
    for k, v in {**LAUNCHERS[launcher], **KEPT}.items():
        monkeypatch.setenv(k, v)
    env = single_process_env(worker="rank 1")
    assert not set(LAUNCHERS[launcher]) & set(env), launcher
    assert {k: env[k] for k in KEPT} == KEPT
    assert env["PGRA_WORKER"] == "rank 1"


def test_the_reader_s_accelerate_state_in_a_cell_child_is_a_single_process(monkeypatch, no_cuda):
    """Under srun's pmi2 (``PMI_SIZE=2``) accelerate takes a CPU process for a rank of a 2-process job and raises
    "MASTER_ADDR env was not set"; in the environment a cell's child gets, it is one process."""
    for k, v in {**LAUNCHERS["srun --mpi=pmi2"], **LAUNCHERS["mpirun (Open MPI)"]}.items():
        monkeypatch.setenv(k, v)
    code = "from accelerate import PartialState; s = PartialState(cpu=True); print(s.num_processes)"
    proc = subprocess.run([sys.executable, "-c", code], env=single_process_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1"]


# ----- item 3: one device choice for ranks, stages and cells; the backend when ranks share GPUs -----
@pytest.mark.parametrize(("env", "count", "index"), [
    ({"LOCAL_RANK": "3"}, 1, 0),                  # srun --gpus-per-task=1: each rank sees its one GPU as device 0
    ({"LOCAL_RANK": "5"}, 4, 1),                  # more ranks than GPUs: round-robin
    ({"LOCAL_RANK": "2"}, 8, 2),
    ({"RANK": "9"}, 8, 1),                        # no LOCAL_RANK (mpirun-style ranks): the global rank's share
    ({}, 2, 0),
])
def test_the_device_of_a_rank_is_its_local_rank_modulo_the_gpus_it_sees(env, count, index, monkeypatch):
    for k in ("LOCAL_RANK", "RANK"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    assert local_device_index() == index
    assert resolve_device("auto") == torch.device("cuda", index)


class _Group:
    """torch.distributed as init_distributed uses it, recording the backend and the device set."""

    def __init__(self, monkeypatch, gpus: int) -> None:
        self.backend, self.devices = None, []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setattr(torch.cuda, "set_device", self.devices.append)
        monkeypatch.setattr(distributed.dist, "is_initialized", lambda: self.backend is not None)
        monkeypatch.setattr(distributed.dist, "init_process_group", self.init)
        monkeypatch.setattr(distributed.dist, "get_rank", lambda: int(os.environ["RANK"]))
        monkeypatch.setattr(distributed.dist, "get_world_size", lambda: int(os.environ["WORLD_SIZE"]))
        monkeypatch.setattr(distributed.dist, "new_group", lambda backend, timeout: ("exchanges", backend))
        monkeypatch.setattr(distributed, "_exchanges", None)

    def init(self, backend, timeout) -> None:
        self.backend = backend


@pytest.mark.parametrize(("gpus", "ranks", "local_rank", "backend", "device"), [
    (8, "8", 5, "nccl", 5),     # one GPU per rank
    (1, None, 5, "nccl", 0),    # srun --gpus-per-task=1 (ranks started one by one): device 0, not 5
    (1, "1", 0, "nccl", 0),     # srun --gpus-per-task=1 with one torchrun per task
    (2, "4", 3, "gloo", 1),     # 4 ranks on 2 GPUs: NCCL refuses two ranks on one GPU
    (0, "4", 3, "gloo", None),  # no CUDA
])
def test_init_distributed_picks_the_device_and_backend(gpus, ranks, local_rank, backend, device, monkeypatch,
                                                       capsys):
    group = _Group(monkeypatch, gpus)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", str(local_rank))
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's: this process's threads stay as they are
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU warning
    if ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", ranks)
    ctx = distributed.init_distributed()
    assert (ctx.rank, ctx.world_size) == (local_rank, 8)
    assert group.backend == backend
    assert group.devices == ([] if device is None else [device])


def test_ranks_sharing_gpus_say_so_once_per_node(monkeypatch, capsys):
    _Group(monkeypatch, 2)
    for k, v in {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0",
                 "OMP_NUM_THREADS": "2"}.items():
        monkeypatch.setenv(k, v)
    distributed.init_distributed()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4 ranks on this node share 2 GPU(s)" in err[0] and "gloo" in err[0]
    assert distributed.choose_backend()[0] == "gloo"


# ----- item 4: a rank frees the stages' GPU memory before its cells' children train -----
class _Cuda:
    def __init__(self, monkeypatch, initialised: bool) -> None:
        self.calls: list[str] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialised)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: self.calls.append("empty_cache"))
        monkeypatch.setattr(cell_process.gc, "collect", lambda: self.calls.append("gc") or 0)


def test_gpu_memory_is_released_only_where_this_process_used_cuda(monkeypatch):
    cuda = _Cuda(monkeypatch, initialised=False)
    assert not release_gpu_memory() and cuda.calls == []  # empty_cache would create a CUDA context
    cuda = _Cuda(monkeypatch, initialised=True)
    assert release_gpu_memory() and cuda.calls == ["gc", "empty_cache"]


def _grid(tmp_path: Path, world_size: int = 1, **cfg) -> GridRun:
    settings = {"tasks": ["t"], "parallel": "cells", "wait_s": 3600.0, "claim_poll_s": 1e6,
                "claim_stale_after_s": 600.0, "cells_per_gpu": 1, "cell_gpu_gb": 0.0, **cfg}
    exp = SimpleNamespace(cfg=SimpleNamespace(**settings), out=tmp_path / "out")
    return GridRun(exp, distributed.DistContext(rank=world_size - 1, world_size=world_size))


def test_a_rank_releases_gpu_memory_before_it_starts_a_cell_s_child(tmp_path, monkeypatch):
    cuda = _Cuda(monkeypatch, initialised=True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(workers, "experiment_payload", lambda exp: {})
    started = []

    def run(cmd, env):
        started.append((list(cuda.calls), env["CUDA_VISIBLE_DEVICES"]))
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(workers.subprocess, "run", run)
    cell = CellPlan("t", "fid", 1, tmp_path / "out" / "t" / "fid" / "seed-1", "k", "todo")
    assert _grid(tmp_path, world_size=2)._run_alone(cell) is True
    assert started == [(["gc", "empty_cache"], "1")]  # released first; the child sees GPU LOCAL_RANK % 2


KILLED_CELL = """
import os, signal, sys
from pgra.storage.lock import output_lock

with output_lock(sys.argv[1], "pgra.reader.train.train"):
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer takes the cell's process alone
"""


def test_a_cell_child_killed_alone_has_its_lock_released_by_its_rank(tmp_path, monkeypatch, capsys, no_cuda):
    """Issue 68 item 6: a cell's child killed by SIGKILL leaves its `.pgra-lock` fresh (another host would find
    the cell busy until the lock's heartbeat is stale_after old). The rank that saw it die releases it."""
    from pgra.storage.lock import LOCK_FILE

    monkeypatch.setattr(workers, "experiment_payload", lambda exp: {})
    cell = CellPlan("t", "fid", 1, tmp_path / "out" / "t" / "fid" / "seed-1", "k", "todo")
    real_run = subprocess.run

    def run(cmd, env):
        done = real_run([sys.executable, "-c", KILLED_CELL, str(cell.directory)], env=env)
        assert (cell.directory / LOCK_FILE).exists()  # the child's lock, left behind
        return done

    monkeypatch.setattr(workers.subprocess, "run", run)
    assert _grid(tmp_path, world_size=2)._run_alone(cell) is True
    assert not (cell.directory / LOCK_FILE).exists()
    err = capsys.readouterr().err
    assert f"released {cell.directory / LOCK_FILE}" in err
    assert "killed by SIGKILL" in (cell.directory / "error.log").read_text()


# ----- item 12: a GPU expected, none seen -----
@pytest.mark.parametrize(("env", "smi", "expected"), [
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, False, True),
    ({"CUDA_VISIBLE_DEVICES": "GPU-5f1c"}, False, True),
    ({}, True, True),                              # nvidia-smi on the PATH
    ({"CUDA_VISIBLE_DEVICES": ""}, True, False),   # GPUs hidden on purpose
    ({"CUDA_VISIBLE_DEVICES": "-1"}, True, False),
    ({}, False, False),
])
def test_when_a_gpu_is_expected(env, smi, expected, monkeypatch):
    monkeypatch.setattr(pgra_device.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if smi else None)
    assert (cuda_expected(env) is not None) is expected


def test_no_gpu_seen_where_one_was_expected_warns_once(monkeypatch, capsys, no_cuda):
    monkeypatch.setattr(pgra_device, "_warned", False)
    monkeypatch.delenv(NO_GPU_WARNED, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert resolve_device("auto") == torch.device("cpu")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: CUDA_VISIBLE_DEVICES=0 but torch") and "fp32" in err[0]
    assert resolve_device("auto") == torch.device("cpu") and not warn_if_cuda_missing()
    assert capsys.readouterr().err == ""
    assert os.environ[NO_GPU_WARNED] == "1"  # the grid's cells and workers inherit it: the job warns once
    monkeypatch.setattr(pgra_device, "_warned", False)
    assert not warn_if_cuda_missing()


def test_no_warning_without_a_reason_to_expect_a_gpu(monkeypatch, capsys, no_cuda):
    monkeypatch.setattr(pgra_device, "_warned", False)
    monkeypatch.delenv(NO_GPU_WARNED, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(pgra_device.shutil, "which", lambda name: None)
    assert not warn_if_cuda_missing() and capsys.readouterr().err == ""


# ----- item 14: CPU threads under a launcher -----
TORCHRUN_4 = {"LOCAL_WORLD_SIZE": "4", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize(("env", "start", "threads"), [
    (TORCHRUN_4, {}, 4),                                  # torchrun's default 1: 16 cores over 4 ranks
    ({"LOCAL_WORLD_SIZE": "32", "OMP_NUM_THREADS": "1"}, {}, 1),
    (TORCHRUN_4, {"OMP_NUM_THREADS": "1"}, None),         # the user gave torchrun OMP_NUM_THREADS=1: kept
    (TORCHRUN_4, None, 4),                                # the launcher's start environment unreadable
    ({"LOCAL_WORLD_SIZE": "4", "OMP_NUM_THREADS": "6"}, {}, None),  # the user's (torchrun only sets 1)
    ({"LOCAL_WORLD_SIZE": "4"}, {}, None),                # unset: the libraries' defaults
    ({"ACCELERATE_DYNAMO_BACKEND": "NO", "OMP_NUM_THREADS": "1"}, {}, 16),  # accelerate launch, one process
    ({"OMP_NUM_THREADS": "1"}, {}, None),                 # no launcher: the user's
])
def test_a_rank_s_threads_under_a_launcher(env, start, threads, monkeypatch):
    monkeypatch.setattr(pgra_device, "node_cores", lambda: 16)
    assert launcher_threads(env, start) == threads


def test_a_cell_child_gets_the_node_s_cores_over_its_ranks(monkeypatch, no_cuda):
    monkeypatch.setattr(pgra_device, "node_cores", lambda: 16)
    monkeypatch.setattr(pgra_device, "_launcher_start_env", lambda: {"PATH": "/usr/bin"})
    for k, v in {**LAUNCHERS["torchrun"], **TORCHRUN_4}.items():
        monkeypatch.setenv(k, v)
    env = single_process_env()
    assert env["OMP_NUM_THREADS"] == "4" and "LOCAL_WORLD_SIZE" not in env
    monkeypatch.setattr(pgra_device, "_launcher_start_env", lambda: {"OMP_NUM_THREADS": "1"})
    assert single_process_env()["OMP_NUM_THREADS"] == "1"


def test_a_cell_child_s_cost_record_counts_the_cores_it_shared(monkeypatch, no_cuda):
    """A cell's child sees no launch, so it cannot count the ranks beside it; the rank tells it
    (``PGRA_CORE_SHARERS``), and so does the local launcher its workers: 4 ranks of one thread on 2 cores record
    half a core each (``cores_each``), which the plan scales by."""
    from pgra.experiment import launch
    from pgra.runtime.cost import _cores_each

    monkeypatch.setattr(pgra_device, "node_cores", lambda: 2)
    for k, v in {**LAUNCHERS["torchrun"], **TORCHRUN_4}.items():
        monkeypatch.setenv(k, v)
    assert _cores_each() == 0.5  # a rank
    child = single_process_env()
    assert child[pgra_device.CORE_SHARERS_ENV] == "4"
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert _cores_each() == min(torch.get_num_threads(), 2.0)  # no launch seen, nothing told: all the cores
    monkeypatch.setenv(pgra_device.CORE_SHARERS_ENV, child[pgra_device.CORE_SHARERS_ENV])
    assert _cores_each() == 0.5  # the child, told
    monkeypatch.delenv(pgra_device.CORE_SHARERS_ENV)
    envs, _ = launch.local_workers(4, 1)
    assert {e[pgra_device.CORE_SHARERS_ENV] for e in envs} == {"4"}
    # a job of Slurm's local cluster (submitit): told by the launch, which shares this machine among its workers
    seen = []
    grid = type("Grid", (), {"run": lambda self: seen.append(os.environ.get(pgra_device.CORE_SHARERS_ENV)) or []})
    monkeypatch.setattr(launch, "experiment_from_payload", lambda payload: grid())
    monkeypatch.setattr("pgra.core.verbosity.configure_child_output", lambda: None)
    monkeypatch.setenv(launch.WORKER_ENV, "test")  # run_worker sets both: restored after the test
    monkeypatch.setenv(pgra_device.CORE_SHARERS_ENV, "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # (the user's: kept, so this process's threads stay)
    assert launch.run_worker({}, "slurm-0", 3) == 0 and seen == ["3"]
    assert pgra_device.core_sharers({"LOCAL_WORLD_SIZE": "3", pgra_device.CORE_SHARERS_ENV: "8"}) == 3
    assert pgra_device.core_sharers({pgra_device.CORE_SHARERS_ENV: "0"}) == 1


def test_local_workers_each_get_their_share_of_the_cores(monkeypatch, no_cuda):
    """Issue 68 item 7: `--launcher local --workers W` gave every worker all the node's cores (torch, faiss and
    BLAS each starting a thread per core): each gets cores // W threads, unless OMP_NUM_THREADS was set; so does a
    job of Slurm's local cluster, which shares this machine with the other workers."""
    from pgra.experiment import launch

    monkeypatch.setattr(pgra_device, "node_cores", lambda: 16)
    for k in ("OMP_NUM_THREADS", "LOCAL_WORLD_SIZE", *pgra_device.ACCELERATE_MARKS):
        monkeypatch.delenv(k, raising=False)
    assert {e["OMP_NUM_THREADS"] for e in launch.local_workers(4, 1)[0]} == {"4"}
    assert {e["OMP_NUM_THREADS"] for e in launch.local_workers(32, 1)[0]} == {"1"}
    assert "OMP_NUM_THREADS" not in launch.local_workers(1, 1)[0][0]  # one worker: the node's
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert {e["OMP_NUM_THREADS"] for e in launch.local_workers(4, 1)[0]} == {"2"}  # the user's, kept
    monkeypatch.delenv("OMP_NUM_THREADS")
    applied: list[int] = []
    monkeypatch.setattr(pgra_device.torch, "set_num_threads", applied.append)
    monkeypatch.delitem(sys.modules, "faiss", raising=False)
    monkeypatch.setattr(launch, "experiment_from_payload", lambda payload: SimpleNamespace(run=lambda: []))
    monkeypatch.setattr("pgra.core.verbosity.configure_child_output", lambda: None)
    monkeypatch.setenv(launch.WORKER_ENV, "test")
    monkeypatch.setenv(pgra_device.CORE_SHARERS_ENV, "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # (restored after the test)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert launch.run_worker({}, "slurm-0", 4) == 0
    assert applied == [4] and os.environ["OMP_NUM_THREADS"] == "4"


def test_a_rank_applies_its_threads_once(monkeypatch):
    monkeypatch.setattr(pgra_device, "node_cores", lambda: 16)
    monkeypatch.setattr(pgra_device, "_launcher_start_env", lambda: {})
    set_to: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", set_to.append)
    for k, v in TORCHRUN_4.items():
        monkeypatch.setenv(k, v)
    assert pgra_device.apply_launcher_threads() == 4
    assert os.environ["OMP_NUM_THREADS"] == "4" and set_to == [4]
    assert pgra_device.apply_launcher_threads() is None and set_to == [4]


def test_the_launcher_s_start_environment_is_the_parent_s(monkeypatch):
    """What decides a user's ``OMP_NUM_THREADS=1`` from a launcher's: the parent's environment as it started (a
    variable this process set afterwards is not in it, though its child inherits it)."""
    monkeypatch.setenv("PGRA_TEST_SET_LATER", "1")
    code = ("import os; from pgra.runtime.device import _launcher_start_env as s; e = s(); "
            "print(os.environ['PGRA_TEST_SET_LATER'], 'PGRA_TEST_SET_LATER' in e, 'PATH' in e)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1", "False", "True"]


# ----- item 17: a job with nothing left to claim leaves cells live jobs hold -----
def _held_by_another_job(target: Path) -> None:
    """``target``'s claim held by a live job on another host (a fresh heartbeat)."""
    path = claim_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": 1, "host": f"not-{socket.gethostname()}", "command": "pgra experiment",
                                "started": time.time(), "job": "42_3"}))


class _Slept(Exception):
    pass


def _only_held_cells(monkeypatch, grid: GridRun, clock=time.monotonic) -> list[str]:
    """``grid`` whose index and stages are done and whose every cell another live job holds; its clock ``clock``;
    sleeping raises."""
    finished: list[str] = []
    monkeypatch.setattr(grid, "index", lambda: None)
    monkeypatch.setattr(grid, "stages", lambda task: "ready")
    monkeypatch.setattr(grid, "cells", lambda tasks: (0, 3))
    monkeypatch.setattr(grid, "finish", lambda: finished.append("finish"))

    def sleep(seconds):
        raise _Slept(seconds)

    monkeypatch.setattr(workers, "time", SimpleNamespace(time=time.time, monotonic=clock, sleep=sleep))
    return finished


def test_a_job_with_only_held_cells_left_ends_when_another_job_watches(tmp_path, monkeypatch, capsys):
    grid = _grid(tmp_path)
    _held_by_another_job(grid.exp.out / WATCH)
    finished = _only_held_cells(monkeypatch, grid)
    assert grid.run() == [] and finished == ["finish"]  # no wait (sleeping raises), the report check still ran
    assert "3 cell(s) left, each held by another live job" in capsys.readouterr().out


def test_the_first_job_with_only_held_cells_left_watches_them(tmp_path, monkeypatch):
    grid = _grid(tmp_path)
    _only_held_cells(monkeypatch, grid)
    with pytest.raises(_Slept):  # it waits to take over the cells of jobs that die
        grid.run()
    assert not claim_path(grid.exp.out / WATCH).exists()  # its watch released when it ends
    watch, leave = leave_held_cells(grid.exp.out, 600.0)
    assert watch is not None and not leave
    watch.close()


def test_the_ranks_of_a_torchrun_job_wait_together(tmp_path, monkeypatch):
    grid = _grid(tmp_path, world_size=2)
    _held_by_another_job(grid.exp.out / WATCH)
    _only_held_cells(monkeypatch, grid)
    with pytest.raises(_Slept):  # a rank that left would only wait for the others at the job's end
        grid.run()


def test_a_watcher_that_waited_wait_s_leaves_too(tmp_path, monkeypatch, capsys):
    grid = _grid(tmp_path, wait_s=5.0)
    _only_held_cells(monkeypatch, grid, clock=iter([0.0, 10.0]).__next__)  # started, then 10 s later
    assert grid.run() == []
    assert "3 cell(s) still held by other jobs after 5 s" in capsys.readouterr().out


# ----- several grids as one job (an analysis's variants): run_pooled -----
def test_a_grid_whose_stage_another_job_builds_holds_back_the_later_grids_stages(tmp_path, monkeypatch):
    """The sweep's points rerank from the largest k down so that the others find its embeddings cached: while
    another job builds the first point's stage, the later points' stages wait (the earlier grids' cells still run)."""
    grids = [_grid(tmp_path / name) for name in ("k50", "k16", "k4")]
    calls: list[str] = []
    states = iter(["held", "ready", "ready", "ready"])  # k50's stage held once, then built

    for name, g in zip(("k50", "k16", "k4"), grids, strict=True):
        monkeypatch.setattr(g, "index", lambda: None)
        monkeypatch.setattr(g, "stages", lambda task, n=name: calls.append(f"stages {n}") or
                            (next(states) if n == "k50" else "ready"))
        monkeypatch.setattr(g, "cells", lambda tasks, n=name: calls.append(f"cells {n} {tasks}") or (0, 0))
        monkeypatch.setattr(g, "finish", lambda: None)
    monkeypatch.setattr(workers, "time", SimpleNamespace(time=time.time, monotonic=time.monotonic,
                                                         sleep=lambda s: calls.append("sleep")))
    assert workers.run_pooled(grids) == []
    assert calls == ["stages k50", "cells k50 []", "cells k16 []", "cells k4 []", "sleep",
                     "stages k50", "stages k16", "stages k4", "cells k50 ['t']", "cells k16 ['t']", "cells k4 ['t']"]


def test_every_rank_of_a_cells_job_knows_the_jobs_failed_cells(tmp_path, monkeypatch, capsys):
    """Under parallel: cells each rank runs its own cells: the failures are gathered, so an analysis's variants
    stop on every rank (each rank still says only its own)."""
    grid = _grid(tmp_path, world_size=2)  # rank 1
    mine = CellPlan("t", "pgra", 1, tmp_path / "out" / "t" / "pgra" / "seed-1", "k", "todo")
    theirs = replace(mine, method="fid", directory=tmp_path / "out" / "t" / "fid" / "seed-1")
    grid.failed = [mine]
    grid.exp.report_writer = None
    grid.ctx = SimpleNamespace(rank=1, world_size=2, is_main=False, barrier=lambda: None)
    monkeypatch.setattr(workers, "gather_objects", lambda ctx, obj: [[theirs], obj])
    grid.finish()
    assert grid.failed == [mine, theirs]
    err = capsys.readouterr().err
    assert "1 cell(s) failed" in err and "pgra" in err and "fid" not in err


def test_the_ranks_of_a_ddp_job_run_the_cells_rank_0_lists(tmp_path, monkeypatch):
    """parallel: ddp runs each cell on all ranks together: which cells are left is decided on rank 0 (another job
    may finish one between two ranks' looks), as is when to stop waiting."""
    grid = _grid(tmp_path, world_size=2, parallel="ddp")  # rank 1
    done = CellPlan("t", "fid", 1, tmp_path / "out" / "t" / "fid" / "seed-1", "k", "done")
    left = replace(done, method="pgra", directory=tmp_path / "out" / "t" / "pgra" / "seed-1", status="todo")
    grid.exp.plan = lambda tasks: [replace(done, status="todo"), left]  # what rank 1 would see on its own
    monkeypatch.setattr(workers, "cost_order", lambda cells, *a: cells)
    ran: list[str] = []
    monkeypatch.setattr(grid, "_run_together", lambda cell: ran.append(cell.method) or True)
    monkeypatch.setattr(grid, "_reused", lambda cell: ran.append(f"reused {cell.method}"))
    monkeypatch.setattr(workers, "main_computes", lambda ctx, compute: [(done, True), (left, False)])
    assert grid.cells(["t"]) == (1, 0)
    assert ran == ["reused fid", "pgra"]


# ----- item 16: several cells on one GPU -----
@pytest.mark.parametrize(("cells_per_gpu", "processes", "gpus", "sharing"), [
    (1, None, 8, 1),   # one rank a GPU (srun-started ranks: their count unknown)
    (1, 8, 8, 1),
    (2, 16, 8, 2),     # torchrun --nproc-per-node 16 on 8 GPUs, cells_per_gpu 2
    (2, 8, 8, 2),      # fewer ranks than allowed: each has a GPU, the share stays half
    (1, 3, 2, 2),      # more ranks than GPUs without cells_per_gpu: they share all the same
    (2, 8, 1, 8),
    (1, 4, 0, 1),      # no GPU
])
def test_how_many_cells_share_a_gpu(cells_per_gpu, processes, gpus, sharing):
    assert cell_process.cells_sharing_a_gpu(cells_per_gpu, processes, gpus) == sharing


GIB = 2**30


@pytest.mark.parametrize(("sharing", "cell_gpu_gb", "need"), [
    (1, 0.0, None),       # a GPU of its own: no check
    (2, 0.0, 40 * GIB),   # its share of the GPU
    (4, 0.0, 20 * GIB),
    (1, 12.5, int(12.5 * GIB)),  # cell_gpu_gb: checked shared or not
    (4, 30.0, 30 * GIB),
])
def test_the_memory_a_cell_needs_free(sharing, cell_gpu_gb, need):
    assert cell_process.cell_gpu_need(80 * GIB, sharing, cell_gpu_gb) == need


@pytest.mark.parametrize(("gpus", "cells_per_gpu"), [(1, 2), (2, 2), (8, 2), (4, 3)])
def test_ranks_of_gpus_times_cells_per_gpu_put_that_many_on_each_gpu(gpus, cells_per_gpu, monkeypatch):
    """torchrun --nproc-per-node GPUs x cells_per_gpu: rank i takes GPU i modulo the GPUs, so each GPU gets
    cells_per_gpu ranks (and with fewer ranks, each its own GPU first)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    taken = []
    for rank in range(gpus * cells_per_gpu):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        taken.append(local_device_index())
    assert taken == [r % gpus for r in range(gpus * cells_per_gpu)]
    assert all(taken.count(g) == cells_per_gpu for g in range(gpus))


class _Memory:
    """torch.cuda.mem_get_info giving ``free`` values in turn (GiB) on an ``total`` GiB GPU, and a clock that
    ``sleep`` moves on; records the devices asked and the sleeps."""

    def __init__(self, monkeypatch, free: list[float], total: float = 80.0) -> None:
        self.free, self.total, self.asked, self.slept, self.now = list(free), total, [], [], 0.0
        monkeypatch.setattr(torch.cuda, "mem_get_info", self.info)
        monkeypatch.setattr(cell_process, "time", SimpleNamespace(time=time.time, monotonic=lambda: self.now,
                                                                  sleep=self.sleep))

    def info(self, index):
        self.asked.append(index)
        free = self.free.pop(0) if len(self.free) > 1 else self.free[0]
        return int(free * GIB), int(self.total * GIB)

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_a_cell_starts_at_once_when_its_gpu_has_the_memory(monkeypatch, capsys):
    memory = _Memory(monkeypatch, [41.0])
    assert cell_process.wait_for_gpu_memory(1, 40 * GIB, 5.0, 60.0, "t/fid/seed-1") is None
    assert memory.asked == [1] and memory.slept == [] and capsys.readouterr().out == ""


def test_a_cell_waits_until_its_gpu_has_the_memory(monkeypatch, capsys):
    memory = _Memory(monkeypatch, [10.0, 20.0, 45.0])
    assert cell_process.wait_for_gpu_memory(0, 40 * GIB, 5.0, 60.0, "t/fid/seed-1") is None
    assert memory.slept == [5.0, 5.0]
    out = capsys.readouterr().out.splitlines()
    assert out == ["[t/fid/seed-1] waiting for 40.0 GiB free on GPU 0 (10.0 of 80.0 GiB free now; the cells "
                   "sharing it hold the rest)", "[t/fid/seed-1] GPU 0 has 45.0 GiB free after 10 s: starting"]


def test_a_cell_whose_gpu_stays_short_is_not_started(monkeypatch):
    memory = _Memory(monkeypatch, [10.0])
    why = cell_process.wait_for_gpu_memory(0, 40 * GIB, 5.0, 20.0, "t/fid/seed-1")
    assert memory.slept == [5.0] * 4
    assert why.startswith("GPU 0 still had only 10.0 of the 40.0 GiB the cell needs free after waiting 20 s")


def test_a_cell_needing_more_than_its_gpu_has_is_refused_at_once(monkeypatch):
    memory = _Memory(monkeypatch, [80.0])
    why = cell_process.wait_for_gpu_memory(0, 100 * GIB, 5.0, 3600.0, "t/fid/seed-1")
    assert memory.slept == [] and "needs 100.0 GiB" in why and "80.0 GiB in all" in why


def _shared_gpu(monkeypatch, tmp_path, gpus: int):
    """A rank or worker on a machine of ``gpus`` GPUs whose cell children are recorded (never started)."""
    _Cuda(monkeypatch, initialised=True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(workers, "experiment_payload", lambda exp: {})
    started = []
    monkeypatch.setattr(workers.subprocess, "run",
                        lambda cmd, env: started.append(env["CUDA_VISIBLE_DEVICES"]) or SimpleNamespace(returncode=0))
    cell = CellPlan("t", "fid", 1, tmp_path / "out" / "t" / "fid" / "seed-1", "k", "todo")
    return cell, started


def test_a_rank_on_a_shared_gpu_starts_its_cell_once_its_share_is_free(tmp_path, monkeypatch, capsys):
    """4 ranks on 2 GPUs (LOCAL_WORLD_SIZE 4): rank 3's GPU 1 is shared by 2, so its cell waits for 40 of the 80
    GiB; then its child starts on GPU 1."""
    cell, started = _shared_gpu(monkeypatch, tmp_path, gpus=2)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    memory = _Memory(monkeypatch, [80.0, 30.0, 50.0])  # the total asked first, then free while waiting
    grid = _grid(tmp_path, world_size=4, claim_poll_s=2.0)
    assert grid._run_alone(cell) is True and grid.failed == []
    assert started == ["1"] and set(memory.asked) == {1} and memory.slept == [2.0]
    assert "waiting for 40.0 GiB free on GPU 1" in capsys.readouterr().out


def test_a_rank_whose_shared_gpu_stays_full_fails_the_cell_without_starting_it(tmp_path, monkeypatch, capsys):
    cell, started = _shared_gpu(monkeypatch, tmp_path, gpus=1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    _Memory(monkeypatch, [5.0])
    grid = _grid(tmp_path, world_size=2, claim_poll_s=1.0, wait_s=3.0, cells_per_gpu=2)
    assert grid._run_alone(cell) is True
    assert started == [] and grid.failed == [cell]
    assert "still had only 5.0 of the 40.0 GiB" in (cell.directory / "error.log").read_text()
    assert "[t/fid/seed-1] not started: GPU 0 still had only" in capsys.readouterr().err
    assert not claim_path(cell.directory).exists()  # released for a later run


def test_a_rank_with_a_gpu_of_its_own_asks_nothing(tmp_path, monkeypatch):
    """One cell a GPU and no cell_gpu_gb: no memory query (a CUDA call that would make a context for nothing)."""
    cell, started = _shared_gpu(monkeypatch, tmp_path, gpus=2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    memory = _Memory(monkeypatch, [1.0])
    assert _grid(tmp_path, world_size=2)._run_alone(cell) is True
    assert started == ["1"] and memory.asked == []


def test_a_local_worker_checks_its_gpu_before_a_cell_it_runs_itself(tmp_path, monkeypatch):
    """A single-process job (a local worker, which sees its one GPU) runs its cells in its own process: with
    cells_per_gpu 2 (or more workers than GPUs, which its launcher puts there) it waits for half its GPU."""
    _Cuda(monkeypatch, initialised=True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    memory = _Memory(monkeypatch, [80.0, 20.0, 39.0, 41.0])
    ran = []
    grid = _grid(tmp_path, world_size=1, cells_per_gpu=2, claim_poll_s=1.0)
    grid.exp.run_cell = lambda cell, ctx: ran.append(cell.label)
    cell = CellPlan("t", "fid", 1, tmp_path / "out" / "t" / "fid" / "seed-1", "k", "todo")
    assert grid._run_together(cell) is True
    assert ran == ["t/fid/seed-1"] and memory.slept == [1.0, 1.0] and set(memory.asked) == {0}
    memory = _Memory(monkeypatch, [1.0])
    grid = _grid(tmp_path, world_size=1, cells_per_gpu=1, claim_poll_s=1.0)
    grid.exp.run_cell = lambda cell, ctx: ran.append(cell.label)
    assert grid._run_together(replace(cell, seed=2, directory=cell.directory.parent / "seed-2")) is True
    assert memory.asked == [] and len(ran) == 2  # a GPU of its own: no query


@pytest.mark.parametrize(("visible", "n", "cells_per_gpu", "devices", "sharing"), [
    ("3,5", 4, 1, ["3", "5", "3", "5"], 2),   # 4 workers on 2 GPUs: 2 on each, their share half a GPU
    ("3,5", 4, 2, ["3", "5", "3", "5"], 2),
    ("0", 3, 2, ["0", "0", "0"], 3),
    ("0,1,2,3", 2, 2, ["0", "1"], 2),         # fewer workers than GPUs: each its own first
    (None, 3, 1, ["0", "1", "0"], 2),         # CUDA_VISIBLE_DEVICES unset: the GPUs torch counts
])
def test_the_local_launcher_gives_each_worker_its_gpu(visible, n, cells_per_gpu, devices, sharing, monkeypatch,
                                                      capsys):
    from pgra.experiment import launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    envs, got = launch.local_workers(n, cells_per_gpu)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == devices and got == sharing
    assert [e["PGRA_WORKER"] for e in envs] == [f"local-{i}" for i in range(n)]
    assert ("cells share a GPU" in capsys.readouterr().out) is (sharing > cells_per_gpu)


def test_the_local_launcher_without_cuda_leaves_the_devices_alone(monkeypatch, no_cuda):
    from pgra.experiment import launch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    envs, sharing = launch.local_workers(3, 2)
    assert sharing == 2 and all("CUDA_VISIBLE_DEVICES" not in e for e in envs)


def test_the_local_launcher_s_workers_run_with_the_sharing_it_counted(tmp_path, monkeypatch):
    """A worker sees one GPU and cannot count the workers beside it: the launcher raises its cells_per_gpu."""
    from pgra.core.config import from_dict
    from pgra.experiment import ExperimentConfig, launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    seen = {}

    class Exp:
        def __init__(self, cfg, candidates_from=None, report_writer=None):
            self.cfg, self.candidates_from, self.report_writer = cfg, candidates_from, report_writer

        def plan(self):
            return []

    monkeypatch.setattr(launch, "_local", lambda payload, envs, gpus=0: seen.update(payload=payload, envs=envs) or [0, 0])
    cfg = from_dict(ExperimentConfig, {"out": str(tmp_path / "exp"), "launcher": "local", "workers": 2})
    assert launch.launch(Exp(cfg)) == []
    values = seen["payload"]["config"]["values"]
    assert values["cells_per_gpu"] == 2 and values["launcher"] == "none"
    assert [e["CUDA_VISIBLE_DEVICES"] for e in seen["envs"]] == ["0", "0"]


def test_the_report_writer_is_handed_over_never_named_in_a_worker_s_payload(tmp_path, monkeypatch):
    """A worker's payload carries the grid's config, not the command's report writer by ``module:qualname`` (a
    name the experiment layer would import at run time, above its floor): the command that waits for its local
    workers writes the report after them; Slurm jobs are handed the writer itself (issue 70 item 5)."""
    from pgra.cli.experiment import write_and_print_report
    from pgra.core.config import from_dict
    from pgra.experiment import Experiment, ExperimentConfig, launch

    cfg = from_dict(ExperimentConfig, {"out": str(tmp_path / "exp"), "launcher": "local", "workers": 2,
                                       "index": {"out": str(tmp_path / "index")}})
    payload = workers.experiment_payload(Experiment(cfg, report_writer=write_and_print_report))
    assert "write_and_print_report" not in json.dumps(payload)
    assert launch.experiment_from_payload(payload).report_writer is None
    reported, handed = [], []
    monkeypatch.setattr(launch, "_local", lambda payload, envs, gpus=0: [0, 0])
    monkeypatch.setattr(launch, "report_if_last", reported.append)
    monkeypatch.setattr(launch, "_slurm", lambda payload, cfg, writer=None: handed.append(writer) or [0])
    parent = Experiment(cfg, report_writer=write_and_print_report)
    launch.launch(parent)
    assert reported == [parent]
    launch.launch(Experiment(replace(cfg, launcher="slurm"), report_writer=write_and_print_report))
    assert handed == [write_and_print_report]


# ----- issue 68 item 3: exclusive-process GPUs -----
SMI = "0, GPU-0a1b, Exclusive_Process\n1, GPU-2c3d, Default\n"


def _smi(monkeypatch, gpus: int = 2, output: str = SMI) -> list[list[str]]:
    """Two GPUs as torch and a mocked `nvidia-smi --query-gpu=index,uuid,compute_mode` see them."""
    asked: list[list[str]] = []

    def run(cmd, **kwargs):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, output, "")

    monkeypatch.setattr(pgra_device.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(pgra_device.subprocess, "run", run)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return asked


def test_the_compute_mode_of_a_gpu_by_index_or_uuid(monkeypatch):
    asked = _smi(monkeypatch)
    assert pgra_device.gpu_compute_mode("0") == "Exclusive_Process"
    assert pgra_device.gpu_compute_mode("GPU-2c3d") == "Default"
    assert pgra_device.gpu_compute_mode("MIG-77") is None
    assert "--query-gpu=index,uuid,compute_mode" in asked[0]
    monkeypatch.setattr(pgra_device.shutil, "which", lambda name: None)
    assert pgra_device.gpu_compute_mode("0") is None  # no nvidia-smi: unknown, nothing refused


def test_cells_mode_on_an_exclusive_process_gpu_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """Under parallel: cells the rank holds a CUDA context on its GPU, so its cell's child process could not create
    one where the GPU lets one process at a time use it: refused with one line naming parallel, before the index
    is built (a rank on a Default GPU, or a DDP job with a GPU each, runs)."""
    from pgra.core.errors import InputError

    _smi(monkeypatch)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    grid = _grid(tmp_path, world_size=2)
    grid.index = lambda: pytest.fail("the index was built")
    with pytest.raises(InputError, match=r"field 'parallel': GPU 0 is in EXCLUSIVE_PROCESS compute mode .* "
                                         r"parallel: ddp"):
        workers.run_pooled([grid])
    cell_process.check_gpu_sharing(_grid(tmp_path, world_size=2, parallel="ddp"))  # a GPU each: one process on it
    monkeypatch.setenv("LOCAL_RANK", "1")
    cell_process.check_gpu_sharing(grid)  # GPU 1: Default
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(InputError, match="2 ranks of this launch share it"):
        cell_process.check_gpu_sharing(_grid(tmp_path, world_size=4, parallel="ddp"))


def test_local_workers_sharing_an_exclusive_process_gpu_are_one_error_line(tmp_path, monkeypatch, capsys):
    from pgra.experiment import launch
    from tests.conftest import one_error_line, write_corpus, write_sky_task

    _smi(monkeypatch)
    launch.check_local_gpus(2)  # one worker a GPU: each alone on it
    write_sky_task(tmp_path)
    write_corpus(tmp_path)
    line = one_error_line(["experiment", "--out", str(tmp_path / "exp"), f"tasks={tmp_path / 'sky.yaml'}",
                           f"index.corpus={tmp_path / 'corpus.txt'}", f"index.out={tmp_path / 'index'}",
                           "index.retriever=bm25", "--launcher", "local", "--workers", "3"], capsys)
    assert "field 'workers'" in line and "GPU 0 is in EXCLUSIVE_PROCESS" in line and "at most 2 worker(s)" in line
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize("skew", [3600.0, -3600.0])
def test_a_cell_failed_lately_is_judged_on_the_file_system_s_clock(skew, tmp_path, monkeypatch):
    """Issue 68 item 5: whether a cell failed since this job started compares its error.log's mtime (the file
    system's clock) with the job's start: read on that clock too, a host an hour ahead does not retry a cell that
    just failed, and one an hour behind retries a cell that failed before it started."""
    (tmp_path / "out").mkdir()
    cell = CellPlan("t", "fid", 1, tmp_path / "out" / "t" / "fid" / "seed-1", "k", "todo")
    cell.directory.mkdir(parents=True)
    (cell.directory / "error.log").write_text("failed before this job started\n")
    before = time.time() - 60
    os.utime(cell.directory / "error.log", (before, before))
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew)
    grid = _grid(tmp_path)
    assert not grid._failed_lately(cell)
    (cell.directory / "error.log").write_text("failed now\n")
    assert grid._failed_lately(cell)


@pytest.mark.parametrize(("local_world", "local_rank", "gpus", "shares"), [
    ("16", "0", 8, False), ("16", "7", 8, False), ("16", "8", 8, True), ("16", "15", 8, True),  # cells_per_gpu 2
    ("8", "7", 8, False),   # a GPU each
    ("2", "1", 0, False),   # the CPU: every rank works
    (None, "3", 1, False),  # srun --gpus-per-task=1: each rank sees its own GPU
])
def test_which_ranks_share_a_gpu_with_a_lower_one(local_world, local_rank, gpus, shares):
    env = {"LOCAL_RANK": local_rank, **({"LOCAL_WORLD_SIZE": local_world} if local_world else {})}
    assert pgra_device.shares_a_gpu(env, gpus) is shares


def test_a_local_worker_leaves_the_stages_to_its_gpu_s_first_worker_while_it_runs(tmp_path):
    from pgra.runtime.device import STAGE_PARTNER_ENV, stage_partner_alive

    assert not stage_partner_alive({}) and stage_partner_alive({STAGE_PARTNER_ENV: str(os.getpid())})
    for forged in ("0", "1", "9" * 20):  # this process group, init, past any pid: never a partner
        assert not stage_partner_alive({STAGE_PARTNER_ENV: forged})
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while Path(f"/proc/{ended.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":  # ended, not reaped
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not stage_partner_alive({STAGE_PARTNER_ENV: str(ended.pid)})
    ended.wait()
    assert not stage_partner_alive({STAGE_PARTNER_ENV: str(ended.pid)})


def test_a_local_worker_sharing_a_gpu_builds_no_stage_while_its_partner_runs(tmp_path, monkeypatch):
    from pgra.runtime.device import STAGE_PARTNER_ENV

    run, stage = _grid(tmp_path), tmp_path / "out" / "t" / "reranked"
    monkeypatch.setenv(STAGE_PARTNER_ENV, str(os.getpid()))
    assert run._claim_on_main(stage, "t reranked", stage=True) == ("held", [])
    assert not claim_path(stage).exists()
    assert run._claim_on_main(tmp_path / "index", "index")[0] == "run"  # the index is claimed as before
    monkeypatch.setenv(STAGE_PARTNER_ENV, "999999999")  # its partner ended: it builds what is left
    decision, claim = run._claim_on_main(stage, "t reranked", stage=True)
    assert decision == "run" and claim_path(stage).exists()
    for stack in claim:
        stack.close()


def test_the_local_launcher_names_each_gpu_s_first_worker_to_the_workers_beside_it(tmp_path, monkeypatch):
    """--launcher local --workers 4 on 2 GPUs: workers 2 and 3 leave the stages to workers 0 and 1."""
    from pgra.experiment import launch
    from pgra.runtime.device import STAGE_PARTNER_ENV

    started = []

    class Proc:
        def __init__(self, cmd, env):
            self.pid, self.env = 1000 + len(started), env
            started.append(self)

        def wait(self):
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", Proc)
    envs = [{"PGRA_WORKER": f"local-{i}", STAGE_PARTNER_ENV: "7"} for i in range(4)]
    assert launch._local({}, envs, gpus=2) == [0, 0, 0, 0]
    assert [p.env.get(STAGE_PARTNER_ENV) for p in started] == [None, None, "1000", "1001"]
    launch._local({}, envs[:2], gpus=0)
    assert all(STAGE_PARTNER_ENV not in p.env for p in started[4:])


@pytest.mark.parametrize("junk", ["²", "１２", "٣", "-2", "1.5", "x", " ", "9" * 5000])
def test_a_count_in_the_environment_that_is_no_ascii_whole_number_is_left_unread(junk, monkeypatch):
    """``str.isdigit`` takes ``²`` (and other scripts' digits) that ``int`` refuses or reads as another number: every
    count pgra reads from the environment goes through one parser, and such a value counts as unset (H11)."""
    from pgra.core.errors import InputError, whole_number
    from pgra.core.faults import parse_fault
    from pgra.experiment.estimate import default_workers, worker_threads
    from pgra.retrieval.dense import faiss_gpus

    assert whole_number(junk) is None and whole_number(" 12 ") == 12
    assert pgra_device.core_sharers({pgra_device.CORE_SHARERS_ENV: junk}) == 1
    assert pgra_device.ranks_per_node({"LOCAL_WORLD_SIZE": junk}) is None
    assert pgra_device.core_sharers({"LOCAL_WORLD_SIZE": junk, pgra_device.CORE_SHARERS_ENV: "3"}) == 3
    assert faiss_gpus(2, {"LOCAL_RANK": junk, "LOCAL_WORLD_SIZE": junk}) == [0, 1]  # as unset: a lone process
    for name, value in (("LOCAL_RANK", junk), ("RANK", "3"), ("WORLD_SIZE", junk), ("OMP_NUM_THREADS", junk)):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(pgra_device, "node_cores", lambda: 4)
    # LOCAL_RANK unread, so the mpirun-style RANK 3 chooses the GPU (3 mod 2), as pgra.runtime.device.launch_rank says
    assert pgra_device.local_device_index(2) == 1 and default_workers() == 1 and worker_threads(2) == 2.0
    assert distributed.init_distributed().world_size == 1
    with pytest.raises(InputError, match="PGRA_FAULT"):
        parse_fault(f"train.step@{junk}")
