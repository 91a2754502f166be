"""Cost-aware comparison: what each method's score cost (its cells plus the shared stages it needs, in one device's
seconds and FLOPs), and which methods another beats on both (*dominated*)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.markdown import md_text
from ..experiment.layout import CELL_FILE, STAGE_COST_FILE, STAGE_KEY_FILE
from ..methods import get_method
from ..results.predictions import read_cell
from ..runtime.cost import (
    cost_problem,
    device_seconds,
    estimated_flops,
    finite_number,
    local_folder,
    merge_work,
    parameter_counts,
)
from ..storage.artifacts import MANIFEST, read_json, read_json_object, read_utf8
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .plots import pareto
from .writer import Writer, mean_or_none, number, pct


def stage_cost(runs: ExperimentRuns, task: str, stage: str) -> dict[str, Any] | None:
    """The cost record of a task's stage folder, when it belongs to the stage's current build."""
    return _stage_cost(runs.stage_dir(task, stage))


def _stage_cost(folder: Path) -> dict[str, Any] | None:
    path, key = folder / STAGE_COST_FILE, folder / STAGE_KEY_FILE
    if not (path.exists() and key.exists()):
        return None
    record = checked_cost(read_json(path), path, timed=True)
    return record if record.get("stage_key") == read_utf8(key, "stage key").strip() else None


def checked_cost(record: Any, path: Path, field: str = "", timed: bool = False) -> dict[str, Any]:
    """``record`` when it is a readable cost record, else an InputError naming ``path`` and the field."""
    if (problem := cost_problem(record, timed)) is not None:
        where = ".".join(p for p in (field, problem[0]) if p)
        raise InputError(f"{problem[1]} (edited by hand?)", path=path, field=where or None)
    return record


def _corpus_pass(folder: Path) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """A built stage's record of the task's whole-corpus pass and its manifest; None without a well-formed one."""
    path = folder / MANIFEST
    if not (path.is_file() and (folder / STAGE_KEY_FILE).is_file()):
        return None
    manifest = read_json_object(path)
    record = manifest.get("corpus_pass")
    cache = manifest.get("embedding", {}).get("cache") if isinstance(manifest.get("embedding"), dict) else None
    numbers = isinstance(record, dict) and all(finite_number(record.get(k, 0))
                                               for k in ("seconds", "tokens_run", "cached_before"))
    return (record, manifest) if numbers and record.get("mode") == "corpus" and cache else None  # type: ignore[union-attr]


def borrowed_pass(runs: ExperimentRuns, task: str, stages: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``(stage, cost record)`` of a corpus pass one of ``stages`` read from another stage's cache; else None."""
    for stage in stages:
        folder = runs.stage_dir(task, stage)
        mine = _corpus_pass(folder)
        if mine is None or not mine[0].get("cached_before"):
            continue
        for other in sorted(p for p in folder.parent.iterdir() if p.is_dir() and p.name not in stages):
            theirs = _corpus_pass(other)
            if theirs is None or theirs[1]["embedding"]["cache"] != mine[1]["embedding"]["cache"] or \
                    theirs[0].get("cached_before") or not theirs[0].get("tokens_run"):
                continue
            cost = _stage_cost(other) or {}
            lm = str(theirs[1].get("lm", ""))
            parameters = next((w.get("parameters") for w in cost.get("work") or [] if w.get("model") == lm
                               and w.get("parameters")), None)
            work = {"model": lm, "part": "all", "mode": "forward", "tokens": int(theirs[0]["tokens_run"]),
                    **({"parameters": parameters} if parameters else {})}
            return other.name, {"elapsed_s": float(theirs[0].get("seconds") or 0.0), "work": [work],
                                "hardware": cost.get("hardware"),
                                **{k: cost[k] for k in ("processes", "devices") if k in cost}}
    return None


