"""Where FiD and PGRA differ: the overlap of their evidence (``overlap@d``) against their predictions, and the
first-stage rank of every sentence the reranker keeps."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..core.markdown import md_table
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .plots import grouped_bars, histogram
from .writer import Writer, pct


def overlap_at_d(a: list[Any], b: list[Any], d: int) -> float:
    """``|a[:d] ∩ b[:d]| / d`` (ids compared as strings)."""
    return len({str(x) for x in a[:d]} & {str(x) for x in b[:d]}) / d


def overlap_table(pairs: list[tuple[dict[str, Any], dict[str, Any]]], d: int) -> dict[str, Any]:
    """Per overlap of (FiD, PGRA) line pairs: inputs and how many differ in prediction; mean overlaps."""
    bins: dict[int, list[int]] = {j: [0, 0] for j in range(d + 1)}  # shared sentences -> [inputs, differing]
    agree, differ = [], []
    for fid, pgra in pairs:
        shared = round(overlap_at_d(fid["evidence"], pgra["evidence"], d) * d)
        different = fid["prediction"] != pgra["prediction"]
        bins[shared][0] += 1
        bins[shared][1] += int(different)
        (differ if different else agree).append(shared / d)
    rows = [{"overlap": j / d, "shared": j, "inputs": n, "differing": k, "share_differing": k / n if n else None}
            for j, (n, k) in bins.items()]
    mean = (lambda xs: sum(xs) / len(xs) if xs else None)  # noqa: E731
    return {"d": d, "pairs": len(pairs), "rows": rows, "mean_overlap": mean(agree + differ),
            "mean_overlap_agreeing": mean(agree), "mean_overlap_differing": mean(differ),
            "differing": len(differ)}


def rank_shift(records: list[dict[str, Any]], d: int) -> dict[str, Any]:
    """The first-stage ranks of the reranked top ``d``: histogram, mean, share promoted from beyond top ``d``."""
    ranks = [int(c["retrieval_rank"]) for rec in records for c in rec.get("ctxs", [])[:d]]
    hist = Counter(ranks)
    return {"d": d, "kept": len(ranks), "histogram": {r: hist[r] for r in sorted(hist)},
            "mean_rank": sum(ranks) / len(ranks) if ranks else None,
            "promoted": sum(r > d for r in ranks) / len(ranks) if ranks else None}


def _pairs(runs: ExperimentRuns, task: str, method: str) -> tuple[list[int], list[tuple[dict, dict]]]:
    """The seeds FiD and ``method`` both finished, and their lines of the same input as (FiD, method) pairs."""
    seeds = [s for s in runs.finished_seeds(task, "fid") if s in runs.finished_seeds(task, method)]
    pairs = []
    for seed in seeds:
        fid = {str(x["id"]): x for x in runs.predictions(task, "fid", seed)}
        pairs += [(fid[str(x["id"])], x) for x in runs.predictions(task, method, seed) if str(x["id"]) in fid]
    return seeds, pairs


def method_differences(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """Per task: the overlap table of FiD and PGRA (over the seeds both finished) and PGRA's rank shift."""
    out = []
    for task in runs.cfg.tasks:
        seeds, pairs = _pairs(runs, task, "pgra")
        d = runs.n_passages(task, "pgra")
        row: dict[str, Any] = {"task": runs.task_name(task), "seeds": seeds}
        if pairs and d:  # (d = 0: no evidence read, nothing to overlap)
            row["overlap"] = overlap_table(pairs, d)
        if "reranked" in runs.reranked_stages():  # a bundle keeps no stage data: no rank shift
            row["rank_shift"] = rank_shift(list(runs.stage_records(task, "reranked").values()), d)
        others = {}
        for reranker, stage, method in runs.other_rerankers():  # the grid's other rerankers, each against FiD
            d_m = runs.n_passages(task, method)
            both, pairs = _pairs(runs, task, method)
            others[method] = {"reranker": reranker, "seeds": both,
                              **({"rank_shift": rank_shift(list(runs.stage_records(task, stage).values()), d_m)}
                                 if stage in runs.reranked_stages() else {}),
                              **({"overlap": overlap_table(pairs, d_m)} if pairs and d_m else {})}
        if others:  # (a grid of the prompt-guided reranker alone: rows as before)
            row["rerankers"] = others
        out.append(row)
    return out


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    w.tables["differences"] = rows
    w.md += ["## Where FiD and PGRA differ", ""]
    if not any(r.get("overlap") or r.get("rank_shift") for r in rows):
        w.md += ["Nothing to compare: the experiment has no finished fid and pgra cells of a shared seed.", ""]
    overlap_series: dict[str, list[float]] = {}
    overlap_notes: dict[str, list[str]] = {}
    groups: list[str] = []
    for r in rows:
        if o := r.get("overlap"):
            d = o["d"]
            w.md += [f"**{r['task']}** (seeds {', '.join(map(str, r['seeds']))}; {o['pairs']} input-seed pairs): mean "
                     f"overlap@{d} {pct(o['mean_overlap'])}% — {pct(o['mean_overlap_agreeing'])}% where the "
                     f"predictions agree, {pct(o['mean_overlap_differing'])}% where they differ "
                     f"({o['differing']} pairs).", "",
                     *md_table([f"overlap@{d}", "inputs", "predictions differ", "share differing (%)"],
                               ([f"{b['shared']}/{d}", b["inputs"], b["differing"], pct(b["share_differing"])]
                                for b in o["rows"]))]
            w.md.append("")
            groups = [f"{b['shared']}/{d}" for b in o["rows"]]
            overlap_series[r["task"]] = [b["share_differing"] if b["share_differing"] is not None else float("nan")
                                         for b in o["rows"]]
            overlap_notes[r["task"]] = [f"{b['differing']}/{b['inputs']}" for b in o["rows"]]
        s = r.get("rank_shift")
        if s:  # histogram keys are strings once read back from analysis.json
            s = {**s, "histogram": {int(k): v for k, v in sorted(s["histogram"].items(), key=lambda kv: int(kv[0]))}}
            w.md += [f"**{r['task']}**: the reranker's top {s['d']} ({s['kept']} sentences) come from first-stage "
                     f"rank {s['mean_rank']:.2f} on average; {pct(s['promoted'])}% from beyond the first stage's top "
                     f"{s['d']} (FiD never reads those).", "",
                     *md_table(["first-stage rank", *s["histogram"]], [["kept", *s["histogram"].values()]]), ""]
    for r in rows:
        for method, o in r.get("rerankers", {}).items():
            s, ov = o.get("rank_shift"), o.get("overlap")
            said = []
            if s:
                said.append(f"its top {s['d']} come from first-stage rank {s['mean_rank']:.2f} on average, "
                            f"{pct(s['promoted'])}% from beyond the first stage's top {s['d']}")
            if ov:
                said.append(f"against FiD, mean overlap@{ov['d']} {pct(ov['mean_overlap'])}%, predictions differ on "
                            f"{ov['differing']} of {ov['pairs']} input-seed pairs")
            if said:
                w.md += [f"**{r['task']}, {method}** ({o['reranker']}): " + "; ".join(said) + ".", ""]
    if overlap_series and len(set(map(len, overlap_series.values()))) == 1:
        path = grouped_bars(w.runs.out / "overlap.png", groups, overlap_series,
                            "Predictions that differ, by evidence overlap of FiD and PGRA",
                            "FiD and PGRA predictions differ (%)", "overlap@d (evidence sentences shared)",
                            notes=overlap_notes)
        w.figure(path, "Evidence overlap and disagreement", "Share of inputs where FiD and PGRA predict differently, "
                 "by how many of their d evidence sentences they share (bar labels: differing / inputs).")
    shifts = {r["task"]: {int(k): v for k, v in r["rank_shift"]["histogram"].items()} for r in rows
              if r.get("rank_shift")}
    if shifts:
        d = next(r["rank_shift"]["d"] for r in rows if r.get("rank_shift"))
        path = histogram(w.runs.out / "rank_shift.png", shifts, "First-stage rank of the evidence PGRA keeps",
                         "first-stage rank", "kept evidence (%)", marker=d + 0.5,
                         marker_label=f"FiD reads ranks 1..{d}")
        w.figure(path, "Rank shift", "First-stage rank of each evidence sentence in the reranker's top d; right of "
                 "the dashed line: sentences FiD does not read.")


register_analysis(Analysis("differences", compute=lambda runs, ctx: method_differences(runs), render=render,
                           reads="results"))


__all__ = ["method_differences", "overlap_at_d", "overlap_table", "rank_shift"]
