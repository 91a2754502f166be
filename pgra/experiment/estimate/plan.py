"""The plan of a grid: every stage and planned cell priced (:mod:`.records`), its wall-clock on the workers
(:class:`~.schedule.Plan`) and its disk (:mod:`.disk`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...storage.artifacts import read_json
from ..layout import STAGE_COST_FILE, STAGE_KEY_FILE, finished_cells
from .disk import plan_disk
from .fits import BenchFits
from .inputs import default_workers, plan_device, stage_plans, task_splits, worker_threads
from .records import _timed, _timed_cell, estimate_cell, estimate_stage, record_sources
from .schedule import Estimate, Plan

if TYPE_CHECKING:
    from ..grid_view import GridView
    from ..layout import CellPlan

STAGES = ("candidates", "reranked", "full_search")


def plan_costs(exp: GridView, cells: list[CellPlan] | None = None, workers: int | None = None,
               fits: BenchFits | None = None, cells_per_gpu: int | None = None, record_folders: tuple[Path, ...] = (),
               as_new: bool = False) -> Plan:
    """The estimates of every stage and planned cell of ``exp`` on ``workers`` (default: the config's, else the
    process count), ``fits`` default: :func:`_fits`; the records are those of ``exp``'s folder, ``record_folders``
    and the config's ``plan_records``. ``as_new``: every stage and cell priced as if none had run."""
    cells = cells if cells is not None else exp.plan()
    if as_new:
        cells = [dataclasses.replace(c, status="todo") for c in cells]
    per_gpu = cells_per_gpu or int(getattr(exp.cfg, "cells_per_gpu", 0) or 0) or 1
    launcher = str(getattr(exp.cfg, "launcher", "none"))
    n = workers or int(getattr(exp.cfg, "workers", 0) or 0) or default_workers()
    fits = fits if fits is not None else _fits(exp, n, launcher)
    folders = list(dict.fromkeys([exp.out, *map(Path, record_folders), *record_sources(exp.cfg)]))
    cell_records, stage_records = _records(exp, folders)
    names = {t: exp.tasks[t].name for t in exp.cfg.tasks}
    splits: dict[str, dict[str, int] | None] = {name: task_splits(exp, name, t) for t, name in names.items()}
    for name in {r.get("task", "") for _, r in cell_records} | {t for t, _, _ in stage_records}:
        if name and name not in splits:
            splits[name] = task_splits(exp, name)
    inputs = {name: None if n is None else sum(n.values()) for name, n in splits.items()}
    stages = _stage_estimates(exp, stage_records, inputs, fits, as_new)
    estimates = []
    for c in cells:
        method = exp.method(c.task, c.method)
        estimates.append(Estimate.at(c.label, 0.0, "done") if c.status == "done" else dataclasses.replace(
            estimate_cell(names[c.task], c.method, method.settings(), cell_records, inputs, fits, splits,
                          method.cost_options()), label=c.label))
    launched = launcher in ("local", "slurm")  # separate one-process jobs
    command = fits.cpu_cells.parts.get("command", (0.0, 0.0))[0] if fits.cpu_cells and fits.device == "cpu" else 0.0
    ddp = not launched and str(getattr(exp.cfg, "parallel", "cells")) == "ddp"  # one cell at a time, on all workers
    return Plan(stages, estimates, n, per_gpu, fits.note, plan_disk(exp, cells, splits, 1 if ddp else n), command,
                launched, ddp)


def _fits(exp: GridView, workers: int, launcher: str) -> BenchFits:
    """This checkout's bench fits for :func:`plan_device`'s device, with a note of which, why, and the cores."""
    device, why = plan_device(exp.cfg)
    fits = BenchFits.load(device=device)
    fits.note = why + fits.text()
    if fits.device == "cpu":
        fits.cpu_threads = worker_threads(workers, launcher, getattr(exp.cfg, "slurm", None))
        if fits.thread_factor() > 1:
            fits.note += (f"; bench-priced CPU work x {fits.thread_factor():.3g}: each of the {workers} worker(s) "
                          f"computes on {fits.cpu_threads:.3g} core(s), the benches on {fits.bench_threads} "
                          "(a cell's own record: x the cores each of its processes had over that, at least 1)")
    return fits


def _records(exp: GridView, folders: list[Path]) -> tuple[list[tuple[str, dict[str, Any]]],
                                                           list[tuple[str, str, dict[str, Any]]]]:
    """The finished cells' records and the stages' cost records of ``folders``; a record whose seconds are no number
    (edited by hand; a folder run elsewhere) prices nothing."""
    cell_records = [(label, _timed_cell(record)) for label, record in
                    (("/".join(p.parent.parts[-3:]), read_json(p)) for out in folders for p in finished_cells(out))
                    if isinstance(record, dict)]
    stage_records = []
    for stage in dict.fromkeys([*STAGES, *exp.stages_needed()]):
        for out in folders:
            for path in sorted(out.glob(f"*/{stage}/{STAGE_COST_FILE}")):
                record = read_json(path) if (path.parent / STAGE_KEY_FILE).exists() else None
                if isinstance(record, dict) and _timed(record):
                    stage_records.append((path.parent.parent.name, stage, record))
    return cell_records, stage_records


def _stage_estimates(exp: GridView, records: list[tuple[str, str, dict[str, Any]]], inputs: dict[str, int | None],
                     fits: BenchFits, as_new: bool) -> list[Estimate]:
    from ...retrieval.cost_model import corpus_size

    corpus, out = corpus_size(exp.cfg.index), []
    for t in exp.cfg.tasks:
        name = exp.tasks[t].name
        out += [estimate_stage(name, stage, exp.stage_done(t, stage) and not as_new, records, inputs, fits,
                               planned.priced)
                for stage, planned in stage_plans(exp, t, inputs.get(name), corpus, fits).items()]
    return out


def plan_order(exp: GridView, cells: list[CellPlan], plan: Plan | None = None) -> list[CellPlan]:
    """``cells`` costliest first by the plan (what a first run, with no cost records yet, hands out first): trained
    methods (readers) before fixed rules, then by their planned seconds (unknown last), then in plan order."""
    from ...methods import get_method

    plan = plan if plan is not None else plan_costs(exp, cells)
    seconds = {e.label: e.seconds for e in plan.cells}

    def key(item: tuple[int, CellPlan]) -> tuple[int, float, int]:
        i, cell = item
        planned = seconds.get(cell.label)
        return (-int(get_method(cell.method).trained), -(planned if planned is not None else -1.0), i)

    return [c for _, c in sorted(enumerate(cells), key=key)]


__all__ = ["STAGES", "plan_costs", "plan_order"]