def stages_needed(method: str) -> list[str]:
    """The shared stages whose work a method's score depends on."""
    cls = get_method(method)
    if cls.data == "full_search":  # no first stage: the search of the whole corpus only
        return ["full_search"]
    stage = cls.data  # a reranker's top d, a plug-in's stage (over the candidates)
    return (["candidates"] if cls.evidence == "corpus" else []) + ([stage] if stage != "candidates" else [])


class _Params:
    """Parameter counts per model, read once from the model folders here (none on results alone: ``lookup``)."""

    def __init__(self, lookup: bool = True) -> None:
        self.lookup = lookup
        self.cache: dict[str, dict[str, int] | None] = {}

    def __call__(self, work: list[dict[str, Any]]) -> dict[str, dict[str, int] | None]:
        for w in work:
            if w["model"] not in self.cache:
                self.cache[w["model"]] = parameter_counts(local_folder(w["model"])) if self.lookup else None
        return self.cache


def method_cost(runs: ExperimentRuns, task: str, method: str, params: _Params) -> dict[str, Any] | None:
    """One row: the method's score and what it cost (cell mean over seeds plus the stages it needs)."""
    if not (seeds := runs.finished_seeds(task, method)):
        return None
    paths = [runs.cell(task, method, s) / CELL_FILE for s in seeds]
    cells = [read_cell(p) for p in paths]
    for c, p in zip(cells, paths, strict=True):  # read as the file holds them (a bundle's cell is its sender's)
        checked_cost({"elapsed_s": c.get("elapsed_s", 0.0)}, p)
        if c.get("cost") is not None:
            checked_cost(c["cost"], p, "cost")
    costs = [c.get("cost") for c in cells]
    recorded = all(c is not None for c in costs)
    cell_seconds = [device_seconds({**(c.get("cost") or {}), "elapsed_s": c.get("elapsed_s", 0.0)}) for c in cells]
    stages = {s: stage_cost(runs, task, s) for s in stages_needed(method)}
    borrowed = borrowed_pass(runs, task, list(stages))
    if borrowed is not None:  # the corpus pass it read, which another stage ran and recorded: counted in full
        stages[f"{borrowed[0]} (its corpus pass)"] = borrowed[1]
    stage_seconds = sum(device_seconds(c) for c in stages.values() if c)
    cell_flops: list[float | None] = [estimated_flops(c["work"], params(c["work"])) if c else None for c in costs]
    stage_flops = [estimated_flops(c["work"], params(c["work"])) if c else None for c in stages.values()]
    known = recorded and all(f is not None for f in cell_flops + stage_flops) and all(stages.values())
    cell_tokens = [sum(w["tokens"] for w in c["work"]) for c in costs if c]
    stage_work = merge_work([c["work"] for c in stages.values() if c])
    values = runs.metric_values(task, method)
    return {"task": runs.task_name(task), "method": method, "seeds": seeds, "metric": mean_or_none(values),
            "elapsed_s": mean_or_none(cell_seconds) + stage_seconds if all(stages.values()) else None,
            "cell_elapsed_s": mean_or_none(cell_seconds),
            "stage_elapsed_s": stage_seconds, "stages": [s for s, c in stages.items() if c],
            "missing_stages": [s for s, c in stages.items() if not c],
            "tokens": (mean_or_none(cell_tokens) or 0) + sum(w["tokens"] for w in stage_work)
            if recorded and all(stages.values()) else None,
            "flops": (mean_or_none([f for f in cell_flops if f is not None]) or 0.0) + sum(f or 0.0 for f in stage_flops)
            if known else None,
            "work": {"cells": [c["work"] for c in costs if c], "stages": stage_work},
            "hardware": next((c.get("hardware") for c in costs if c), None),
            "resumed": any(c.get("resumed") for c in costs if c)}


