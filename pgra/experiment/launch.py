"""``pgra experiment --launcher local|slurm --workers W``: start W workers that share one grid.

Each worker is a plain ``pgra experiment`` job over the same ``out`` (launcher ``none``): it claims the index,
stages and cells (:mod:`pgra.experiment.claims`), so every cell runs once and the last worker writes the report.
``local``: W local processes, each given one GPU (``CUDA_VISIBLE_DEVICES`` round-robin over the visible ones; none
without CUDA; workers beyond the GPUs share them, each cell starting once its GPU has the memory it needs free:
``cells_per_gpu``). ``slurm``: W Slurm jobs submitted through submitit (the ``slurm`` section: partition, time, GPUs per
worker, ...); ``slurm.cluster=local`` runs the same jobs through submitit's LocalExecutor.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.config import from_dict
from ..core.errors import InputError, PgraError
from ..runtime.device import (
    CORE_SHARERS_ENV,
    STAGE_PARTNER_ENV,
    apply_threads,
    exclusive_gpu_problem,
    node_cores,
    shared_threads,
)
from ..runtime.distributed import DistContext
from ..storage.artifacts import claim_output
from ..storage.lock import is_main_launch
from ..storage.ownership import claimed
from .cell import report_failure
from .cell_process import cells_sharing_a_gpu, single_process_env, visible_devices
from .claims import CHILD_MODULE, WORKER_ENV
from .config import ExperimentConfig, SlurmConfig
from .grid import Experiment
from .layout import CellPlan
from .workers import experiment_payload, part_registries, report_if_last


def run_experiment(cfg: ExperimentConfig, ctx=None,
                   report_writer: Callable[[Path, str], None] | None = None) -> list[CellPlan]:
    """Run (or with ``dry_run`` describe) the grid, or with ``launcher`` start ``workers`` jobs that run it; returns
    the failed cells. No lock on ``out``: jobs sharing it claim its stages and cells (:mod:`.claims`); ``out`` must
    be new, empty or pgra's (:func:`pgra.storage.ownership.claimed`). ``report_writer(out, reference)``: called by the job
    that finishes last (:meth:`~pgra.experiment.grid.Experiment.run`)."""
    experiment = Experiment(cfg, report_writer=report_writer)
    if cfg.dry_run:
        return experiment.run(ctx)
    if cfg.launcher != "none":  # before anything is written: the launcher can start, no job runs other settings
        check_launcher(cfg)
        experiment.check_sharing()
    claim_output(cfg.out, "experiment", "out")
    with claimed(cfg.out, "experiment", "out", cfg) if is_main_launch() else contextlib.nullcontext():
        if cfg.launcher != "none":
            return launch(experiment)
        return experiment.run(ctx)


def launch(experiment) -> list:
    """Run ``experiment``'s grid with ``cfg.workers`` workers of ``cfg.launcher``; the cells that failed (read back
    from the folder: those with an ``error.log`` and no ``cell.json``)."""
    cfg = experiment.cfg
    worker, envs = replace(cfg, launcher="none"), []
    if cfg.launcher == "local":
        envs, sharing = local_workers(cfg.workers, cfg.cells_per_gpu)
        worker = replace(worker, cells_per_gpu=sharing)
    payload = experiment_payload(type(experiment)(worker, candidates_from=experiment.candidates_from))
    if cfg.launcher == "local":  # the workers write no report: this command, which waits for them, does
        codes = _local(payload, envs, len(visible_devices()))
        report_if_last(experiment)
    else:
        codes = _slurm(payload, cfg, experiment.report_writer)
    if codes is None:
        return []
    failed = [c for c in experiment.plan() if c.status != "done" and (c.directory / "error.log").exists()]
    if any(codes) and not failed:
        raise InputError(f"{sum(1 for c in codes if c)} of {len(codes)} worker(s) failed (exit codes {codes}); "
                         "see their output", field="launcher")
    return failed


LOCAL_WORKERS_PER_CORE = 4  # the most local workers (whole processes, a model each) per core of this machine


def check_launcher(cfg: ExperimentConfig) -> None:
    """Refuse (an InputError on ``launcher``) a launcher that cannot start here: ``slurm`` without submitit, or
    (``slurm.cluster: slurm``) on a machine without Slurm's ``sbatch`` and ``srun``; ``local`` with more workers
    than this machine runs side by side (an InputError on ``workers``: :func:`local_workers_limit`), or with
    workers that would share a GPU in ``EXCLUSIVE_PROCESS`` compute mode (on ``workers``)."""
    if cfg.launcher == "local":
        if cfg.workers > local_workers_limit(cfg.cells_per_gpu):
            raise InputError(f"--launcher local starts {cfg.workers} processes on this machine, which runs at most "
                             f"{local_workers_limit(cfg.cells_per_gpu)} side by side ({LOCAL_WORKERS_PER_CORE} per "
                             f"core of its {node_cores()}, or one per GPU and cells_per_gpu): start fewer, or submit "
                             "them with --launcher slurm", field="workers")
        check_local_gpus(cfg.workers)
    if cfg.launcher != "slurm":
        return
    try:
        import submitit  # noqa: F401
    except ImportError:
        raise InputError("--launcher slurm needs submitit: pip install 'submitit>=1.5' (the slurm extra of pgra's pyproject.toml)",
                         field="launcher") from None
    missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
    if cfg.slurm.cluster == "slurm" and missing:
        raise InputError(f"--launcher slurm: this machine has no Slurm ({' and '.join(missing)} not found on PATH): "
                         "run it where jobs are submitted (a login node), or start the workers on this machine with "
                         "--launcher local (or slurm.cluster=local)", field="launcher")


def check_local_gpus(workers: int) -> None:
    """Refuse (an InputError on ``workers``) local workers that would share a GPU in ``EXCLUSIVE_PROCESS`` compute
    mode, which lets one process at a time use it (:func:`pgra.runtime.device.exclusive_gpu_problem`)."""
    devices = visible_devices()
    crowd = cells_sharing_a_gpu(1, workers, len(devices)) if devices else 1  # workers on one GPU
    problem = exclusive_gpu_problem(devices[:workers], crowd, f"{workers} workers on {len(devices)} GPU(s) put "
                                    f"{crowd} on one")
    if problem is not None:
        raise InputError(f"{problem}: give at most {len(devices)} worker(s), or ask for the GPUs in the Default "
                         "compute mode (nvidia-smi -c DEFAULT, or your cluster's option for it)", field="workers")


def local_workers_limit(cells_per_gpu: int) -> int:
    """The most ``--launcher local`` workers this machine runs side by side: :data:`LOCAL_WORKERS_PER_CORE` per core
    (:func:`pgra.runtime.device.node_cores`), or its visible GPUs x ``cells_per_gpu`` where that is more."""
    return max(LOCAL_WORKERS_PER_CORE * node_cores(), len(visible_devices()) * cells_per_gpu)


def slurm_parameters(s: SlurmConfig, devices_here: int = 0) -> dict[str, Any]:
    """submitit's parameters of a worker job: its time, CPUs, GPUs, memory and partition. On Slurm, the job's
    ``srun`` step is given the job's CPUs (``SRUN_CPUS_PER_TASK``: Slurm 22.05 to 23.02 do not pass
    ``--cpus-per-task`` on to ``srun``, whose step would get one CPU). No memory is asked when ``mem_gb`` is 0 (the
    partition's default: :func:`memory_note`). ``devices_here``: the GPUs the LocalExecutor may use."""
    params: dict[str, Any] = {"timeout_min": s.time_min, "cpus_per_task": s.cpus_per_worker,
                              "gpus_per_node": s.gpus_per_worker, "name": "pgra-experiment", "tasks_per_node": 1,
                              "nodes": 1}
    if s.mem_gb:
        params["mem_gb"] = s.mem_gb
    if s.partition:
        params["slurm_partition"] = s.partition
    if s.cluster == "slurm":
        params["slurm_setup"] = [f"export SRUN_CPUS_PER_TASK={s.cpus_per_worker}"]
    else:  # the LocalExecutor runs each job on this machine's visible GPUs
        params["gpus_per_node"] = min(s.gpus_per_worker, devices_here)
    return params


def memory_note(s: SlurmConfig) -> str:
    """What memory the workers get (said when submitting)."""
    if s.mem_gb:
        return f"{s.mem_gb:g} GB of memory each"
    return ("no memory asked (slurm.mem_gb: 0): each gets the partition's default (DefMemPerCPU x "
            f"{s.cpus_per_worker} CPUs, or DefMemPerNode; where neither is set, a whole node's); set slurm.mem_gb to "
            "ask for a size")


def local_workers(workers: int, cells_per_gpu: int) -> tuple[list[dict[str, str]], int]:
    """The environments of ``workers`` local workers, one GPU each: worker ``i`` sees the visible GPU ``i`` modulo
    their count (``CUDA_VISIBLE_DEVICES``; none without CUDA), as rank ``i`` of a launch would
    (:func:`pgra.runtime.device.local_device_index`); and the ``cells_per_gpu`` they run with: the given one, or the most
    workers that share one GPU where that is more (:func:`~.cell_process.cells_sharing_a_gpu`: a worker, which sees
    one GPU, cannot count them), said in one line."""
    devices = visible_devices()
    envs = [single_process_env(i if devices else None, f"local-{i}", workers) for i in range(workers)]
    if not devices:
        return envs, cells_per_gpu
    sharing = cells_sharing_a_gpu(cells_per_gpu, workers, len(devices))
    if sharing > cells_per_gpu:
        print(f"note: {workers} workers on {len(devices)} GPU(s): up to {sharing} cells share a GPU (cells_per_gpu "
              f"{cells_per_gpu}); each cell starts once its GPU has 1/{sharing} of its memory free (or cell_gpu_gb)",
              flush=True)
    return envs, sharing


def _local(payload: dict, envs: list[dict[str, str]], gpus: int = 0) -> list[int]:
    """One local process per environment of :func:`local_workers`; their exit codes. Worker ``i`` past the
    ``gpus`` shares its GPU with worker ``i % gpus``, and leaves the stages to it while it runs (its pid in
    :data:`pgra.runtime.device.STAGE_PARTNER_ENV`): one stage's models on a GPU at a time."""
    with tempfile.TemporaryDirectory(prefix="pgra-workers-") as tmp:
        spec = Path(tmp) / "experiment.json"
        spec.write_text(json.dumps(payload))
        procs: list[subprocess.Popen] = []
        for i, env in enumerate(envs):
            env = {k: v for k, v in env.items() if k != STAGE_PARTNER_ENV}
            if gpus and i >= gpus:
                env[STAGE_PARTNER_ENV] = str(procs[i % gpus].pid)
            procs.append(subprocess.Popen([sys.executable, "-m", CHILD_MODULE, "grid", str(spec)], env=env))
        return [p.wait() for p in procs]


def _slurm(payload: dict, cfg, report_writer: Callable[[Path, str], None] | None = None) -> list[int] | None:
    """``cfg.workers`` Slurm jobs (submitit); their exit codes, or None when not waiting for them. Each job is
    handed ``report_writer`` (submitit pickles it with the job): the last to finish writes the report."""
    check_launcher(cfg)
    import submitit

    s = cfg.slurm
    folder = Path(s.folder or Path(cfg.out) / ".submitit")
    try:
        executor = submitit.AutoExecutor(folder=folder / "%j", cluster=s.cluster)
    except RuntimeError as e:  # submitit's own check (`Could not detect "srun"`)
        raise InputError(f"--launcher slurm: {e}", field="launcher") from None
    executor.update_parameters(**slurm_parameters(s, len(visible_devices()) if s.cluster == "local" else 0))
    sharers = cfg.workers if s.cluster == "local" else None  # local jobs share this machine's cores
    jobs = [executor.submit(run_worker, payload, f"slurm-{i}", sharers, report_writer) for i in range(cfg.workers)]
    print(f"submitted {len(jobs)} worker(s): {', '.join(str(j.job_id) for j in jobs)} (logs in {folder}); "
          f"{memory_note(s)}", flush=True)
    if not s.wait:
        return None
    codes = []
    for job in jobs:
        try:
            codes.append(int(job.result()))
        except Exception as e:  # a job that died (killed, timed out): the others finish its cells
            print(f"worker job {job.job_id} failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                  file=sys.stderr)
            codes.append(1)
    return codes


def run_worker(payload: dict, name: str, sharers: int | None = None,
               report_writer: Callable[[Path, str], None] | None = None) -> int:
    """One worker: the grid of ``payload`` (:func:`pgra.experiment.workers.experiment_payload`) as one job; 1 when
    a cell it ran failed; ``report_writer``: the launching command's (a Slurm job's), written by the last job. ``sharers``: the workers computing on this machine's cores beside it (Slurm's ``local``
    cluster), which its cost records count (:data:`pgra.runtime.device.CORE_SHARERS_ENV`) and whose cores it shares
    (:func:`pgra.runtime.device.shared_threads`)."""
    from ..core.verbosity import configure_child_output

    configure_child_output()  # a worker process (local or Slurm) is as quiet as the command that launched it
    os.environ[WORKER_ENV] = name
    if sharers:
        apply_threads(shared_threads(sharers))  # its share of the cores, not all of them
        os.environ[CORE_SHARERS_ENV] = str(sharers)
    experiment = experiment_from_payload(payload)
    if report_writer is not None:
        experiment.report_writer = report_writer
    return 1 if experiment.run() else 0


def experiment_from_payload(payload: dict[str, Any]):
    """The :class:`~pgra.experiment.grid.Experiment` of :func:`experiment_payload`."""
    def config(spec):
        module, _, name = spec["class"].partition(":")
        return from_dict(getattr(importlib.import_module(module), name), spec["values"], source="<worker payload>")

    registries = part_registries()
    for kind, parts in (payload.get("plugins") or {}).items():  # the parent's plug-ins, registered here too
        registries[kind].register_parts(parts)
    source = payload.get("candidates_from")
    return Experiment(config(payload["config"]), candidates_from=None if source is None else Experiment(config(source)))


def run_cell_process(spec: dict[str, Any]) -> int:
    """A cell-parallel worker's cell (the child process of :meth:`~.workers.GridRun._run_alone`) from the spec it
    wrote: 0 when it finished."""
    from ..core.verbosity import configure_child_output

    configure_child_output()  # as quiet as the rank that started it
    exp = experiment_from_payload(spec)
    want = spec["cell"]
    cell = next(c for c in exp.plan([want["task"]]) if c.method == want["method"] and c.seed == want["seed"])
    if cell.key != want["key"]:
        raise PgraError(f"[{cell.label}] key {cell.key} differs from the grid's {want['key']}")
    try:
        exp.run_cell(cell, DistContext())
    except Exception as e:
        report_failure(f"[{cell.label}]", e, cell.directory)
        return 1
    return 0


__all__ = ["check_launcher", "check_local_gpus", "experiment_from_payload", "launch", "local_workers", "memory_note", "run_cell_process",
           "run_experiment", "run_worker", "slurm_parameters"]

if __name__ == "__main__":  # a grid started by an earlier pgra runs its children here
    import runpy

    runpy.run_module(CHILD_MODULE, run_name="__main__")
