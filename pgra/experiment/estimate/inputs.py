"""What a plan counts before pricing: the device whose fits price it, the workers and the cores each has, the
inputs of each task per split, and each stage's plan (the texts its LM embeds, its files)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.errors import whole_number
from ...rerank.prompt_guided.cost_model import corpus_passed
from ...stages import PlanRequest, StagePlan

if TYPE_CHECKING:
    from ..grid_view import GridView

SPLIT_FILES = ("train.jsonl", "dev.jsonl", "test.jsonl")


PLAN_DEVICES = ("auto", "cuda", "gpu", "cpu")


def gpu_requests(cfg: Any) -> list[str]:
    """What in an experiment config asks for GPUs (empty: nothing): Slurm workers with GPUs, what a reader's
    settings ask (:func:`pgra.reader.cost_model.gpu_requests`: CUDA graphs, fp16), a ``cuda`` device in any section
    or a section's own options (the index's retriever's, the retrieval, reranker or in-context LM)."""
    from ...reader.cost_model import gpu_requests as reader_requests
    from ..config import cell_settings

    found: list[str] = []
    if getattr(cfg, "launcher", "none") == "slurm" and int(getattr(cfg.slurm, "gpus_per_worker", 0) or 0) > 0:
        found.append(f"slurm.gpus_per_worker={cfg.slurm.gpus_per_worker}")
    for task in cfg.tasks:
        for method in cfg.methods:
            s = cell_settings(cfg, task, method)
            found += reader_requests(s.reader) + [f"{name}={value}" for name, value in _devices(s)
                                                  if str(value).startswith("cuda")]
    return list(dict.fromkeys(found))


def _devices(settings: Any, prefix: str = "", depth: int = 2) -> list[tuple[str, Any]]:
    """Every ``device`` option among the sections of ``settings`` and their own sections, by its dotted name."""
    found = []
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.name == "device":
            found.append((f"{prefix}device", value))
        elif depth and dataclasses.is_dataclass(value):
            found += _devices(value, f"{prefix}{f.name}.", depth - 1)
    return found


def plan_device(cfg: Any) -> tuple[str, str]:
    """Which fits price the plan, ``gpu`` or ``cpu``, and why: ``plan_device`` of the config (when it has the
    option) or ``PGRA_PLAN_DEVICE`` (``cuda``/``gpu``, ``cpu``, ``auto``); on ``auto``, the GPU's where this machine
    has CUDA or the config asks for GPUs (:func:`gpu_requests`: a login node without CUDA then prices the GPU
    fits, and says so), else the CPU's."""
    import torch

    chosen = str(getattr(cfg, "plan_device", "") or os.environ.get("PGRA_PLAN_DEVICE", "") or "auto").lower()
    from ...core.errors import InputError, clip

    where = "plan_device" if getattr(cfg, "plan_device", "") else "PGRA_PLAN_DEVICE"
    if chosen not in PLAN_DEVICES:
        raise InputError(f"{clip(chosen)}: must be one of {', '.join(PLAN_DEVICES)}", field=where)
    if chosen in ("cuda", "gpu"):
        return "gpu", f"the GPU's, as {where}={chosen} asks"
    if chosen == "cpu":
        return "cpu", f"the CPU's, as {where}=cpu asks"
    if torch.cuda.is_available():
        return "gpu", "the GPU's (this machine has CUDA)"
    asks = gpu_requests(cfg)
    if asks:
        return "gpu", (f"the GPU's: this machine has no CUDA, but the config asks for GPUs ({', '.join(asks)}), so "
                       "the plan prices the GPU fits, not this machine (PGRA_PLAN_DEVICE=cpu prices the CPU's)")
    return "cpu", ("the CPU's (this machine has no CUDA and the config asks for no GPU; PGRA_PLAN_DEVICE=cuda prices "
                   "the GPU's)")


def default_workers() -> int:
    """The process count of the launch (``WORLD_SIZE``), 1 without a launcher."""
    return whole_number(os.environ.get("WORLD_SIZE", "")) or 1


def worker_threads(workers: int, launcher: str = "none", slurm: Any = None) -> float | None:
    """The cores each of ``workers`` CPU workers computes on: this machine's (:func:`pgra.runtime.device.node_cores`) shared
    among them (a fraction where they outnumber the cores), at most the ``OMP_NUM_THREADS`` a rank runs with (a
    user's, or what pgra makes of a launcher's default, :func:`pgra.runtime.device.launcher_threads`). Slurm jobs
    (``slurm``: the config's section) compute on their ``cpus_per_worker``; submitit's local cluster shares this
    machine. None where unknown."""
    from ...runtime.device import THREADS_ENV, launcher_threads, node_cores

    if launcher == "slurm" and getattr(slurm, "cluster", "slurm") != "local":
        cpus = int(getattr(slurm, "cpus_per_worker", 0) or 0)
        return float(cpus) if cpus > 0 else None
    share = node_cores() / max(workers, 1)
    given = launcher_threads()
    if given is None:
        given = whole_number(os.environ.get(THREADS_ENV, "")) or None
    return min(share, float(given)) if given else share


