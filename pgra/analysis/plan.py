"""``pgra analyze --dry-run``: what the chosen analyses would run and hold on disk, priced as ``pgra experiment
--dry-run`` prices a grid; nothing run or written."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..experiment import Experiment
from ..experiment.config import cell_settings
from ..experiment.estimate import Estimate, format_bytes, format_seconds, plan_costs, task_inputs
from ..experiment.estimate.disk import DiskPlan, add_models
from ..methods import get_method, get_stage
from ..methods.reader_method import ReaderMethod
from ..rerank.prompt_guided.cost_model import cache_bytes, corpus_passed
from ..retrieval.cost_model import corpus_lines
from ..selection import STRATEGIES
from ..stages import PlanRequest
from ..storage.artifacts import MANIFEST
from .base import ANALYSES, Analysis
from .config import as_analyze_config
from .inputs import ExperimentRuns
from .variants import is_experiment


@dataclasses.dataclass
class Work:
    """What some part of the analyses runs: stage runs, cells (of which readers trained) and their estimates."""

    stages: int = 0
    cells: int = 0
    readers: int = 0
    reused: int = 0
    indexes: int = 0
    estimates: list[Estimate] = dataclasses.field(default_factory=list)
    disk: float = 0.0  # what its variant grids hold on disk, beyond the experiment's
    cache: float = 0.0  # the embedding caches of its rerankings
    models: list[str] = dataclasses.field(default_factory=list)  # the models it loads

    def add(self, other: Work) -> None:
        for f in ("stages", "cells", "readers", "reused", "indexes", "disk", "cache"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.estimates += other.estimates
        self.models += other.models

    @property
    def seconds(self) -> float:
        return sum(e.seconds for e in self.estimates if e.seconds is not None)

    @property
    def unknown(self) -> int:
        return sum(e.seconds is None for e in self.estimates)

    def hours(self, device: str) -> float:
        return sum(e.seconds for e in self.estimates if e.seconds is not None and e.device == device) / 3600

    def text(self) -> str:
        parts = [f"{self.stages} stage run(s)", f"{self.cells} cell(s) ({self.readers} reader(s) to train)"]
        if self.indexes:
            parts.append(f"{self.indexes} index(es) to build (not priced)")
        said = ", ".join(parts) + f": {format_seconds(self.seconds)} of work"
        if self.unknown:
            said += f" ({self.unknown} without an estimate, not counted)"
        return said


def variant_work(runs: ExperimentRuns, variant: Any) -> Work:
    """A variant grid's stages and cells still to run and their cost (none when all are the experiment's)."""
    main = runs.experiment
    planned = variant.plan()
    if is_experiment(runs, variant):
        return Work(reused=len(planned))
    plan = plan_costs(variant, planned, record_folders=(main.out,))
    todo = [c for c in planned if c.status != "done"]
    shared = {"candidates"} if variant.candidates_from is main else set()  # the experiment's own, run by its grid
    stages = [(t, s) for t in variant.cfg.tasks for s in variant.stages_needed()
              if s not in shared and not variant.stage_done(t, s)]
    names = {f"{variant.tasks[t].name}/{s}": t for t, s in stages}
    index = Path(variant.cfg.index.out)
    own = index != Path(main.cfg.index.out)
    disk = plan.disk  # less what is the experiment's: its index, candidates and (the same LM's) embedding cache
    return Work(stages=len(stages), cells=len(todo), readers=sum(issubclass(get_method(c.method), ReaderMethod) for c in todo),
                indexes=int(own and not (index / MANIFEST).exists()),
                estimates=[_cached_share(main, variant, names[e.label], e) for e in plan.stages if e.label in names]
                + [e for e in plan.cells if e.source != "done"],
                disk=disk.total - (0.0 if own else disk.index or 0.0) - sum(disk.stages.get(s, 0.0) for s in shared)
                - (disk.cache if variant.cfg.rerank.lm == main.cfg.rerank.lm else 0.0), models=list(disk.models))


def _cached_share(main: Any, variant: Any, task: str, e: Estimate) -> Estimate:
    """``e`` of a sweep point's reranking priced at its k beyond the experiment's (the cache holds the rest)."""
    if variant.candidates_from is not main or not e.label.endswith("/reranked") or e.seconds is None:
        return e
    mine, theirs = variant.rerank_config(task), main.rerank_config(task)
    if STRATEGIES[mine.demo_selection].per_query:
        return e
    retrieved = main.retrieve_config(task).k
    if dataclasses.replace(mine, k=0, top_d=1, out="") != dataclasses.replace(theirs, k=0, top_d=1, out=""):
        return e  # another prompt or LM: nothing of the experiment's cache is its
    k, k0 = mine.k or retrieved, theirs.k or retrieved
    share = max(k - k0, 0) / k if k else 1.0
    return dataclasses.replace(e, seconds=e.seconds * share,
                               source=f"{e.source}, x {share:.2f}: the candidates beyond the experiment's k={k0} "
                                      "(the rest from its embedding cache)")


def rerank_work(runs: ExperimentRuns, reranks: list[tuple[str, str, bool, Any]], grid: Any) -> Work:
    """Rerank runs outside any grid, priced as the experiment's own reranking, and their embedding caches."""
    own = {e.label: e for e in grid.stages}
    work = Work()
    for task, what, done, cfg in reranks:
        if done:
            continue
        base = own.get(f"{runs.task_name(task)}/reranked")
        seconds = None if base is None else base.seconds
        work.estimates.append(Estimate.at(f"{runs.task_name(task)}/{what}", seconds, "as the experiment's reranking",
                                          base.device if base is not None else "cpu"))
        work.cache += rerank_cache(runs, task, cfg)
        work.models.append(str(cfg.lm))
    work.stages = len(work.estimates)
    return work


