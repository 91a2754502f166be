"""Evidence attribution: the gold label's probability with every evidence sentence read minus that with one
blanked, averaged by rank and by the reranker's verdict. docs/analyses.md tells the rest."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ..core.config import MAX_BATCH, MAX_ITEMS, SEED_MAX, option
from ..core.errors import InputError
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .plots import lines
from .writer import Writer, mean_or_none, signed


@dataclass
class AttributionConfig:
    """Leave-one-out effects of each evidence sentence on the gold label's probability (fid and pgra cells)."""

    n: int = option(200, min=0, max=MAX_ITEMS, help="inputs drawn (seeded) from the analysed split; 0 = all")
    seed: int = option(0, min=0, max=SEED_MAX,
                       help="seed of the draw (the same inputs for every method and seed)")
    batch_size: int = option(64, min=1, max=MAX_BATCH, help="reader inputs per batch (each input runs d + 2 times)")


READERS_WITH_EVIDENCE = ("fid", "pgra")


def leave_one_out(record: dict[str, Any], d: int) -> list[dict[str, Any]]:
    """``record``'s first ``d`` evidence sentences all read, each blanked in turn, all blanked (d positions kept)."""
    ctxs = list(record.get("ctxs", []))[:d]
    blank = [{**c, "text": ""} for c in ctxs]
    variants = [ctxs] + [ctxs[:i] + [blank[i]] + ctxs[i + 1:] for i in range(len(ctxs))] + [blank]
    return [{**record, "id": f"{record['id']}#{j}", "ctxs": v} for j, v in enumerate(variants)]


def effects(record: dict[str, Any], lines: list[dict[str, Any]], d: int) -> dict[str, Any]:
    """The gold probability with all evidence and with none, and each sentence's effect (all minus without it)."""
    gold = str(record["label"])
    if any(not line.get("scores") for line in lines):
        raise InputError(f"input {record['id']}: the reader printed no label probabilities (predict_mode: generate); "
                         "the attribution needs predict_mode: scoring", field="reader.predict_mode")
    p = [float(line["scores"].get(gold, 0.0)) / (sum(map(float, line["scores"].values())) or 1.0) for line in lines]
    n = len(record.get("ctxs", [])[:d])
    return {"full": p[0], "none": p[n + 1], "effects": [p[0] - p[1 + i] for i in range(n)]}


def sample_ids(ids: list[str], n: int, seed: int) -> list[str]:
    """``n`` of ``ids`` drawn with ``seed`` (all when there are fewer), in their file order."""
    if n <= 0 or n >= len(ids):
        return list(ids)
    chosen = set(random.Random(seed).sample(ids, n))
    return [i for i in ids if i in chosen]


