"""``pgra experiment``: a grid of tasks x methods x seeds, resumable cell by cell, ending with the report.

The grid (:mod:`pgra.experiment`) runs the cells; the report (:mod:`pgra.evaluation.report`) reads their folders.
This command joins the two: the experiment layer never imports the evaluation layer above it.
"""

from __future__ import annotations

from .command import Command


def write_and_print_report(out, reference: str) -> None:
    """Write the grid's results.md / results.json / results.html and print results.md: what the job that finishes a
    grid last does (the experiment layer calls it, never importing the evaluation layer)."""
    from pathlib import Path

    from ..evaluation.report import write_report

    md = write_report(Path(out), reference=reference)
    print(md.read_text(encoding="utf-8"))


def run_and_report(cfg, ctx=None) -> list:
    """Run the grid (or with ``dry_run`` print its plan); the job that finishes it last writes the report when
    ``cfg.report`` (:func:`write_and_print_report`). Returns the failed cells."""
    from pathlib import Path

    from ..experiment import run_experiment

    if cfg.report and not cfg.dry_run:  # before anything runs: a report file pgra did not write is refused
        from ..evaluation.report import check_report_files

        check_report_files(Path(cfg.out))
    return run_experiment(cfg, ctx, report_writer=write_and_print_report if cfg.report else None)


def run(cfg) -> int:
    return 1 if run_and_report(cfg) else 0


COMMAND = Command("experiment", "run a tasks x methods x seeds grid (resumable) and report it",
                  "pgra.analysis.config:AnalyzeConfig", run,
                  description="Run every method of the config on every task and seed into "
                              "OUT/<task>/<method>/seed-<n>/, reusing finished stages and cells and resuming a "
                              "killed one; --dry-run prints the plan with its expected cost. Ends with results.md "
                              "(pgra report). Several runs (workers of --launcher, torchrun ranks, Slurm array tasks) "
                              "over one OUT share it: each stage and cell is claimed by one of them.",
                  writes="out", locks=False)
