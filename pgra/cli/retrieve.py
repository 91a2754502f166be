"""``pgra retrieve``: the first-stage top-k candidates for every input of a task."""

from __future__ import annotations

from pathlib import Path

from ..storage.artifacts import read_json
from .command import Command, run_distributed


def run(cfg) -> None:
    from ..retrieval.candidates_stage import retrieve

    ctx, out = run_distributed(retrieve, cfg)
    if ctx.is_main:
        counts = read_json(Path(out) / "manifest.json")["counts"]
        print(f"candidates ready: {out} (top-{cfg.k}; " + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")


COMMAND = Command("retrieve", "stage 1b: top-k candidates for every input of a task",
                  "pgra.retrieval.retrieve:RetrieveConfig", run, writes="out")
