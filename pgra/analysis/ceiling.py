"""The reader's ceiling: how much any reranker could move a trained FiD reader, re-reading its inputs with the best
(oracle) and worst (anti-oracle) evidence of the first k candidates. docs/analyses.md tells the rest."""

from __future__ import annotations

from typing import Any

from ..evaluation.report import p_text
from ..evaluation.significance import paired_bootstrap
from ..results import metrics
from .base import Analysis, register_analysis
from .consistency import CorpusLabels, evidence_texts, task_labeller
from .inputs import ExperimentRuns
from .writer import Writer, pct, signed

READER = "fid"
N_RESAMPLES = 10000


def ordered_evidence(record: dict[str, Any], labels: dict[str, str], k: int, d: int, agree: bool) -> list[dict]:
    """The top ``d`` of the first ``k`` candidates, those agreeing (``agree``) or disagreeing first."""
    ctxs = record.get("ctxs", [])[:k]
    hit = [(labels[str(c["id"])] == str(record["label"])) == agree for c in ctxs]
    return ([c for c, h in zip(ctxs, hit, strict=True) if h] + [c for c, h in zip(ctxs, hit, strict=True) if not h])[:d]


def reader_ceiling(runs: ExperimentRuns, task: str) -> dict[str, Any] | None:
    """One task's row: FiD's metric with its own, oracle and anti-oracle evidence, each swap tested."""
    seed = runs.cfg.seeds[0]
    cell = runs.cell(task, READER, seed)
    if READER not in runs.cfg.methods or cell is None:
        return None
    m = runs.experiment.method(task, READER)
    d = m.n_passages()
    records = list(runs.stage_records(task, "candidates").values())
    k = runs.settings(task).rerank.k or max(len(r.get("ctxs", [])) for r in records)
    labeller = task_labeller(runs, task, "the reader's ceiling")
    labels = labeller.label(evidence_texts(records, k))
    variants = {"own": [{**r, "ctxs": r.get("ctxs", [])[:d]} for r in records],
                "oracle": [{**r, "ctxs": ordered_evidence(r, labels, k, d, True)} for r in records],
                "anti_oracle": [{**r, "ctxs": ordered_evidence(r, labels, k, d, False)} for r in records]}
    predictor = type(m).load(cell)
    spec = runs.task_spec(task)
    preds = {name: [line["prediction"] for line in predictor.predict(recs)] for name, recs in variants.items()}
    gold = [str(r["label"]) for r in records]
    row: dict[str, Any] = {"task": runs.task_name(task), "method": READER, "seed": seed, "k": k, "d": d,
                           "inputs": len(records), "metric": spec.metric,
                           "labels": "corpus" if isinstance(labeller, CorpusLabels) else "pseudo"}
    for name in ("oracle", "anti_oracle"):
        res = paired_bootstrap(gold, [preds[name]], [preds["own"]], spec.labels, spec.metric, N_RESAMPLES)
        row.update({f"{name}_delta": res.delta, f"{name}_p": res.p_value, f"{name}_ci": [res.ci_low, res.ci_high]})
    for name, p in preds.items():
        row[name] = metrics.compute_metric(spec.metric, gold, p, spec.labels)
    row["n_resamples"] = N_RESAMPLES
    return row


def ceiling(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """One row per task with a finished FiD cell at the experiment's first seed."""
    return [row for task in runs.cfg.tasks if (row := reader_ceiling(runs, task)) is not None]


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    def swap(r: dict[str, Any], name: str) -> str:
        lo, hi = r[f"{name}_ci"]
        return f"{signed(r[f'{name}_delta'])} [{signed(lo)}, {signed(hi)}] (p{p_text(r[f'{name}_p'], r['n_resamples'])})"

    w.section("ceiling", rows, "The reader's ceiling",
              ("The FiD reader of the first seed re-reads the analysed split with other evidence of the same size d: "
               "its own (the first stage's top d), oracle evidence (of the first k candidates, those whose label "
               "agrees with the input's gold label first) and anti-oracle evidence (those that disagree first); "
               "`labels`: the corpus's true labels or the no-retrieval reader's pseudo-labels. The swaps' "
               "differences from its own evidence in points, with the paired bootstrap's 95% interval and p: how much "
               "any reranker of these candidates could move this reader, up or down."),
              ["task", "seed", "k", "d", "labels", "own (%)", "oracle (%)", "anti-oracle (%)", "oracle - own",
               "anti-oracle - own", "inputs"],
              lambda r: (r["task"], r["seed"], r["k"], r["d"], r["labels"], pct(r["own"]), pct(r["oracle"]),
                         pct(r["anti_oracle"]), swap(r, "oracle"), swap(r, "anti_oracle"), r["inputs"]))


register_analysis(Analysis("ceiling", compute=lambda runs, ctx: ceiling(runs), render=render,
                           help="the FiD reader with oracle and anti-oracle evidence"))


__all__ = ["ceiling", "ordered_evidence", "reader_ceiling"]
