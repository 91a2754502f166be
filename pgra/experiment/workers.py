"""How one job runs its share of a grid: the index, the stages, then the cells, each under a claim
(:mod:`pgra.experiment.claims`), so that any number of jobs over one experiment folder finish it together.

Under N processes the index and the stages split their work over all ranks (rank 0 holds their claim); the cells
then run side by side (``parallel: cells``: every rank claims cells on its own and runs each in a child process
that looks like a single process, :mod:`pgra.experiment.cell_process`) or one after another as one DDP job
(``parallel: ddp``), costliest first (:func:`cost_order`). The rules (waiting, taking over, the report by the last
job): docs/beyond-one-machine.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.config import to_dict
from ..core.errors import PgraError
from ..methods import get_method
from ..runtime.device import local_device_index, ranks_per_node, stage_partner_alive
from ..runtime.distributed import DistContext, gather_objects, main_computes, stage_context
from ..storage.artifacts import read_json, write_text
from ..storage.lock import fs_now, release_dead_writers
from .cell import report_failure, say
from .cell_process import (
    cell_gpu_need,
    cells_sharing_a_gpu,
    check_gpu_sharing,
    ended,
    release_gpu_memory,
    restore_torch_threads,
    single_process_env,
    torch_threads,
    visible_devices,
    wait_for_gpu_memory,
)
from .claims import CHILD_MODULE, WORKER_ENV, is_claimed, try_claim
from .layout import CellPlan, cell_status, finished_cells, mark_seed_independent


def cost_order(cells: list[CellPlan], out: Path, experiment: Any = None,
               planned: dict[str, int] | None = None) -> list[CellPlan]:
    """``cells`` costliest first, deterministically: trained methods (readers) before fixed rules, then by what the
    method's finished cells in ``out`` took (their ``cell.json`` ``elapsed_s``, mean), then in plan order. A first
    run (no finished cell yet) of ``experiment`` goes by the dry run's plan instead
    (:func:`pgra.experiment.estimate.plan_order`), or by plan order where nothing can be priced. ``planned``: a
    job's memo of that plan's ranks (label -> place), priced once per job, not at every poll of its loop."""
    spent: dict[str, list[float]] = {}
    for path in finished_cells(out):
        try:
            record = read_json(path)
        except (OSError, ValueError, PgraError):
            continue
        if isinstance(record.get("elapsed_s"), (int, float)):
            spent.setdefault(str(record.get("method")), []).append(float(record["elapsed_s"]))
    if not spent and experiment is not None:
        from .estimate import plan_order

        if planned is None or any(c.label not in planned for c in cells):
            try:
                ranks = {c.label: i for i, c in enumerate(plan_order(experiment, cells))}
            except (OSError, ValueError, PgraError):  # no fits or no data to price them with: the order below
                ranks = {}
            if planned is not None:
                planned.update(ranks)
            planned = ranks
        if planned:
            return sorted(cells, key=lambda c: planned.get(c.label, len(planned)))

    def cost(item: tuple[int, CellPlan]) -> tuple[int, float, int]:
        i, cell = item
        seconds = spent.get(cell.method, [])
        return (-int(get_method(cell.method).trained), -(sum(seconds) / len(seconds) if seconds else 0.0), i)

    return [c for _, c in sorted(enumerate(cells), key=cost)]



class GridRun:
    """One job's run of an experiment's grid (every rank of the job builds one and calls :meth:`run`)."""

    def __init__(self, experiment, ctx: DistContext) -> None:
        self.exp, self.ctx, self.cfg = experiment, ctx, experiment.cfg
        self.cells_mode = ctx.world_size > 1 and self.cfg.parallel == "cells"
        self.started = fs_now(Path(experiment.out))  # on the clock that stamps the error.log files it compares
        self.threads = torch_threads()  # what a cell's fresh child process starts with too
        self.failed: list[CellPlan] = []
        self._said: set[str] = set()
        self._watch = None  # the watch claim (leave_held_cells), while this job is the one that waits
        self._planned: dict[str, int] = {}  # a first run's planned order (cost_order), priced once

    @property
    def stale_after(self) -> float:
        return self.cfg.claim_stale_after_s

    def run(self) -> list[CellPlan]:
        """Build (or wait for) the index, then every task's stages and cells; the cells this job saw fail."""
        return run_pooled([self])

    # ----- the watch over cells other jobs hold -----
    def _leave_held_cells(self) -> bool:
        """With nothing left to claim but cells other live jobs hold: whether this job leaves them to those jobs
        (:func:`leave_held_cells`); never while it is the job that watches them."""
        if self._watch is not None:
            return False
        self._watch, leave = leave_held_cells(self.exp.out, self.stale_after)
        if not leave:
            say(self.ctx, "cells left, each held by another live job: this job waits to take over those whose job "
                          f"dies (up to wait_s, {self.cfg.wait_s:.0f} s)")
        return leave

    def _stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    # ----- the index and the stages (all ranks together; rank 0 holds the claim) -----
    def _claim_on_main(self, target: Path, label: str, done=lambda: False, stage: bool = False) -> tuple[str, list]:
        """Rank 0 claims ``target``: ``("run", [claim])`` (the claim on rank 0 only), ``("held", [])`` or
        ``("done", [])`` when ``done()`` holds once claimed (another job finished it meanwhile). A ``stage`` is
        also ``held`` by the local worker that took this worker's GPU first, while it runs
        (:func:`pgra.runtime.device.stage_partner_alive`: one stage's models on a GPU at a time)."""
        box: list = []

        def decide() -> str:
            if done():
                return "done"
            if stage and self.ctx.world_size == 1 and stage_partner_alive():
                return "held"
            try:
                stack = try_claim(target, label, self.stale_after)
            except OSError:  # a read-only shared folder: nothing to claim (the stage's own lock still guards it)
                return "run"
            if stack is None:
                return "held"
            if done():
                stack.close()
                return "done"
            box.append(stack)
            return "run"

        return main_computes(self.ctx, decide), box

    def index(self) -> None:
        from ..retrieval.build import build_index

        target = Path(self.cfg.index.out)
        say(self.ctx, f"index {target}")
        deadline = time.monotonic() + self.cfg.wait_s
        while True:
            decision, claim = self._claim_on_main(target, f"index {target}")
            if decision == "run":
                try:
                    work = stage_context(self.ctx)  # one rank per GPU loads the encoder
                    if work is not None:
                        build_index(replace(self.cfg.index, show_progress=self.cfg.show_progress), work)
                    if work is not self.ctx:
                        self.ctx.barrier()
                finally:
                    for stack in claim:
                        stack.close()
                return
            if time.monotonic() > deadline:
                raise PgraError(f"the index {target} is still being built by another job after "
                                f"{self.cfg.wait_s:.0f} s")
            self._say_once(f"index {target}: being built by another job, waiting")
            time.sleep(self.cfg.claim_poll_s)

    def stages(self, task: str) -> str:
        """Build (or reuse) ``task``'s stages: ``ready``, ``held`` (another job builds one) or ``failed``."""
        exp = self.exp
        try:
            for stage in exp.stages_needed():  # whether it is done is rank 0's word too (another job may finish
                decision, claim = self._claim_on_main(exp.stage_dir(task, stage), f"{task} {stage}",  # it meanwhile)
                                                      lambda s=stage: exp.stage_done(task, s), stage=True)
                if decision == "held":
                    self._say_once(f"[{exp._task_name(task)}] {stage}: being built by another job")
                    return "held"
                if decision == "done":
                    self._say_once(f"[{exp._task_name(task)}] {stage}: done, reused")
                    continue
                try:
                    exp.build_stage(task, stage, self.ctx)
                finally:
                    for stack in claim:
                        stack.close()
        except Exception as e:  # the grid goes on with the next task
            if self.ctx.world_size > 1:
                raise
            report_failure(f"[{exp._task_name(task)}] stages", e)
            self.failed += [c for c in exp.plan([task]) if c.status != "done"]
            return "failed"
        return "ready"

    # ----- cells -----
    def cells(self, tasks: list[str]) -> tuple[int, int]:
        """Run the cells of ``tasks`` that no job finished, holds or (since this job started) saw fail: how many
        this job ran, and how many other jobs held."""
        ran = held = 0
        if not tasks:
            return ran, held

        def listed() -> list[tuple[CellPlan, bool]]:  # (cell, whether it is done), those not failed lately
            return [(c, c.status == "done") for c in cost_order(self.exp.plan(tasks), self.exp.out, self.exp,
                                                               self._planned)
                    if c.status == "done" or not self._failed_lately(c)]

        # a DDP job's ranks run each cell together: rank 0 lists them (another job may finish one meanwhile)
        together = not self.cells_mode and self.ctx.world_size > 1
        for cell, done in main_computes(self.ctx, listed) if together else listed():
            if done:
                self._reused(cell)
                continue
            claimed = self._run_alone(cell) if self.cells_mode else self._run_together(cell)
            ran += claimed is True
            held += claimed is None
        return ran, held

    def _reused(self, cell: CellPlan) -> None:
        if cell.label in self._said:
            return
        self._said.add(cell.label)
        say(self.ctx, f"[{cell.label}] done, reused")
        if (self.ctx.is_main or self.cells_mode) and cell.seed_independent:
            mark_seed_independent(cell.directory)

    def _failed_lately(self, cell: CellPlan) -> bool:
        """Whether the cell failed since this job started (here or in another job): not retried by this job."""
        log = cell.directory / "error.log"
        try:
            return log.stat().st_mtime >= self.started
        except OSError:
            return False

    def _claim_cell(self, cell: CellPlan):
        """The cell's claim and its status now: ``(None, None)`` when another job holds it, ``(None, cell)`` when
        another job finished it or saw it fail meanwhile."""
        stack = try_claim(cell.directory, cell.label, self.stale_after)
        if stack is None:
            return None, None
        status = cell_status(cell.directory, cell.key)
        if status == "done" or self._failed_lately(cell):
            stack.close()
            return None, cell
        return stack, replace(cell, status=status)

    def _run_together(self, cell: CellPlan) -> bool | None:
        """One cell run by every rank of this job (one process, or one DDP job); rank 0 holds the claim. True when
        it ran, None when another job holds it, False when another finished it meanwhile."""
        box: list = []

        def decide():
            stack, now = self._claim_cell(cell)
            if stack is None:
                return None if now is None else "gone"
            box.append(stack)
            return now.status

        status = main_computes(self.ctx, decide)
        if status is None or status == "gone":
            return None if status is None else False
        if self.ctx.world_size == 1:  # a single process runs the cell on its GPU: one of several sharing it?
            short = self._gpu_short(cell)
            if short is not None:
                for stack in box:
                    stack.close()
                self._not_started(cell, short)
                return True
        try:
            restore_torch_threads(self.threads)  # a stage's library may have changed them (numba's OpenMP does)
            self.exp.run_cell(replace(cell, status=status), self.ctx)
        except Exception as e:  # the grid goes on with the next cell
            if self.ctx.world_size > 1:
                raise
            report_failure(f"[{cell.label}]", e, cell.directory)
            self.failed.append(cell)
        finally:
            for stack in box:
                stack.close()
        return True

    def _run_alone(self, cell: CellPlan) -> bool | None:
        """One cell run by this rank alone, in a child process that sees no process group and one device (returns
        as :meth:`_run_together`)."""
        stack, now = self._claim_cell(cell)
        if stack is None:
            return None if now is None else False
        with stack, tempfile.TemporaryDirectory(prefix="pgra-cell-") as tmp:
            spec = Path(tmp) / "cell.json"
            spec.write_text(json.dumps({**experiment_payload(self.exp), "cell": {
                "task": cell.task, "method": cell.method, "seed": cell.seed, "key": cell.key}}))
            devices = visible_devices()
            env = single_process_env(local_device_index(len(devices)) if devices else None,
                                     os.environ.get(WORKER_ENV) or f"rank {self.ctx.rank}")
            release_gpu_memory()  # the stages' models and cached blocks: the child needs the GPU's memory
            short = self._gpu_short(now, released=True)
            if short is not None:
                self._not_started(cell, short)
                return True
            code = subprocess.run([sys.executable, "-m", CHILD_MODULE, "cell", str(spec)],
                                  env=env).returncode
            if code != 0 and cell.directory.is_dir():  # while the claim is held: a child killed alone (the OOM
                for path in release_dead_writers(cell.directory):  # killer) left its output lock fresh
                    print(f"[{now.label}] released {path}, the lock its process left", file=sys.stderr, flush=True)
        if code != 0:
            log = cell.directory / "error.log"
            if not self._failed_lately(cell):  # killed before it could say why
                cell.directory.mkdir(parents=True, exist_ok=True)
                write_text(log, f"the cell's process {ended(code)}\n")
            print(f"[{now.label}] failed (see {log})", file=sys.stderr, flush=True)
            self.failed.append(cell)
        return True

    def _gpu_short(self, cell: CellPlan, released: bool = False) -> str | None:
        """Before ``cell`` starts on this process's GPU (:func:`pgra.runtime.device.local_device_index`): None when it may
        start (no CUDA; a GPU of its own without ``cell_gpu_gb``; enough memory free, at once or after waiting),
        else why not (:func:`wait_for_gpu_memory`). A rank's GPU is shared by the node's ranks beyond its GPUs
        (``LOCAL_WORLD_SIZE``); a local worker's by the workers its launcher gave the same GPU (their count
        raises its ``cells_per_gpu``: :func:`pgra.experiment.launch.local_workers`)."""
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            return None
        gpus = torch.cuda.device_count()
        processes = ranks_per_node() if self.ctx.world_size > 1 else None
        sharing = cells_sharing_a_gpu(self.cfg.cells_per_gpu, processes, gpus)
        if sharing == 1 and not self.cfg.cell_gpu_gb:  # before any CUDA call: no context made for nothing
            return None
        if not released:
            release_gpu_memory()  # what this process's stages left counts as free: it frees it before the cell
        index = local_device_index(gpus)
        need = cell_gpu_need(torch.cuda.mem_get_info(index)[1], sharing, self.cfg.cell_gpu_gb)
        if need is None:
            return None
        return wait_for_gpu_memory(index, need, self.cfg.claim_poll_s, self.cfg.wait_s, cell.label)

    def _not_started(self, cell: CellPlan, reason: str) -> None:
        """``cell`` failed before it started (its GPU's memory): said, kept in its ``error.log``, not retried by
        this job."""
        cell.directory.mkdir(parents=True, exist_ok=True)
        write_text(cell.directory / "error.log", reason + "\n")
        print(f"[{cell.label}] not started: {reason}", file=sys.stderr, flush=True)
        self.failed.append(cell)

    # ----- the end -----
    def finish(self) -> None:
        """The report, written by the last job to finish (no live claim left on a stage or cell), and the list of
        this job's failures."""
        exp, ctx = self.exp, self.ctx
        if self.cells_mode:  # a job's ranks end together: one whose cell failed exits 1, and torchrun would then
            ctx.barrier()  # kill the rank writing the report; so the ranks meet, rank 0 reports for the job,
        try:               # and the others wait for it (the gather below) before any rank exits
            if ctx.is_main:
                report_if_last(exp)
        finally:
            own = list(self.failed)
            if self.cells_mode:  # rank 0 comes here once its report is written (or failed); every rank then
                seen = {str(c.directory) for c in own}  # knows the job's failures, and says its own
                for theirs in gather_objects(ctx, own):
                    self.failed += [c for c in theirs if str(c.directory) not in seen]
                    seen.update(str(c.directory) for c in theirs)
        if own:
            print(f"{len(own)} cell(s) failed:", file=sys.stderr)
            for c in own:
                print(f"  {c.label} (see {c.directory / 'error.log'})", file=sys.stderr)

    def _say_once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            say(self.ctx, message)


