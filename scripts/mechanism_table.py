"""PGRA's mechanism at laptop scale (issue 69), in the paper's Figure 4 layout: label consistency of the kept evidence
against the reranker LM's size, per task, evidence pool, k and d, from the committed bundles'
``docs/results/mechanism/*/analysis/analysis.json`` (``pgra analyze``'s ``consistency_controls`` table).

    python scripts/mechanism_table.py          # print the table (scripts/doc_figures.py writes it into the docs)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = "docs/results/mechanism"
POOLS = {"corpus": "labelled (training inputs)", "pseudo": "Wikipedia (pseudo-labels)"}


def rows(root: Path = ROOT, table: str = "consistency_controls") -> list[dict[str, Any]]:
    """Every row of ``table`` in every committed mechanism bundle, in bundle order (its LMs in their configured
    order)."""
    out = []
    for record in sorted((root / BUNDLES).glob("*/analysis/analysis.json")):
        out += json.loads(record.read_text(encoding="utf-8"))["tables"].get(table, [])
    return out


def _cell(r: dict[str, Any], name: str) -> str:
    return f"{100 * r[name]:.1f} [{100 * r[name + '_low']:.1f}, {100 * r[name + '_high']:.1f}]"


def _gain(r: dict[str, Any]) -> str:
    """The largest reranker over the first stage in points, starred where its paired bootstrap p < 0.05, and which
    LM that is (a bundle without one of the sizes has another largest)."""
    if "over_first" not in r:  # a table written before the column existed
        return ""
    star = "*" if r["over_first_p"] < 0.05 else ""
    return f"{100 * r['over_first']:+.1f}{star} ({r['lm']})"


def table(found: list[dict[str, Any]]) -> str:
    """One row per task, pool, k and d: the first stage's (FiD's) top d, the floor, each reranker LM's top d (in
    size order), the ceiling, and the largest LM over FiD; each share with its 2.5-97.5% bootstrap interval."""
    lms = list(dict.fromkeys(r["lm"] for r in found))
    head = ["task", "pool", "k", "d", "first stage (FiD)", "random (floor)", *lms, "oracle (ceiling)",
            "largest over FiD"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    seen = [(r["task"], r["labels"], r["k"], r["d"], r["lm"]) for r in found]
    if len(seen) != len(set(seen)):
        raise SystemExit("error: docs/results/mechanism: two bundles hold the same task, pool, k, d and LM")
    keys = dict.fromkeys((r["task"], r["labels"], r["k"], r["d"]) for r in found)
    for task, labels, k, d in keys:
        at = {r["lm"]: r for r in found if (r["task"], r["labels"], r["k"], r["d"]) == (task, labels, k, d)}
        any_row = next(iter(at.values()))
        largest = at[[lm for lm in lms if lm in at][-1]]
        cells = [task, POOLS.get(labels, labels), str(k), str(d), _cell(any_row, "first"), _cell(any_row, "random"),
                 *(_cell(at[lm], "reranker") if lm in at else "" for lm in lms), _cell(any_row, "oracle"),
                 _gain(largest)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _swap(r: dict[str, Any], name: str) -> str:
    """A swap of evidence against the reader's own, in points, with its 95% interval, starred where p < 0.05."""
    low, high = r[f"{name}_ci"]
    star = "*" if r[f"{name}_p"] < 0.05 else ""
    return f"{100 * r[f'{name}_delta']:+.1f}{star} [{100 * low:+.1f}, {100 * high:+.1f}]"


def ceiling_table(found: list[dict[str, Any]]) -> str:
    """The reader's ceiling (``pgra analyze``'s ``ceiling`` table): one row per task and pool, the FiD reader's
    accuracy with its own, oracle and anti-oracle evidence and each swap's difference from its own."""
    head = ["task", "pool", "k", "d", "reader (seed)", "own evidence", "oracle", "anti-oracle", "oracle - own",
            "anti-oracle - own"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        cells = [r["task"], POOLS.get(r["labels"], r["labels"]), str(r["k"]), str(r["d"]), f"{r['method']} ({r['seed']})",
                 *(f"{100 * r[name]:.1f}" for name in ("own", "oracle", "anti_oracle")),
                 _swap(r, "oracle"), _swap(r, "anti_oracle")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_ceiling(root: Path = ROOT) -> str:
    found = rows(root, "ceiling")
    if not found:
        return "(no bundle in docs/results/mechanism/ holds the reader's ceiling yet)"
    return ceiling_table(found)


def render(root: Path = ROOT) -> str:
    found = rows(root)
    if not found:
        return "(no mechanism bundle committed yet: docs/results/mechanism/ is empty)"
    return table(found)


if __name__ == "__main__":
    print(render())
    print()
    print(render_ceiling())
    sys.exit(0)
