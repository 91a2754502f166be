"""``pgra analyze``: the analyses of an experiment as tables (markdown + JSON) and PNG figures in
``<experiment>/analysis/``, then ``results.md`` re-made."""

from __future__ import annotations

from typing import Any

from ..core.config import check_config
from ..core.errors import InputError
from ..evaluation.bundle import check_plan_records
from ..evaluation.page import FIGURES_FILE
from ..evaluation.report import check_report_files, write_report
from ..experiment import Experiment
from ..experiment.cell import recorded_config
from ..experiment.layout import finished_cells
from ..runtime.distributed import init_distributed
from ..storage.artifacts import library_versions, read_json, source_commit, write_json, write_text
from ..storage.ownership import claim_folder
from .base import ANALYSES
from .config import as_analyze_config
from .inputs import ExperimentRuns
from .plan import plan_lines
from .writer import Writer


def analyze(cfg, ctx=None) -> ExperimentRuns:
    """Run the configured analyses of ``cfg`` and write them (``cfg.dry_run``: print their plan instead)."""
    cfg = as_analyze_config(cfg)
    check_config(cfg)
    check_plan_records(cfg)  # the variants' plans may read them
    ctx = ctx or init_distributed()
    runs = ExperimentRuns(Experiment(cfg), cfg.analysis.split)
    chosen = [ANALYSES[name] for name in ANALYSES if name in cfg.analysis.analyses]
    if cfg.dry_run:  # what the analyses would run and cost; nothing run, nothing written
        if ctx.is_main:
            print("\n".join(plan_lines(runs, chosen)))
        return runs
    if not runs.experiment.out.exists():
        raise InputError(f"experiment folder {runs.experiment.out} does not exist: run `pgra experiment` first",
                         path=runs.experiment.out)
    if ctx.is_main:  # before any work: the analysis folder is pgra's, and the report it remakes is pgra's own
        claim_folder(runs.out, "analysis")
        check_report_files(runs.experiment.out)
    # analyses that run models run on every process (their stages shard); tables and figures on the main one
    results: dict[str, Any] = {a.name: a.compute(runs, ctx) for a in chosen if a.every_process}
    ctx.barrier()
    if not ctx.is_main:
        return runs
    results.update({a.name: a.compute(runs, ctx) for a in chosen if not a.every_process})
    write_analyses(runs, results, recorded_config(cfg))
    if any(finished_cells(runs.experiment.out)):
        write_report(runs.experiment.out, reference=cfg.reference)
    return runs


def write_analyses(runs: ExperimentRuns, results: dict[str, Any], config: dict[str, Any],
                   keep_previous: bool = True) -> None:
    """``analysis.md``, ``analysis.json`` and ``figures.json`` (``keep_previous``: with unchosen analyses')."""
    previous_file = runs.out / "analysis.json"
    previous = read_json(previous_file) if previous_file.exists() else {}
    kept = previous.get("tables", {}) if keep_previous else {}
    tables = {name: results.get(name, kept.get(name)) for name in ANALYSES if name in results or name in kept}
    now, read_before = runs.cell_idents(), (previous.get("cells") or {}) if keep_previous else {}
    w = Writer(runs)
    for name, rows in tables.items():
        if rows or (ANALYSES[name].render_empty and rows is not None):
            ANALYSES[name].render(w, rows)
    write_text(runs.out / "analysis.md", "\n".join(w.md) + "\n")
    # the cells each table read (a kept table: what its run read), so that a stale table is never bundled as current
    cells = {name: now if name in results else read_before.get(name) for name in tables}
    write_json(runs.out / "analysis.json", {"split": runs.split, "analyses": list(w.tables), "tables": w.tables,
                                            "figures": w.figures, "cells": cells, "config": config,
                                            "git_commit": source_commit(), "versions": library_versions()})
    # the figures pgra drew before (the earlier analysis.json names them) that no table drew now: a table not kept,
    # or a task or method the analyses no longer read (a kept table is drawn again, so its figures stay)
    drawn = {f["file"] for f in w.figures}
    for old in previous.get("figures") or []:
        name = str(old.get("file", "")) if isinstance(old, dict) else ""
        if name.endswith(".png") and "/" not in name and name not in drawn:
            (runs.out / name).unlink(missing_ok=True)
    pages = [{"file": "analysis.md", "title": "Analyses (all tables)"}]
    if "case_study" in w.tables:
        pages.append({"file": "case_study.md", "title": "Case study"})
    write_json(runs.out / FIGURES_FILE, {"figures": w.figures, "pages": pages})


__all__ = ["FIGURES_FILE", "analyze", "write_analyses"]
