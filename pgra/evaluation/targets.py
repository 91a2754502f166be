"""Published numbers to reproduce (``pgra report DIR --compare FILE``): each cell's mean beside the paper's, with
whether the difference is outside the file's tolerance."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..core.config import load_yaml
from ..core.errors import InputError, shorten
from ..core.markdown import md_row, md_table, md_text

PAPER = "paper"  # --compare paper: configs/paper/targets.yaml of this source checkout
OUTSIDE = "†"  # the mark of a cell outside the tolerance
VERDICT = {True: "✓", False: "✗"}  # a task reproduced within the tolerance, or not
_TOP_KEYS = {"source", "tolerance", "methods"}


def paper_targets_path() -> Path:
    """``configs/paper/targets.yaml`` beside the ``pgra`` package (a source checkout or an editable install)."""
    return Path(__file__).resolve().parents[2] / "configs" / "paper" / "targets.yaml"


def _tolerance(value: Any, path: Path, field: str) -> float | None:
    if value is None:
        return None
    try:  # an integer past float's range is no tolerance either (float() overflows)
        points = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:
        points = math.inf
    if not math.isfinite(points) or points < 0:
        raise InputError(f"a tolerance is a number of points >= 0 or null, not {shorten(value)}", path=path,
                         field=field)
    return points


def load_targets(spec: str | Path, tolerance: float | None = None) -> dict[str, Any]:
    """Read a targets file (``paper``: the packaged paper's) as ``{"file", "source", "methods": {method: {task:
    {"value", "tolerance"}}}}``; ``tolerance`` (points) overrides every value's."""
    path = paper_targets_path() if str(spec) == PAPER else Path(spec)
    if not path.is_file():
        raise InputError("targets file not found" + (" (--compare paper reads configs/paper/targets.yaml of a "
                                                     "source checkout: pass that file's path)" if str(spec) == PAPER
                                                     else ""), path=path, field="compare")
    data = load_yaml(path)
    if unknown := sorted(set(data) - _TOP_KEYS):
        raise InputError(f"unknown key(s) {unknown} (allowed: {sorted(_TOP_KEYS)})", path=path, field=unknown[0])
    source = data.get("source")
    if source is not None and not isinstance(source, str):
        raise InputError(f"a source is text, not {shorten(source)}", path=path, field="source")
    default = _tolerance(data.get("tolerance"), path, "tolerance")
    methods = data.get("methods")
    if not isinstance(methods, dict) or not methods:
        raise InputError("'methods' must map method names to {task: value}", path=path, field="methods")
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for method, per_task in methods.items():
        if not isinstance(method, str) or not method.strip():
            raise InputError(f"a method name is non-empty text, not {shorten(method)}", path=path, field="methods")
        if not isinstance(per_task, dict) or not per_task:
            raise InputError("must map task names to values", path=path, field=f"methods.{method}")
        for task, entry in per_task.items():
            if not isinstance(task, str) or not task.strip():
                raise InputError(f"a task name is non-empty text, not {shorten(task)}", path=path,
                                 field=f"methods.{method}")
            field = f"methods.{method}.{task}"
            tol = default
            if isinstance(entry, dict):
                extra = sorted(set(entry) - {"value", "tolerance"})
                if extra or "value" not in entry:
                    raise InputError("an entry is a number or {value, tolerance}", path=path, field=field)
                tol = _tolerance(entry.get("tolerance"), path, f"{field}.tolerance")
                entry = entry["value"]
            if isinstance(entry, bool) or not isinstance(entry, (int, float)) or not -100 <= entry <= 100:
                raise InputError(f"a value is a number in percent (-100 .. 100), not {shorten(entry)}", path=path,
                                 field=field)
            out.setdefault(method, {})[task] = {
                "value": float(entry), "tolerance": tolerance if tolerance is not None else tol}
    return {"file": str(path), "source": source or "", "methods": out}


