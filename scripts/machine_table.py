"""The demo's and the suite's times, and the demo's table, on every CPU measured: rendered from the committed record
``docs/results/machines.json`` into docs/experiments.md (between the ``<!-- machine-times -->`` and
``<!-- demo-rows -->`` markers), the one place the other pages link to.

    python scripts/machine_table.py            # print both tables
    python scripts/machine_table.py --write    # and replace them in docs/experiments.md

scripts/doc_figures.py renders these two blocks with every other figure of the docs (``--write``, ``--check``).

Add a run to the record (its CPU, the level it was held to, the commit, the seconds), then ``--write``;
``tests/test_machine_table.py`` fails while the page differs from the record.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "results" / "machines.json"
PAGE = ROOT / "docs" / "experiments.md"
BLOCKS = ("machine-times", "demo-rows")


def _duration(seconds: float | None) -> str:
    return "–" if seconds is None else f"{int(seconds) // 60} min {int(seconds) % 60} s"


def times_table(record: dict[str, Any]) -> str:
    """One row a measured run: what, CPU, the level it was held to, its times, its commit and date, its cores."""
    lines = ["| run | CPU | held to | after set-up | with set-up | commit, date | cores | result |",
             "|---|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        lines.append(f"| `make {r['what']}` | {r['cpu']} | {r['level']} | "
                     f"{_duration(r['after_setup_s'])} | {_duration(r['with_setup_s'])} | {r['commit']}, "
                     f"{r['date']} | {r['cores']} | {r.get('result', 'rc 0')} |")
    cpus = "; ".join(f"**{k}**: {v}" for k, v in record["cpus"].items())
    levels = "; ".join(f"**{k}**: {v}" for k, v in record["levels"].items())
    return "\n".join(lines) + f"\n\nCPUs: {cpus}.\n\nLevels: {levels}."


def _holds(values: list[float], dtypes: list[str]) -> str:
    """Where a row is the same: on every CPU measured, on every fp32 run, or nowhere (the spread it showed)."""
    fp32 = [v for v, t in zip(values, dtypes, strict=True) if t == "fp32"]
    if len(set(values)) == 1:
        return "every CPU measured"
    spread = f"{max(values) - min(values):.1f}"
    if len(set(fp32)) == 1:
        return f"every fp32 run (the LMs in bf16 move it: {spread} points)"
    return f"no: rounding moves it by up to {spread} points"


def rows_table(record: dict[str, Any]) -> str:
    """The demo's table on each CPU, with where each row is the same."""
    demo = record["demo_tables"]
    columns = demo["columns"]
    heads = [f"{c['cpu']} {c['level']} ({c['dtype']}, {c['commit']})" for c in columns]
    lines = ["| method | " + " | ".join(heads) + " | the same on |", "|---" * (len(columns) + 2) + "|"]
    for method, values in demo["rows"].items():
        cells = " | ".join(f"{v:.1f}" for v in values)
        lines.append(f"| {method} | {cells} | {_holds(values, [c['dtype'] for c in columns])} |")
    return "\n".join(lines)


def render(record: dict[str, Any]) -> dict[str, str]:
    return {"machine-times": times_table(record), "demo-rows": rows_table(record)}


def replace_blocks(text: str, blocks: dict[str, str], page: str = PAGE) -> str:
    """``text`` (of ``page``) with each ``<!-- name -->`` ... ``<!-- /name -->`` block replaced by its table."""
    for name, table in blocks.items():
        start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
        pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"error: {page}: no {start} ... {end} block")
        replacement = f"{start}\n{table}\n{end}"
        text = pattern.sub(lambda _m, r=replacement: r, text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the tables in docs/experiments.md")
    args = ap.parse_args()
    blocks = render(json.loads(RECORD.read_text(encoding="utf-8")))
    print("\n\n".join(blocks.values()))
    if args.write:
        PAGE.write_text(replace_blocks(PAGE.read_text(encoding="utf-8"), blocks), encoding="utf-8")


if __name__ == "__main__":
    main()