def report_if_last(exp) -> None:
    """The report of ``exp``, written with its ``report_writer`` (the command's; none: no report) when a cell has
    finished and no job holds a claim on a stage or cell any more: the job that finishes last writes it (a worker
    job, or the command that waited for its local workers)."""
    writer, stale_after = exp.report_writer, exp.cfg.claim_stale_after_s
    if writer is None or not any(finished_cells(exp.out)) or _others_busy(exp, stale_after):
        return
    report = try_claim(exp.out / "report", "the report", stale_after)
    if report is not None:
        with report:
            writer(exp.out, exp.cfg.reference)


def _others_busy(exp, stale_after: float) -> bool:
    for task in exp.cfg.tasks:
        if any(is_claimed(exp.stage_dir(task, s), f"{task} {s}", stale_after) for s in exp.stages_needed()):
            return True
    return any(is_claimed(c.directory, c.label, stale_after) for c in exp.plan() if c.status != "done")



def run_pooled(grids: list[GridRun]) -> list[CellPlan]:
    """Run several grids as one job (every rank calls it with the same grids, in the same order): each grid's index
    and stages in turn, all ranks together, then the cells of all of them as one pool, so that under ``parallel:
    cells`` a rank whose grid has no cell left claims another grid's (an analysis's one-cell variants, such as the
    sweep's points, run side by side rather than one rank at a time). Returns the cells this job saw fail."""
    if not grids:
        return []
    first = grids[0]
    ctx, cfg = first.ctx, first.cfg
    check_gpu_sharing(first)
    try:
        for g in grids:
            g.index()
        todo = [(g, task) for g in grids for task in g.cfg.tasks]
        ready: dict[GridRun, list[str]] = {g: [] for g in grids}
        waited_since = time.monotonic()
        while True:
            _build_stages(todo, ready)
            ran, holding = 0, {}  # the grids with cells other live jobs hold: how many
            for g in grids:
                r, h = g.cells(ready[g])
                ran += r
                if h:
                    holding[g] = h
            if not todo and not holding:
                break
            if todo and ctx.world_size > 1:  # the ranks go back to the stages together
                ran = any(gather_objects(ctx, ran))
            if ran:  # time passed: what others held may be free (or their holder dead) now
                waited_since = time.monotonic()
                continue
            # only cells left, every one held by a live job: a single-process job (an array task, a submitit or
            # local worker) leaves them to those jobs, releasing its GPUs, unless it is the one job that stays to
            # take over the cells of jobs that die (the ranks of a torchrun job end together, so they wait)
            if not todo and ctx.world_size == 1 and all([g._leave_held_cells() for g in holding]):
                print(f"{sum(holding.values())} cell(s) left, each held by another live job (another job waits "
                      "to take over those whose job dies): left to them", flush=True)
                break
            if _gave_up(first, todo, holding, time.monotonic() - waited_since):
                break
            time.sleep(cfg.claim_poll_s)
        for g in grids:
            g.finish()
        return [c for g in grids for c in g.failed]
    finally:
        for g in grids:
            g._stop_watching()