def attribute_cell(runs: ExperimentRuns, task: str, method: str, seed: int, ids: list[str],
                   reranked_top: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Per sampled input and evidence sentence of one cell: its ranks, the reranker's verdict and its effect."""
    m = runs.experiment.method(task, method)
    d = m.n_passages()
    by_id = runs.records(task, m.data_dir)  # read once per folder, shared by every seed and method
    predictor = type(m).load(runs.require_cell(task, method, seed, "the attribution"))
    if hasattr(predictor, "batch_size"):
        predictor.batch_size = runs.cfg.analysis.attribution.batch_size
    records = [by_id[i] for i in ids if i in by_id]
    variants = [leave_one_out(r, d) for r in records]
    lines = predictor.predict([v for vs in variants for v in vs])
    rows, at = [], 0
    for rec, vs in zip(records, variants, strict=True):
        e = effects(rec, lines[at:at + len(vs)], d)
        at += len(vs)
        top = reranked_top.get(str(rec["id"]), [])
        for i, c in enumerate(rec.get("ctxs", [])[:d]):
            first = int(c.get("retrieval_rank", i + 1))
            rerank_rank = top.index(str(c["id"])) + 1 if str(c["id"]) in top else None
            verdict = (("promoted" if first > d else "kept") if method == "pgra" else
                       ("kept" if rerank_rank is not None else "demoted") if reranked_top else None)
            rows.append({"seed": seed, "input": str(rec["id"]), "evidence": str(c["id"]), "first_stage_rank": first,
                         "reranker_rank": rerank_rank, "verdict": verdict, "effect": e["effects"][i],
                         "full": e["full"], "none": e["none"]})
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean effects by first-stage rank, reranker rank and verdict, and of all evidence together per input."""
    by_first, by_rerank, by_verdict = defaultdict(list), defaultdict(list), defaultdict(list)
    inputs: dict[tuple[Any, str], float] = {}  # per (seed, input)
    for r in rows:
        by_first[r["first_stage_rank"]].append(r["effect"])
        if r["reranker_rank"] is not None:
            by_rerank[r["reranker_rank"]].append(r["effect"])
        if r["verdict"]:
            by_verdict[r["verdict"]].append(r["effect"])
        inputs[(r.get("seed"), r["input"])] = r["full"] - r["none"]
    def table(groups: dict[Any, list[float]]) -> dict[str, dict[str, Any]]:
        return {str(k): {"sentences": len(v), "mean_effect": mean_or_none(v)} for k, v in sorted(groups.items())}

    return {"sentences": len(rows), "inputs": len({i for _, i in inputs}), "input_seed_pairs": len(inputs),
            "mean_effect": mean_or_none([r["effect"] for r in rows]),
            "all_evidence_effect": mean_or_none(list(inputs.values())), "by_first_stage_rank": table(by_first),
            "by_reranker_rank": table(by_rerank), "by_verdict": table(by_verdict)}


def attribution(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """Per task and evidence-reading reader of the grid: the summary of every finished seed's attributions."""
    cfg = runs.cfg.analysis.attribution
    out = []
    for task in runs.cfg.tasks:
        reranked_top: dict[str, list[str]] = {}
        if "reranked" in runs.experiment.reranked_stages():
            d = runs.settings(task).rerank.top_d  # the reranker's top d: what PGRA reads
            reranked_top = {i: [str(c["id"]) for c in r.get("ctxs", [])[:d]]
                            for i, r in runs.stage_records(task, "reranked").items()}
        ids = sample_ids(list(runs.stage_records(task, "candidates")), cfg.n, cfg.seed)
        for method in (m for m in runs.cfg.methods if m in READERS_WITH_EVIDENCE):
            seeds = runs.finished_seeds(task, method)
            rows = [r for s in seeds for r in attribute_cell(runs, task, method, s, ids, reranked_top)]
            if rows:
                out.append({"task": runs.task_name(task), "method": method, "seeds": seeds,
                            "d": runs.n_passages(task, method), **summarise(rows)})
    return out


def _by_group(groups: dict[str, dict[str, Any]]) -> str:
    """A summary table's groups in one cell: ``group: mean effect (sentences)``, comma-separated."""
    return ", ".join(f"{k}: {signed(v['mean_effect'])} ({v['sentences']})" for k, v in groups.items()) or "–"


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    w.section("attribution", rows, "Evidence attribution",
              ("Effect of an evidence sentence: the gold label's probability with every sentence read minus the "
               "probability with that sentence left out (blanked), in percentage points, averaged over the sampled "
               "inputs and the seeds; `all`: every sentence read minus none read. The reranker's verdict: among "
               "PGRA's evidence, sentences it promoted from beyond the first stage's top d or kept from it; among "
               "FiD's, sentences the reranker keeps in its top d or demotes out of it."),
              ["task", "method", "seeds", "inputs", "all evidence", "per sentence", "by verdict", "by first-stage rank", "by reranker rank"],
              lambda r: (r["task"], r["method"], len(r["seeds"]), r["inputs"], signed(r["all_evidence_effect"]),
                         signed(r["mean_effect"]), _by_group(r["by_verdict"]), _by_group(r["by_first_stage_rank"]),
                         _by_group(r["by_reranker_rank"])))
    xs, ys = {}, {}
    for r in rows:
        ranks = sorted(r["by_first_stage_rank"], key=int)
        name = f"{r['task']} {r['method']}"
        xs[name] = [int(k) for k in ranks]
        ys[name] = [r["by_first_stage_rank"][k]["mean_effect"] for k in ranks]
    if xs:
        path = lines(w.runs.out / "attribution.png", xs, ys, "Effect of an evidence sentence by first-stage rank",
                     "first-stage rank of the sentence", "gold probability lost without it (points)")
        w.figure(path, "Evidence attribution", "Mean drop of the gold label's probability when one evidence "
                 "sentence is left out, by the sentence's first-stage rank, per task and reader.")


register_analysis(Analysis("attribution", compute=lambda runs, ctx: attribution(runs), render=render,
                           config=AttributionConfig, help="evidence attribution"))


__all__ = ["attribute_cell", "attribution", "effects", "leave_one_out", "sample_ids", "summarise"]
