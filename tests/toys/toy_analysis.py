"""A toy analysis: each method's accuracy on the short and the long half of the inputs (a plug-in, one file, with
its own options section ``analysis.toy_length``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pgra.analysis import Analysis
from pgra.analysis.writer import Writer, pct
from pgra.core.config import option


@dataclass
class LengthConfig:
    words: int = option(5, min=1, help="inputs with at most this many words are short")


def by_length(runs, ctx) -> list[dict[str, Any]]:
    words = runs.cfg.analysis.toy_length.words
    rows = []
    for task in runs.cfg.tasks:
        for method in runs.cfg.methods:
            seeds = runs.finished_seeds(task, method)
            if not seeds:
                continue
            lines = runs.predictions(task, method, seeds[0])
            for half, keep in (("short", lambda n: n <= words), ("long", lambda n: n > words)):
                sel = [x for x in lines if keep(len(x["text"].split()))]
                right = sum(x["prediction"] == x["label"] for x in sel)
                rows.append({"task": runs.task_name(task), "method": method, "half": half, "inputs": len(sel),
                             "accuracy": right / len(sel) if sel else None})
    return rows


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    w.tables["toy_length"] = rows
    w.md += ["## Accuracy by input length", "", "| task | method | half | inputs | accuracy (%) |",
             "|---|---|---|---|---|"]
    w.md += [f"| {r['task']} | {r['method']} | {r['half']} | {r['inputs']} | {pct(r['accuracy'])} |" for r in rows]
    w.md.append("")


ANALYSIS = Analysis("toy_length", compute=by_length, render=render, config=LengthConfig,
                    help="accuracy by input length")