def _build_stages(todo: list[tuple[GridRun, str]], ready: dict[GridRun, list[str]]) -> None:
    """Build the stages of the (grid, task) pairs in ``todo`` in turn, removing each one built (``ready``) or failed;
    from a grid whose stage another job builds on, the later grids' wait for it (a sweep's smaller k find the
    largest's embeddings in the cache)."""
    held_grid = None
    for g, task in list(todo):
        if held_grid is not None and g is not held_grid:
            break
        state = g.stages(task)
        if state != "held":
            todo.remove((g, task))
        else:
            held_grid = g
        if state == "ready":
            ready[g].append(task)


def _gave_up(first: GridRun, todo: list, holding: dict[GridRun, int], waited: float) -> bool:
    """With nothing to claim, whether to stop waiting for the stages and cells other jobs hold (taking over those
    whose job died) after ``waited`` seconds, said in one line; decided on rank 0 while ranks still build stages or
    run cells together."""
    ctx, wait_s = first.ctx, first.cfg.wait_s
    together = todo or (ctx.world_size > 1 and not first.cells_mode)  # a DDP job's ranks leave together
    if not (main_computes(ctx, lambda: waited > wait_s) if together else waited > wait_s):
        return False
    if todo:
        tasks = ", ".join(dict.fromkeys(task for _, task in todo))
        print(f"the stages of {tasks} (held by other jobs, or waiting behind a grid's they hold) still not built "
              f"after {wait_s:.0f} s: left to them", flush=True)
    else:
        print(f"{sum(holding.values())} cell(s) still held by other jobs after {wait_s:.0f} s: left to them",
              flush=True)
    return True


