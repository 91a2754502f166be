"""The laptop experiment's table, built by merging its committed results bundles (issue 51).

    python scripts/laptop_table.py            # print the table
    python scripts/laptop_table.py --write    # and remake docs/results/laptop/merged/ and the docs' copies

Every bundle under ``docs/results/laptop/`` (one task's seed or seeds per run, made apart) is merged by
``pgra report`` (cells refused unless their settings agree); the table gives per task the test accuracy (mean ±
standard deviation over seeds), each method's difference from FiD with its paired-bootstrap p-value and the
Holm-adjusted one over every task x method comparison, ``≈`` where the difference is below the minimum detectable
effect, and that effect. ``--write`` also remakes the merged report (``results.md``, ``results.json`` and the
analyses that need only results) in ``docs/results/laptop/merged/`` and replaces the table between the
``<!-- laptop-table -->`` markers of README.md and docs/experiments.md; ``tests/test_laptop_table.py`` checks that
those copies are what the bundles give.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = ROOT / "docs" / "results" / "laptop"
MERGED = BUNDLES / "merged"
DOCS = (  # the copies of the table
    ROOT / "README.md",
    ROOT / "docs" / "experiments.md",
)
START, END = "<!-- laptop-table -->", "<!-- /laptop-table -->"
PIECE = re.compile(r"(?P<task>.+)-seed(?P<seed>\d+)(?:-[a-z0-9]+)?")  # a bundled piece of the grid: a task's seed
BOOTSTRAP, SEED = 10000, 0  # pgra report's defaults: the merged report's numbers
ANALYSES = ("differences", "calibration", "cost")


def bundles(folder: Path = BUNDLES) -> list[Path]:
    """The results bundles of the grid's pieces under ``folder`` (``<task>-seed<n>``, or ``<task>-seed<n>-<part>`` for
    a seed run in parts: a sub-folder whose manifest says kind ``bundle``), by name, relative to the repository (the
    merged report names its sources so). An analyses bundle (``<task>-analyses``) is read on its own."""
    from pgra.evaluation.bundle import is_bundle

    return sorted(p.relative_to(ROOT) for p in folder.iterdir()
                  if p.is_dir() and PIECE.fullmatch(p.name) and is_bundle(p))


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def _score(row: dict[str, Any] | None) -> str:
    if not row:
        return "–"
    if row.get("seed_independent"):
        return f"{_pct(row['mean'])} (det.)"
    if row["n"] == 1:
        return f"{_pct(row['mean'])} (1)"
    return f"{_pct(row['mean'])} ± {_pct(row['std'])} ({row['n']})"


def _difference(sig: dict[str, Any] | None) -> str:
    if not sig or sig.get("p_value") is None:
        return "–"
    star = "*" if sig["p_holm_all"] < 0.05 else ""
    below = " ≈" if sig.get("below_resolution") else ""
    return f"{100 * sig['delta']:+.1f} ({_p(sig['p_value'])}, Holm {sig['p_holm_all']:.3f}){star}{below}"


def table(report: dict[str, Any]) -> list[str]:
    """The compact table of a merged report (``build_report``'s dict): a line per method."""
    from pgra.core.markdown import md_table

    tasks, ref = report["tasks"], report["reference"]
    header = ["method", *tasks, *(f"Δ vs {ref}, {t}" for t in tasks), f"MDE {' / '.join(tasks)}"]
    rows = []
    for method in report["methods"]:
        summary, sig = report["summary"].get(method, {}), report["significance"].get(method, {})
        mde = [sig.get(t, {}).get("mde") for t in tasks]
        rows.append([method, *(_score(summary.get(t)) for t in tasks),
                     *("reference" if method == ref else _difference(sig.get(t)) for t in tasks),
                     "" if method == ref else " / ".join("–" if m is None else f"{100 * m:.1f}" for m in mde)])
    return md_table(header, rows)


def provenance(sources: list[Path]) -> list[str]:
    """A line per bundle: its cells, the commit they ran at, the CPU and the date it was bundled."""
    lines = []
    for src in sources:
        m = json.loads((ROOT / src / "manifest.json").read_text(encoding="utf-8"))
        env, cells = m.get("environment") or {}, m.get("cells_environment") or {}
        commits = ", ".join(c["value"][:7] for c in cells.get("git_commits", []))
        cpu = env.get("cpu") or {}
        lines.append(f"- `{src.as_posix()}`: {m.get('cells')} cells, run at {commits}, "
                     f"{cpu.get('cores')} cores of an {cpu.get('model')} (torch at {env.get('torch_cpu_capability')}), "
                     f"bundled {str(m.get('created', ''))[:10]}")
    return lines


def _precision(sources: list[Path]) -> str:
    """The readers' mixed precision as the bundles' cells recorded it (``no``: fp32)."""
    values = sorted({str(v["value"]) for src in sources
                     for v in (json.loads((ROOT / src / "manifest.json").read_text(encoding="utf-8"))
                               .get("cells_environment") or {}).get("reader_precision", [])})
    named = [("fp32" if v == "no" else v) for v in values]
    return f"readers in {' and '.join(named) or 'an unrecorded precision'}"


def block(report: dict[str, Any], sources: list[Path]) -> str:
    """What goes between the markers: the table, then where each bundle ran."""
    n = {t: max((r["n"] for m in report["methods"] if (r := report["summary"].get(m, {}).get(t))), default=0)
         for t in report["tasks"]}
    seeds = ", ".join(f"{t} {k} seed{'s' if k != 1 else ''}" for t, k in n.items())
    intro = (f"Test accuracy (%), mean ± std over seeds ({seeds}; `(det.)`: seed-independent, one run), "
             f"{_precision(sources)}; Δ vs {report['reference']}: paired bootstrap ({report['bootstrap']['n_resamples']} resamples), "
             "Holm-adjusted over every task x method comparison, `*` significant after it, `≈` below the minimum "
             "detectable effect (MDE, points, α = 0.05, power 0.8). Built by `python scripts/laptop_table.py` "
             "from the committed bundles:")
    return "\n".join([intro, "", *table(report), "", *provenance(sources)])


def build(sources: list[Path]) -> dict[str, Any]:
    from pgra.evaluation.report import build_report

    return build_report(sources, n_resamples=BOOTSTRAP, seed=SEED)


def replace_block(text: str, new: str, path: Path) -> str:
    if text.count(START) != 1 or text.count(END) != 1:
        raise SystemExit(f"{path}: needs one {START} and one {END} marker")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{new}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="remake the merged report and the docs' copies")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the sources are relative to the repository
    sources = bundles()
    report = build(sources)
    text = block(report, sources)
    print(text)
    if args.write:
        from pgra.analysis.results import analyze_results
        from pgra.evaluation.report import write_report

        merged = MERGED.relative_to(ROOT)
        analyze_results(sources, merged, list(ANALYSES))
        write_report(merged, sources=sources, n_resamples=BOOTSTRAP, seed=SEED)
        for path in DOCS:
            path.write_text(replace_block(path.read_text(encoding="utf-8"), text, path), encoding="utf-8")
        print(f"written: {MERGED} and the tables in {', '.join(str(p.relative_to(ROOT)) for p in DOCS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
