"""An analysis's variants of an experiment: the same grid with some settings changed, run into its own folder,
reusing the experiment's index, candidates, embedding cache and identical cells."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ..core.config import from_dict, merge, to_dict
from ..core.errors import PgraError
from ..experiment import CELL_FILE, Experiment, ExperimentConfig
from ..experiment.grid import run_grids
from ..results.predictions import checked_cell_metric
from ..runtime.distributed import main_computes
from ..storage.artifacts import read_json
from .inputs import ExperimentRuns


def variant_config(cfg: ExperimentConfig, out: Path, methods: list[str], seeds: list[int],
                   per_task: dict[str, Any] | None = None, index: dict[str, Any] | None = None) -> ExperimentConfig:
    """``cfg`` run into ``out`` with ``methods`` and ``seeds``, ``per_task`` merged into every task's overrides (the
    reader's into every method's too, so no override undoes it) and ``index`` into the index section; no report."""
    data = copy.deepcopy(to_dict(cfg))
    data.update(out=str(out), methods=list(methods), seeds=list(seeds), report=False, dry_run=False)
    if index:
        data["index"] = merge(data["index"], index)
    if per_task:
        for task in cfg.tasks:
            data["task_overrides"][task] = merge(data["task_overrides"].get(task) or {}, per_task)
        if "reader" in per_task:
            for m in methods:
                if m in data["method_overrides"]:
                    data["method_overrides"][m] = merge(data["method_overrides"][m], {"reader": per_task["reader"]})
    return from_dict(type(cfg), data, source=f"<analysis variant {out}>")


def run_variants(runs: ExperimentRuns, configs: list[ExperimentConfig], ctx,
                 share_candidates: bool) -> list[Experiment]:
    """Run the variant grids of ``configs`` as one job, but those that are the experiment's own cells."""
    variants = [Experiment(c, candidates_from=runs.experiment if share_candidates else None) for c in configs]
    # decided on the main process: every rank must run the same grids (another job may finish a cell meanwhile)
    own = main_computes(ctx, lambda: [i for i, v in enumerate(variants) if not is_experiment(runs, v)])
    todo = [variants[i] for i in own]
    if todo:
        failed = run_grids(todo, ctx)
        if failed:
            raise PgraError(f"{len(failed)} cell(s) of the analysis runs failed: "
                            + ", ".join(str(c.directory) for c in failed))
    return variants


def is_experiment(runs: ExperimentRuns, variant: Experiment) -> bool:
    """Whether every cell of ``variant`` is a finished cell of the experiment (the variant then ran nothing)."""
    return all(is_experiment_cell(runs.experiment, variant, c) for c in variant.plan())


def is_experiment_cell(main: Experiment, variant: Experiment, cell) -> bool:
    """Whether the variant's ``cell`` is a finished cell of ``main`` (same key, candidates read from ``main``)."""
    done = main.cell_dir(cell.task, cell.method, cell.seed) / CELL_FILE
    return variant.candidates_from is main and done.exists() and read_json(done).get("key") == cell.key


def cell_folder(runs: ExperimentRuns, variant: Experiment, task: str, method: str, seed: int) -> Path:
    """Where a variant cell's results are: the experiment's own cell when identical, else the variant's."""
    for c in variant.plan([task]):
        if c.method == method and c.seed == seed and is_experiment_cell(runs.experiment, variant, c):
            return runs.experiment.cell_dir(task, method, seed)
    return variant.cell_dir(task, method, seed)


def variant_metric(runs: ExperimentRuns, variant: Experiment, task: str, method: str) -> list[float]:
    """The metric of a variant's method on the analysed split, one value per finished seed."""
    cells = [cell_folder(runs, variant, task, method, s) / CELL_FILE for s in variant.seeds(task, method)]
    return [checked_cell_metric(c, runs.split, runs.task_spec(task)) for c in cells if c.exists()]


__all__ = ["cell_folder", "is_experiment", "is_experiment_cell", "run_variants", "variant_config", "variant_metric"]