WATCH = "held-cells"  # the watch claim: <out>/.held-cells.claim


def leave_held_cells(out: Path, stale_after: float | None):
    """For a job with nothing left to claim while other live jobs hold the remaining cells: ``(watch, leave)``.
    The first such job takes the watch claim (``watch``, to close when it ends; ``leave`` False): it waits, up to
    ``wait_s``, to take over the cells of jobs that die (on another host once their heartbeat is
    ``claim_stale_after_s`` old), and the job that finishes last writes the report. Every other such job gets
    ``(None, True)``: it ends now, releasing its GPUs, instead of waiting up to ``wait_s`` (a day by default) for
    cells it cannot claim. A watcher that dies is replaced by the next job to run out of cells (its claim is
    taken over like a cell's). Single-process jobs only: a torchrun job's ranks end together (its allocation is
    held until the last one ends), and such a job waits as before."""
    watch = try_claim(out / WATCH, "the watch over cells other jobs hold", stale_after)
    return watch, watch is None


def experiment_payload(exp) -> dict[str, Any]:
    """What a child process needs to rebuild ``exp``: its config (and that of the experiment whose candidates it
    reads), by class and value, and the plug-ins registered here. Not the report writer: the command that launched
    the workers writes the report after them (:func:`report_if_last`), or hands its writer to the Slurm jobs."""
    def config(cfg) -> dict[str, Any]:
        return {"class": f"{type(cfg).__module__}:{type(cfg).__qualname__}", "values": to_dict(cfg)}

    source = exp.candidates_from
    return {"config": config(exp.cfg), "candidates_from": None if source is None else config(source.cfg),
            "plugins": {kind: registry.plug_ins() for kind, registry in part_registries().items()}}


def part_registries() -> dict[str, Any]:
    """The registries whose parts a grid's jobs and cells look up (methods, stages, rerankers, strategies,
    retrievers), by kind."""
    from ..methods import METHODS
    from ..rerank.base import RERANKERS
    from ..retrieval.base import RETRIEVERS
    from ..selection.registered import STRATEGIES
    from ..stages import STAGES

    return {"method": METHODS, "stage": STAGES, "reranker": RERANKERS, "strategy": STRATEGIES, "retriever": RETRIEVERS}


__all__ = ["WATCH", "GridRun", "cost_order", "experiment_payload", "leave_held_cells", "part_registries",
           "report_if_last", "run_pooled"]