def compare(report: dict[str, Any], targets: dict[str, Any]) -> dict[str, Any]:
    """The report's ``compare`` section: every (method, task) with both a target and a result here."""
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    missing = []
    for method, per_task in targets["methods"].items():
        ours = report["summary"].get(method, {})
        same_tasks = set(report["tasks"]) == set(per_task) - {"average"}
        for task, target in per_task.items():
            if task not in ours or (task == "average" and not same_tasks):  # an average of other tasks differs
                missing.append(f"{method}/{task}")
                continue
            mean = 100 * ours[task]["mean"]
            diff = mean - target["value"]
            tol = target["tolerance"]
            cells.setdefault(method, {})[task] = {
                "paper": target["value"], "ours": round(mean, 4), "difference": round(diff, 4), "tolerance": tol,
                "outside": None if tol is None else abs(diff) > tol + 1e-9}
    return {"file": targets["file"], "source": targets["source"], "cells": cells, "not_run": missing,
            "verdicts": verdicts(cells)}


def verdicts(cells: dict[str, dict[str, dict[str, Any]]]) -> dict[str, bool | None]:
    """Per task: True when every method is within tolerance, False when one is outside, None: no tolerance."""
    out: dict[str, bool | None] = {}
    for per_task in cells.values():
        for task, c in per_task.items():
            if c["outside"] is None:
                out.setdefault(task, None)
            else:
                out[task] = (out.get(task) is not False) and not c["outside"]
    return out


def format_comparison(report: dict[str, Any]) -> list[str]:
    """The markdown section of ``results.md`` for ``report["compare"]`` (none without it)."""
    if not (comp := report.get("compare")):
        return []
    lines = ["", f"## Against the published numbers ({md_text(comp['file'])})", ""]
    if comp["source"]:  # the file's own text: escaped, so it shows as written and never becomes markup
        lines += [f"Source: {md_text(comp['source'])}.", ""]
    if not comp["cells"]:
        return [*lines, "No method and task of this grid has a published number in the file."]
    tasks = [t for t in report["tasks"] if any(t in per for per in comp["cells"].values())]
    columns = tasks + (["average"] if any("average" in per for per in comp["cells"].values()) else [])
    lines += ["Each cell: ours − published, in points (the published value); "
              f"{OUTSIDE} outside the tolerance.", "", *md_table(["method", *columns], [])]
    lines += [md_row([m, *("–" if (c := comp["cells"][m].get(t)) is None else
                           f"{c['difference']:+.1f} ({c['paper']:.1f}){' ' + OUTSIDE if c['outside'] else ''}"
                           for t in columns)]) for m in report["methods"] if m in comp["cells"]]
    verdict = comp.get("verdicts") or verdicts(comp["cells"])
    if any(v is not None for v in verdict.values()):
        lines.append(md_row(["**reproduced**", *(VERDICT.get(verdict.get(t), "–") for t in columns)]))
    tolerances = {c["tolerance"] for per in comp["cells"].values() for c in per.values()}
    if tolerances == {None}:
        lines += ["", "No tolerance: the source gives no run-to-run spread, so no cell is marked (set one in the "
                      "file or with --tolerance)."]
    else:
        known = sorted(t for t in tolerances if t is not None)
        lines += ["", "Tolerance: ±" + ", ±".join(f"{t:g}" for t in known) + " points"
                  + ("; cells without one are not marked." if None in tolerances else ".")]
    outside = sum(bool(c["outside"]) for per in comp["cells"].values() for c in per.values())
    if outside:
        lines += [f"{outside} cell(s) outside the tolerance."]
    if any(v is not None for v in verdict.values()):
        lines += ["", f"reproduced: {VERDICT[True]} every method of the task within its tolerance, {VERDICT[False]} "
                      "one or more outside (– no tolerance). Where the cells ran: results.json's `environment`, and "
                      "the environment section below (a reproduction log to contribute with the table)."]
    return lines


__all__ = ["OUTSIDE", "PAPER", "VERDICT", "compare", "format_comparison", "load_targets", "paper_targets_path", "verdicts"]
