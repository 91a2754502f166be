"""``pgra experiment``: a grid of tasks x methods x seeds, resumable cell by cell, ending with the report."""

from __future__ import annotations

from .command import Command


def run(cfg) -> int:
    from ..experiment import run_experiment

    failed = run_experiment(cfg)
    return 1 if failed else 0


COMMAND = Command("experiment", "run a tasks x methods x seeds grid (resumable) and report it",
                  "pgra.analysis.config:AnalyzeConfig", run,
                  description="Run every method of the config on every task and seed into "
                              "OUT/<task>/<method>/seed-<n>/, reusing finished stages and cells and resuming a "
                              "killed one; --dry-run prints the plan. Ends with results.md (pgra report). Several runs (workers of --launcher, torchrun ranks, Slurm array "
                              "tasks) over one OUT share it: each stage and cell is claimed by one of them.",
                  writes="out", locks=False)