def rerank_cache(runs: ExperimentRuns, task: str, cfg: Any) -> float:
    """The embedding cache a reranking of ``task`` with ``cfg`` fills (0 where unknown)."""
    exp = runs.experiment
    n, corpus = task_inputs(exp, runs.task_name(task), task), corpus_lines(exp.cfg.index)[0]
    texts = get_stage("reranked").plan(PlanRequest(
        cell_settings(exp.cfg, task), cfg, exp.retrieve_config(task).k, n, corpus, exp.stages_needed(),
        corpus_passed(cfg, Path(cfg.out), False, corpus))).texts
    return cache_bytes(cfg, texts + (n or 0))[0] if texts else 0.0


def plan_lines(runs: ExperimentRuns, chosen: list[Analysis]) -> list[str]:
    """The dry run's text: per analysis what it would run and its cost, then the total against the grid's."""
    main = runs.experiment
    grid = plan_costs(main, as_new=True)
    lines = [f"pgra analyze --dry-run: the analyses of {main.out} ({', '.join(a.name for a in chosen) or 'none'})"]
    if not main.out.exists():
        lines.append("  the experiment has not run: its cells are priced as planned, and none is reused")
    total = Work()
    for a in chosen:
        if a.variants is None and a.reranks is None:
            lines.append(f"  {a.name}: reads the experiment's files (a model it runs is a finished cell's, for "
                         "predictions only: not priced)")
            continue
        work, detail = Work(), []
        if a.reranks is not None:
            extra = rerank_work(runs, a.reranks(runs), grid)
            work.add(extra)
            detail += [f"    {e.label}: {e.text()}" for e in extra.estimates]
        for label, variant in (a.variants(runs) if a.variants is not None else []):
            part = variant_work(runs, variant)
            work.add(part)
            if not part.cells and not part.stages and part.reused:
                detail.append(f"    {label}: the experiment's own cells")
            else:
                detail.append(f"    {label}: {part.text()}")
        lines.append(f"  {a.name}: {work.text()}" + (f"; {work.reused} cell(s) are the experiment's own, reused"
                                                       if work.reused else ""))
        lines += detail
        total.add(work)
    grid_seconds = sum(e.seconds for e in grid.known)  # type: ignore[misc]
    ratio = f", {total.seconds / grid_seconds:.1f}x the experiment's grid" if grid_seconds else ""
    lines.append(f"analyses in all: {total.text()} ({total.hours('gpu'):.2f} GPU h, {total.hours('cpu'):.2f} CPU h)"
                 f"{ratio} ({format_seconds(grid_seconds)} of work for its {len(grid.cells)} cell(s) and "
                 f"{len(grid.stages)} stage(s), priced the same way as if none had run)")
    if grid.note:
        lines.append(f"fits: {grid.note}")
    return lines + disk_lines(total, grid.disk)


def disk_lines(work: Work, grid: Any) -> list[str]:
    """What the analyses hold on disk beyond the grid's ``DiskPlan``; nothing when they hold none."""
    models = DiskPlan(None, "", models=dict(grid.models))
    add_models(models, work.models)
    extra = {m: b for m, b in models.models.items() if m not in grid.models}
    if not (work.disk or work.cache or extra):
        return []
    lines = ["disk, estimated for the analyses (beyond the experiment's grid):"]
    if work.disk:
        lines.append(f"  their grids: {format_bytes(work.disk)} (stages, cells, caches and indexes of their own)")
    if work.cache:
        lines.append(f"  the embedding caches of their rerankings: up to {format_bytes(work.cache)} (x each LM's "
                     "hidden size x 4 B)")
    if extra:
        lines.append(f"  models: {format_bytes(sum(extra.values()))} ({'; '.join(models.models_text)})")
    added = work.disk + work.cache + sum(extra.values())
    everything = grid.total + sum(grid.models.values()) + added
    lines.append(f"  total: {format_bytes(added)}; with the grid's and its models: {format_bytes(everything)}")
    if models.unknown:
        lines.append(f"  not counted: {'; '.join(models.unknown)}")
    return lines


def rerank_disk_lines(cfg: Any) -> list[str]:
    """:func:`disk_lines` of the rerankings the config's analyses choose (``pgra experiment --dry-run``)."""
    if not cfg.analysis:
        return []
    cfg = as_analyze_config(cfg)
    runs = ExperimentRuns(Experiment(cfg), cfg.analysis.split)
    chosen = [ANALYSES[name] for name in ANALYSES if name in cfg.analysis.analyses]
    if not any(a.reranks is not None for a in chosen):
        return []
    grid, work = plan_costs(runs.experiment), Work()
    for a in chosen:
        if a.reranks is not None:
            work.add(rerank_work(runs, a.reranks(runs), grid))
    return disk_lines(work, grid.disk)


__all__ = ["Work", "disk_lines", "plan_lines", "rerank_disk_lines", "rerank_work", "variant_work"]