def dominated(rows: list[dict[str, Any]], cost_key: str) -> dict[str, list[str]]:
    """Per method of one task, the methods that score at least as well for at most its ``cost_key``."""
    ok = [r for r in rows if r["metric"] is not None and r.get(cost_key) is not None]
    out: dict[str, list[str]] = {}
    for r in ok:
        out[r["method"]] = [o["method"] for o in ok if o is not r and o["metric"] >= r["metric"]
                            and o[cost_key] <= r[cost_key] and (o["metric"] > r["metric"] or o[cost_key] < r[cost_key])]
    return out


def cost_table(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """Every (task, method) row with its cost and the methods that dominate it by FLOPs and by seconds."""
    params = _Params(lookup=runs.reads_model_folders)
    out = []
    for task in runs.cfg.tasks:
        rows = [r for m in runs.cfg.methods if (r := method_cost(runs, task, m, params)) is not None]
        by_flops, by_time = dominated(rows, "flops"), dominated(rows, "elapsed_s")
        for r in rows:
            r["dominated_by_flops"] = by_flops.get(r["method"])
            r["dominated_by_time"] = by_time.get(r["method"])
        out += rows
    return out



def _cells(r: dict[str, Any]) -> tuple[Any, ...]:
    """A cost row's cells in the table."""
    dom = (lambda xs: "–" if xs is None else (", ".join(xs) or "no"))  # noqa: E731
    tokens = "–" if r["tokens"] is None else f"{r['tokens']:,.0f}"
    seconds = "–" if r["elapsed_s"] is None else f"{r['elapsed_s']:,.0f}"
    stages = f"{r['stage_elapsed_s']:,.0f}" if r["stages"] else "–" if r["missing_stages"] else "0"
    seconds += " (resumed)" if r.get("resumed") else ""
    return (r["task"], r["method"], pct(r["metric"]), seconds, stages, tokens, number(r["flops"], ".2e"),
            dom(r["dominated_by_flops"]), dom(r["dominated_by_time"]))


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    w.section("cost", rows, "Cost",
              ("What each score cost: the method's cell (mean over seeds) plus the shared stages it needs (retrieval "
               "for the readers of corpus evidence, reranking for PGRA), counted in full. FLOPs: 2 x parameters per "
               "forward token and 6 x per trained token, from the tokens every model ran and its parameter count "
               "(attention over the sequence left out; `–`: a model or stage without a record; `(resumed)`: a cell resumed "
               "after a stop records the work after it only). Seconds are one device's: a stage several processes or "
               "GPUs built together counts its wall-clock times their number. Dominated: another "
               "method scores at least as well for at most the cost (by FLOPs; by seconds)."),
              ["task", "method", "metric (%)", "seconds (one device)", "of which stages", "tokens", "est. FLOPs", "dominated (FLOPs)", "dominated (time)"],
              _cells)
    hardware = {str(r["hardware"]) for r in rows if r.get("hardware")}
    w.md += [f"Hardware: {md_text('; '.join(sorted(hardware))) or 'not recorded'}.", ""]  # as the records hold it
    for task in dict.fromkeys(r["task"] for r in rows):
        sel = [r for r in rows if r["task"] == task]
        use_flops = all(r["flops"] is not None for r in sel)
        key, dom_key = ("flops", "dominated_by_flops") if use_flops else ("elapsed_s", "dominated_by_time")
        points = [(r["method"], r[key], r["metric"], bool(r[dom_key])) for r in sel
                  if r["metric"] is not None and r[key] is not None]
        if not points:
            continue
        path = pareto(w.runs.out / f"cost_{task}.png", points, f"Score against cost: {task}",
                      "estimated FLOPs" if use_flops else "seconds (one device)", f"{w.runs.split} metric (%)")
        w.figure(path, f"Cost ({task})", f"{w.runs.split} metric against "
                 f"{'estimated FLOPs' if use_flops else 'seconds (one device)'} per method on {task} (hollow: "
                 "dominated by another method).")


register_analysis(Analysis("cost", compute=lambda runs, ctx: cost_table(runs), render=render, reads="results"))


__all__ = ["cost_table", "dominated", "method_cost", "stage_cost", "stages_needed"]
