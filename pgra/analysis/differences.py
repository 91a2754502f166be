"""Where FiD and PGRA differ: the overlap of their evidence against their predictions, and the rank shift.

``overlap@d`` of an input is the share of PGRA's d evidence sentences that are also among FiD's d (the
first stage's top d). The rank shift is the first-stage rank of every sentence the reranker keeps: rank <= d
sentences FiD reads too, the others the reranker promoted.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .inputs import ExperimentRuns


def overlap_at_d(a: list[Any], b: list[Any], d: int) -> float:
    """``|a[:d] ∩ b[:d]| / d`` (ids compared as strings)."""
    return len({str(x) for x in a[:d]} & {str(x) for x in b[:d]}) / d


def overlap_table(pairs: list[tuple[dict[str, Any], dict[str, Any]]], d: int) -> dict[str, Any]:
    """From (FiD line, PGRA line) pairs of the same input: per overlap value the inputs and how many differ in
    prediction, and the mean overlap where the predictions agree and where they differ."""
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
    """The first-stage rank of each sentence in the reranked top ``d``: histogram, mean, share promoted
    from beyond the first stage's top ``d``."""
    ranks = [int(c["retrieval_rank"]) for rec in records for c in rec.get("ctxs", [])[:d]]
    hist = Counter(ranks)
    return {"d": d, "kept": len(ranks), "histogram": {r: hist[r] for r in sorted(hist)},
            "mean_rank": sum(ranks) / len(ranks) if ranks else None,
            "promoted": sum(r > d for r in ranks) / len(ranks) if ranks else None}


def method_differences(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """Per task: the overlap table of FiD and PGRA (over the seeds both finished) and PGRA's rank shift."""
    out = []
    for task in runs.cfg.tasks:
        seeds = [s for s in runs.finished_seeds(task, "fid") if s in runs.finished_seeds(task, "pgra")]
        d = runs.n_passages(task, "pgra")
        pairs = []
        for seed in seeds:
            fid = {str(x["id"]): x for x in runs.predictions(task, "fid", seed)}
            pairs += [(fid[str(x["id"])], x) for x in runs.predictions(task, "pgra", seed) if str(x["id"]) in fid]
        row: dict[str, Any] = {"task": runs.task_name(task), "seeds": seeds}
        if pairs:
            row["overlap"] = overlap_table(pairs, d)
        if runs.experiment.needs_reranking:
            row["rank_shift"] = rank_shift(list(runs.stage_records(task, "reranked").values()), d)
        out.append(row)
    return out


__all__ = ["method_differences", "overlap_at_d", "overlap_table", "rank_shift"]
