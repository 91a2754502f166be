"""``pgra analyze``: the paper's analyses of an experiment, as tables and PNG figures next to ``results.md``."""

from __future__ import annotations

from .command import Command, run_distributed


def run(cfg) -> int:
    from ..analysis.run import analyze
    from ..experiment.config import apply_limit

    # under torchrun every rank meets the main one's end before the group is torn down: a rank leaving while the
    # main one still wrote tables aborted at exit ("terminate called without an active exception")
    _, runs = run_distributed(analyze, apply_limit(cfg))  # --limit N: the smoke run's folder, OUT-limitN
    if not cfg.dry_run and runs.experiment.out.exists() and (runs.out / "analysis.md").exists():
        print(f"analyses written to {runs.out} (analysis.md; figures indexed in "
              f"{runs.experiment.out / 'results.md'})")
    return 0


COMMAND = Command("analyze", "the paper's analyses of an experiment: tables and PNG figures",
                  "pgra.analysis.config:AnalyzeConfig", run,
                  description="Read a finished experiment (the same config as `pgra experiment`) and write its "
                              "analyses into OUT/analysis/: label consistency, k and d sweeps, retriever "
                              "comparison, where FiD and PGRA differ, a case study (analysis.analyses chooses; "
                              "analysis.FIELD=... sets them). Sweeps and other retrievers run what they need, "
                              "reusing the experiment's stages, cells and embedding cache. --dry-run prints what the "
                              "analyses would run (grids, rerankings, readers to train) and its cost, and runs "
                              "nothing.")
