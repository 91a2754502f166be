"""The rerankers compared on the demo's MR (docs/rerankers.md, issue 71), from the committed records: the bundle's
``docs/results/rerankers-mr/analysis/analysis.json`` (``pgra analyze``'s *Rerankers compared* rows: label
consistency, overlap with the first stage, promoted) and ``docs/results/rerankers-mr-intervals.json``
(bench/rerankers_bootstrap.py ``--json``: each share's paired bootstrap interval, the difference from the first
stage and the mean first-stage rank kept).

    python scripts/rerankers_table.py          # print the table (scripts/doc_figures.py writes it into the page)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = "docs/results/rerankers-mr"
INTERVALS = "docs/results/rerankers-mr-intervals.json"
FIRST = "first stage"
HEAD = ["reranker", "label consistency (%)", "95% interval", "vs first stage (points, 95% interval)",
        "overlap with first stage (%)", "promoted (%)", "mean first-stage rank kept"]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _name(r: dict[str, Any]) -> str:
    """``first stage: FiD's top d``, else the reranker's ``rerank.reranker`` value and how the analysis names it."""
    return f"first stage: FiD's top {r['d']}" if r["reranker"] == FIRST else f"`{r['reranker']}`: {r['source']}"


def table(compared: list[dict[str, Any]], intervals: list[dict[str, Any]]) -> str:
    """One row per reranked stage, in the analysis's order: its label consistency (the analysis's, which the
    bootstrap's must equal to the digit shown), its interval, its paired difference from the first stage, its overlap
    with the first stage's top d, the share promoted and the mean first-stage rank of what it keeps."""
    boot = {r["reranker"]: r for r in intervals}
    if set(boot) != {r["reranker"] for r in compared}:
        raise SystemExit(f"error: {INTERVALS}: its rerankers {sorted(boot)} are not the analysis's "
                         f"{sorted(r['reranker'] for r in compared)}")
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in compared:
        b = boot[r["reranker"]]
        if _pct(b["share"]) != _pct(r["share"]):
            raise SystemExit(f"error: {INTERVALS}: {r['reranker']}'s label consistency {_pct(b['share'])} is not "
                             f"the analysis's {_pct(r['share'])} (made from another run?)")
        vs = "—" if r["reranker"] == FIRST else (f"{100 * b['vs_first']:+.1f} ({100 * b['vs_first_low']:+.1f} to "
                                                 f"{100 * b['vs_first_high']:+.1f})")
        cells = [_name(r), _pct(r["share"]), f"{_pct(b['share_low'])}–{_pct(b['share_high'])}", vs,
                 _pct(r["overlap"]), _pct(r["promoted"]), f"{b['mean_rank_kept']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(root: Path = ROOT) -> str:
    record = root / BUNDLE / "analysis" / "analysis.json"
    if not record.is_file():
        return f"(no bundle {BUNDLE} committed yet)"
    compared = json.loads(record.read_text(encoding="utf-8"))["tables"].get("rerankers", [])
    intervals = json.loads((root / INTERVALS).read_text(encoding="utf-8"))["rows"]
    return table(compared, intervals)


if __name__ == "__main__":
    print(render())
    sys.exit(0)
