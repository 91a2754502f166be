"""Are the probabilities the methods print worth anything: expected calibration error (Guo et al. 2017), Brier
score and seed flips."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..core.config import MAX_BINS, option
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .plots import reliability
from .writer import Writer, pct


@dataclass
class CalibrationConfig:
    """Expected calibration error, Brier score, reliability diagrams and seed flips of every method."""

    n_bins: int = option(10, min=2, max=MAX_BINS, help="equal-width confidence bins of the calibration error and the diagrams")


def _probabilities(line: dict[str, Any]) -> dict[str, float] | None:
    scores = line.get("scores")
    if not isinstance(scores, dict) or not scores:
        return None
    total = sum(float(v) for v in scores.values())
    if not total > 0:
        return None
    return {str(k): float(v) / total for k, v in scores.items()}


def confidence_pairs(lines: list[dict[str, Any]]) -> list[tuple[float, bool, float]]:
    """Per prediction line with scores: (confidence, prediction is gold, Brier term)."""
    out = []
    for line in lines:
        if (p := _probabilities(line)) is None:
            continue
        gold, pred = str(line["label"]), str(line["prediction"])
        brier = sum((q - (label == gold)) ** 2 for label, q in p.items()) + (0.0 if gold in p else 1.0)
        out.append((p.get(pred, 0.0), pred == gold, brier))
    return out


def reliability_bins(pairs: list[tuple[float, bool, Any]], n_bins: int) -> list[dict[str, Any]]:
    """Equal-width confidence bins: per bin its bounds, inputs, mean confidence and accuracy (None if empty)."""
    members: list[list[tuple[float, bool]]] = [[] for _ in range(n_bins)]
    for conf, correct, *_ in pairs:
        members[min(int(conf * n_bins), n_bins - 1)].append((conf, correct))
    return [{"lo": j / n_bins, "hi": (j + 1) / n_bins, "inputs": len(m),
             "confidence": sum(c for c, _ in m) / len(m) if m else None,
             "accuracy": sum(ok for _, ok in m) / len(m) if m else None} for j, m in enumerate(members)]


def expected_calibration_error(pairs: list[tuple[float, bool, Any]], n_bins: int) -> float | None:
    """``sum_b |B_b|/n * |accuracy(B_b) - confidence(B_b)|`` over equal-width bins (None without inputs)."""
    if not pairs:
        return None
    return sum(b["inputs"] / len(pairs) * abs(b["accuracy"] - b["confidence"])
               for b in reliability_bins(pairs, n_bins) if b["inputs"])


def seed_flips(predictions: list[dict[str, str]]) -> dict[str, Any]:
    """Over the inputs every seed predicted: those with more than one prediction, and pairwise disagreement."""
    shared = set.intersection(*(set(p) for p in predictions)) if predictions else set()
    flipped = sum(len({p[i] for p in predictions}) > 1 for i in shared)
    pairs = [(a, b) for j, a in enumerate(predictions) for b in predictions[j + 1:]]
    pairwise = [sum(a[i] != b[i] for i in shared) / len(shared) for a, b in pairs] if shared else []
    return {"inputs": len(shared), "flipped": flipped, "share": flipped / len(shared) if shared else None,
            "pairwise": sum(pairwise) / len(pairwise) if pairwise else None}


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def method_calibration(runs: ExperimentRuns, task: str, method: str, n_bins: int) -> dict[str, Any] | None:
    """One row: ECE and Brier per seed (mean, std), the pooled reliability bins and the seed flips."""
    if not (seeds := runs.finished_seeds(task, method)):
        return None
    per_seed = {s: runs.predictions(task, method, s) for s in seeds}
    pairs = {s: confidence_pairs(lines) for s, lines in per_seed.items()}
    scored = [s for s in seeds if pairs[s]]
    ece = [expected_calibration_error(pairs[s], n_bins) for s in scored]
    brier = [statistics.fmean(b for *_, b in pairs[s]) for s in scored]
    pooled = [x for s in scored for x in pairs[s]]
    flips = (seed_flips([{str(x["id"]): str(x["prediction"]) for x in per_seed[s]} for s in seeds])
             if len(seeds) > 1 else None)
    ece_mean, ece_std = _mean_std(ece)
    brier_mean, brier_std = _mean_std(brier)
    return {"task": runs.task_name(task), "method": method, "seeds": seeds, "scored_seeds": scored,
            "seed_independent": runs.seed_independent(task, method),
            "inputs": len(pooled), "accuracy": statistics.fmean(str(x["prediction"]) == str(x["label"]) for s in seeds
                                                                for x in per_seed[s]) if any(per_seed.values()) else None,
            "confidence": statistics.fmean(c for c, *_ in pooled) if pooled else None,
            "ece": ece_mean, "ece_std": ece_std, "brier": brier_mean, "brier_std": brier_std,
            "n_bins": n_bins, "bins": reliability_bins(pooled, n_bins), "flips": flips}


def calibration(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """The calibration table of every (task, method) with a finished cell."""
    n_bins = runs.cfg.analysis.calibration.n_bins
    rows = [method_calibration(runs, task, method, n_bins) for task in runs.cfg.tasks for method in runs.cfg.methods]
    return [r for r in rows if r is not None]


def _cells(r: dict[str, Any]) -> tuple[Any, ...]:
    """A calibration row's cells in the table."""
    if f := r["flips"]:
        flips = (f"{pct(f['share'])} ({f['flipped']}/{f['inputs']})", pct(f["pairwise"]))
    else:
        flips = ("(det.)",) * 2 if r.get("seed_independent") else ("one seed",) * 2
    several = len(r["scored_seeds"]) > 1
    ece = pct(r["ece"]) + (f" ± {pct(r['ece_std'])}" if several else "")
    brier = "–" if r["brier"] is None else f"{r['brier']:.3f}" + (f" ± {r['brier_std']:.3f}" if several else "")
    return r["task"], r["method"], len(r["seeds"]), pct(r["accuracy"]), pct(r["confidence"]), ece, brier, *flips


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    n_bins = rows[0]["n_bins"] if rows else 10
    w.section("calibration", rows, "Calibration",
              ("How far each method's printed probabilities are from its accuracy. Confidence: the probability a "
               f"method gives its own prediction (scores normalised over the labels). ECE: expected calibration error "
               f"over {n_bins} equal-width confidence bins, per seed (mean ± std when several). Brier: mean squared "
               "distance of the label probabilities from the gold one-hot. Seed flips: inputs whose prediction is not "
               "the same under every seed (`(det.)`: one run, the seed cannot change it; `one seed`: only one seed finished); pairwise: the mean share of "
               "inputs on which two seeds disagree."),
              ["task", "method", "seeds", "accuracy (%)", "confidence (%)", "ECE (%)", "Brier", "seed flips (%)", "pairwise (%)"],
              _cells)
    for task in dict.fromkeys(r["task"] for r in rows):
        curves = {}
        for r in rows:
            filled = [b for b in r["bins"] if r["task"] == task and b["inputs"]]
            if filled:
                curves[r["method"]] = ([b["confidence"] for b in filled], [b["accuracy"] for b in filled],
                                       [b["inputs"] for b in filled])
        if curves:
            path = reliability(w.runs.out / f"reliability_{task}.png", curves, f"Reliability diagram: {task}")
            w.figure(path, f"Reliability ({task})", f"Accuracy against confidence per method on {task} "
                     f"({w.runs.split}, {n_bins} bins, seeds pooled; marker size: inputs in the bin).")


register_analysis(Analysis("calibration", compute=lambda runs, ctx: calibration(runs), render=render,
                           config=CalibrationConfig, help="calibration of the scores", reads="results"))


__all__ = ["calibration", "confidence_pairs", "expected_calibration_error", "method_calibration",
           "reliability_bins", "seed_flips"]
