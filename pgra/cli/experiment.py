"""``pgra experiment``: a grid of tasks x methods x seeds, resumable cell by cell, ending with the report.

The grid (:mod:`pgra.experiment`) runs the cells; the report (:mod:`pgra.evaluation.report`) reads their folders.
This command joins the two: the experiment layer never imports the evaluation layer above it.
"""

from __future__ import annotations

from .command import Command


def run_and_report(cfg, ctx=None) -> list:
    """Run the grid (or with ``dry_run`` print its plan); then, on the main process, when ``cfg.report`` and a
    cell finished, write results.md / results.json / results.html and print results.md. Returns the failed cells."""
    from pathlib import Path

    from ..experiment import run_experiment
    from ..experiment.layout import finished_cells
    from ..lock import is_main_launch

    if cfg.report and not cfg.dry_run:  # before anything runs: a report file pgra did not write is refused
        from ..evaluation.report import check_report_files

        check_report_files(Path(cfg.out))
    failed = run_experiment(cfg, ctx)
    main = ctx.is_main if ctx is not None else is_main_launch()
    if main and cfg.report and not cfg.dry_run and any(finished_cells(Path(cfg.out))):
        from ..evaluation.report import write_report

        md = write_report(Path(cfg.out), reference=cfg.reference)
        print(md.read_text(encoding="utf-8"))
    return failed


def run(cfg) -> int:
    return 1 if run_and_report(cfg) else 0


COMMAND = Command("experiment", "run a tasks x methods x seeds grid (resumable) and report it",
                  "pgra.analysis.config:AnalyzeConfig", run,
                  description="Run every method of the config on every task and seed into "
                              "OUT/<task>/<method>/seed-<n>/, reusing finished stages and cells and resuming a "
                              "killed one; --dry-run prints the plan with its expected cost. Ends with results.md "
                              "(pgra report).", writes="out")