def count_lines(paths: list[Path]) -> int | None:
    """The lines of ``paths`` together; None when none of them is a file."""
    files = [p for p in paths if p.is_file()]
    if not files:
        return None
    total = 0
    for p in files:
        with open(p, "rb") as f:
            total += sum(1 for _ in f)
    return total


def task_splits(exp: GridView, name: str, task: str | None = None) -> dict[str, int] | None:
    """The inputs of a task of the experiment folder per split: the lines of its candidates folder's split files,
    else (a task of the config, ``task``) of its data files, each split at most its ``retrieve.split_sizes``, a dev
    split the task lacks carved from train (``dev_fraction``); None when none is found."""
    folder = exp.out / name / "candidates"
    found = {f.removesuffix(".jsonl"): count_lines([folder / f]) for f in SPLIT_FILES}
    if any(n is not None for n in found.values()) or task is None:
        counted = {k: n for k, n in found.items() if n is not None}
        return counted or None
    from ...tasks.loaders import resolve_data_path
    from ..config import cell_settings

    settings = cell_settings(exp.cfg, task)
    spec = exp.tasks[task]
    base = resolve_data_path(spec.data, settings.data_dir)
    if not isinstance(base, Path):
        return None
    out: dict[str, int] = {}
    for split, file in spec.data.files.items():
        n = count_lines([base / file])
        if n is not None:
            cap = settings.retrieve.split_sizes.get(split, settings.retrieve.max_examples)
            out[split] = min(n, int(cap)) if cap else n
    if out and "dev" not in out and "train" in out:
        out["dev"] = int(round(out["train"] * spec.data.dev_fraction))
        out["train"] -= out["dev"]
    return out or None


def task_inputs(exp: GridView, name: str, task: str | None = None) -> int | None:
    """The inputs of a task of the experiment folder: the lines of its candidates folder's split files, else (a
    task of the config, ``task``) of its data files, each split at most its ``retrieve.split_sizes``."""
    splits = task_splits(exp, name, task)
    return None if splits is None else sum(splits.values())


def planned_test_inputs(exp: GridView, task: str, split: str = "test") -> tuple[int | None, str]:
    """The inputs a task of the grid is tested on (the report's ``split``), as :func:`task_splits` counts them
    before anything runs, or (None, why) when they are unknown: a task spec declares no size, so a task whose data
    is neither built nor in local files (a Hugging Face dataset) has none until its candidates stage has run."""
    splits = task_splits(exp, exp.tasks[task].name, task)
    if splits is None:
        return None, "its test inputs are unknown until its data is built (no local split files to count): skipped"
    if not splits.get(split):
        return None, f"no '{split}' inputs among its splits ({', '.join(sorted(splits))}): skipped"
    return splits[split], ""


def stage_plans(exp: GridView, task: str, inputs: int | None, corpus: int | None, fits: Any = None,
                input_bytes: float = 0.0, sentence_bytes: float = 0.0) -> dict[str, StagePlan]:
    """Each stage's plan for ``task`` (:meth:`pgra.stages.Stage.plan`), asked with what the grid knows of the task;
    an empty plan for a stage no family names now."""
    from ...core.errors import InputError
    from ...methods import get_stage
    from ..config import cell_settings

    stages = exp.stages_needed()
    request = PlanRequest(cell_settings(exp.cfg, task), exp.rerank_config(task), exp.retrieve_config(task).k, inputs,
                          corpus, stages, "reranked" in stages and corpus_passed_by(exp, task, corpus), fits,
                          input_bytes, sentence_bytes)
    out: dict[str, StagePlan] = {}
    for stage in stages:
        try:
            out[stage] = get_stage(stage).plan(request)
        except InputError:  # a stage no family names now: nothing to plan
            out[stage] = StagePlan()
    return out


def corpus_passed_by(exp: GridView, task: str, corpus: int | None) -> bool:
    """Whether ``task``'s reranked stage embeds (or embedded) the whole corpus (:func:`corpus_passed`)."""
    return corpus_passed(exp.rerank_config(task), exp.stage_dir(task, "reranked"), exp.stage_done(task, "reranked"),
                         corpus)

