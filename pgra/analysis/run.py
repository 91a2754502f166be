"""``pgra analyze``: the analyses of an experiment as tables (markdown + JSON) and PNG figures.

Writes into ``<experiment>/analysis/``: ``analysis.md`` and ``analysis.json`` (every table), one PNG per
figure, ``case_study.md`` and ``figures.json`` (the figure index ``results.md`` links); then re-makes
``results.md`` so its figure index is current. The analyses' own runs (sweep points, other retrievers,
other reranker LMs) go under the same folder and are reused by a re-run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from ..artifacts import library_versions, read_json, source_commit, write_json, write_text
from ..config import check_config, to_dict
from ..errors import InputError
from ..retrieval.base import retriever_title
from .config import ANALYSES
from .inputs import ExperimentRuns

FIGURES_FILE = "figures.json"


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


class _Writer:
    """Collects markdown sections, JSON tables and figures."""

    def __init__(self, runs: ExperimentRuns) -> None:
        self.runs = runs
        self.md: list[str] = [f"# Analyses of {runs.experiment.out}", "",
                              f"Split: {runs.split}. Figures are PNG files beside this one.", ""]
        self.tables: dict[str, Any] = {}
        self.figures: list[dict[str, str]] = []

    def figure(self, path, title: str, caption: str) -> None:
        name = path.name
        self.figures.append({"file": name, "title": title, "caption": caption})
        self.md += [f"![{title}]({name})", "", f"*{caption}*", ""]


def _consistency(w: _Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import grouped_bars

    w.tables["consistency"] = rows
    w.md += ["## Label consistency", "",
             "Share of evidence sentences whose pseudo-label (from the no-retrieval reader) equals their input's "
             "gold label, over every (input, evidence) pair (the paper's Figure 2 / Table 10).", "",
             "| task | evidence | d | consistent | evidence pairs | share (%) |", "|---|---|---|---|---|---|"]
    for r in rows:
        w.md.append(f"| {r['task']} | {r['source']} | {r['d']} | {r['consistent']} | {r['evidence']} | "
                    f"{_pct(r['share'])} |")
    w.md.append("")
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    sources = list(dict.fromkeys(r["source"] for r in rows))
    share = {(r["task"], r["source"]): r["share"] for r in rows}
    series = {s: [share.get((t, s), float("nan")) for t in tasks] for s in sources}
    path = grouped_bars(w.runs.out / "label_consistency.png", tasks, series,
                        "Pseudo-label consistency of the evidence", "consistent evidence (%)", "task")
    w.figure(path, "Label consistency", "Share of evidence whose no-retrieval pseudo-label equals the input's gold "
             "label, per task and evidence source.")


def _sweeps(w: _Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import lines

    w.tables["sweep"] = rows
    w.md += ["## k and d sweeps (PGRA)", "",
             "Each point reranks the first k candidates and reads the top d (the paper's Figures 4 and 5); "
             "`embedded` counts the texts the reranker's LM embedded for that point (0: all from the cache; "
             "`experiment` marks a point that is the experiment's own cell).", "",
             "| task | k | d | metric (%) | seeds | embedded |", "|---|---|---|---|---|---|"]
    for r in rows:
        where = "experiment" if r["experiment_cell"] else r["embedded_texts"]
        w.md.append(f"| {r['task']} | {r['k']} | {r['d']} | {_pct(r['mean'])} ± {_pct(r['std'])} | {r['seeds']} | "
                    f"{where} |")
    w.md += ["", f"Texts embedded by the sweep: {sum(r['embedded_texts'] for r in rows)}.", ""]
    for axis, fixed in (("k", "d"), ("d", "k")):
        sel = [r for r in rows if axis in r["sweep"]]
        if not sel:
            continue
        xs, ys, es = defaultdict(list), defaultdict(list), defaultdict(list)
        for r in sorted(sel, key=lambda r: r[axis]):
            label = f"{r['task']} ({fixed}={r[fixed]})"
            xs[label].append(r[axis])
            ys[label].append(r["mean"])
            es[label].append(r["std"])
        metric = sel[0]["metric"]
        path = lines(w.runs.out / f"sweep_{axis}.png", dict(xs), dict(ys),
                     f"PGRA against {axis} ({'candidates reranked' if axis == 'k' else 'evidence read'})",
                     f"{axis} ({'candidates reranked per input' if axis == 'k' else 'evidence sentences per input'})",
                     f"{w.runs.split} {metric} (%)", dict(es))
        w.figure(path, f"Sweep over {axis}", f"PGRA's {w.runs.split} {metric} (mean ± std over seeds) against {axis}, "
                 f"{fixed} fixed at the experiment's value.")


def _retrievers(w: _Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import grouped_bars

    w.tables["retrievers"] = rows
    w.md += ["## First-stage retrievers", "", "FiD and PGRA over each retriever's candidates (the paper's Figure 6).",
             "", "| task | retriever | method | metric (%) | seeds |", "|---|---|---|---|---|"]
    for r in rows:
        w.md.append(f"| {r['task']} | {r['retriever']} | {r['method']} | {_pct(r['mean'])} ± {_pct(r['std'])} | "
                    f"{r['seeds']} |")
    w.md.append("")
    retrievers = list(dict.fromkeys(r["retriever"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    avg, err = {}, {}
    for m in methods:
        avg[m], err[m] = [], []
        for name in retrievers:
            sel = [r for r in rows if r["method"] == m and r["retriever"] == name and r["seeds"]]
            avg[m].append(sum(r["mean"] for r in sel) / len(sel) if sel else float("nan"))
            err[m].append(sel[0]["std"] if len(sel) == 1 else 0.0)
    tasks = sorted({r["task"] for r in rows})
    scope = tasks[0] if len(tasks) == 1 else f"average over {len(tasks)} tasks"
    path = grouped_bars(w.runs.out / "retrievers.png", retrievers, avg, f"FiD and PGRA by first-stage retriever ({scope})",
                        f"{w.runs.split} metric (%)", "first-stage retriever", err)
    w.figure(path, "Retriever comparison", f"{w.runs.split} metric of FiD and PGRA over each first-stage retriever "
             f"({scope}; error bars: std over seeds).")


def _differences(w: _Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import grouped_bars, histogram

    w.tables["differences"] = rows
    w.md += ["## Where FiD and PGRA differ", ""]
    if not any(r.get("overlap") or r.get("rank_shift") for r in rows):
        w.md += ["Nothing to compare: the experiment has no finished fid and pgra cells of a shared seed.", ""]
    overlap_series: dict[str, list[float]] = {}
    overlap_notes: dict[str, list[str]] = {}
    groups: list[str] = []
    for r in rows:
        o = r.get("overlap")
        if o:
            d = o["d"]
            w.md += [f"**{r['task']}** (seeds {', '.join(map(str, r['seeds']))}; {o['pairs']} input-seed pairs): mean "
                     f"overlap@{d} {_pct(o['mean_overlap'])}% — {_pct(o['mean_overlap_agreeing'])}% where the "
                     f"predictions agree, {_pct(o['mean_overlap_differing'])}% where they differ "
                     f"({o['differing']} pairs).", "",
                     f"| overlap@{d} | inputs | predictions differ | share differing (%) |", "|---|---|---|---|"]
            for b in o["rows"]:
                w.md.append(f"| {b['shared']}/{d} | {b['inputs']} | {b['differing']} | {_pct(b['share_differing'])} |")
            w.md.append("")
            groups = [f"{b['shared']}/{d}" for b in o["rows"]]
            overlap_series[r["task"]] = [b["share_differing"] if b["share_differing"] is not None else float("nan")
                                         for b in o["rows"]]
            overlap_notes[r["task"]] = [f"{b['differing']}/{b['inputs']}" for b in o["rows"]]
        s = r.get("rank_shift")
        if s:  # histogram keys are strings once read back from analysis.json
            s = {**s, "histogram": {int(k): v for k, v in sorted(s["histogram"].items(), key=lambda kv: int(kv[0]))}}
            w.md += [f"**{r['task']}**: the reranker's top {s['d']} ({s['kept']} sentences) come from first-stage "
                     f"rank {s['mean_rank']:.2f} on average; {_pct(s['promoted'])}% from beyond the first stage's top "
                     f"{s['d']} (FiD never reads those).", "",
                     "| first-stage rank | " + " | ".join(map(str, s["histogram"])) + " |",
                     "|---|" + "---|" * len(s["histogram"]),
                     "| kept | " + " | ".join(str(v) for v in s["histogram"].values()) + " |", ""]
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


def _calibration(w: _Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import reliability

    w.tables["calibration"] = rows
    n_bins = rows[0]["n_bins"] if rows else 10
    w.md += ["## Calibration", "",
             "How far each method's printed probabilities are from its accuracy. Confidence: the probability a "
             f"method gives its own prediction (scores normalised over the labels). ECE: expected calibration error "
             f"over {n_bins} equal-width confidence bins, per seed (mean ± std when several). Brier: mean squared "
             "distance of the label probabilities from the gold one-hot. Seed flips: inputs whose prediction is not "
             "the same under every seed (`(det.)`: one run, the seed cannot change it; `one seed`: only one seed finished); pairwise: the mean share of "
             "inputs on which two seeds disagree.", "",
             "| task | method | seeds | accuracy (%) | confidence (%) | ECE (%) | Brier | seed flips (%) | "
             "pairwise (%) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["flips"]
        if f:
            flips = (f"{_pct(f['share'])} ({f['flipped']}/{f['inputs']})", _pct(f["pairwise"]))
        else:
            flips = ("(det.)",) * 2 if r.get("seed_independent") else ("one seed",) * 2
        several = len(r["scored_seeds"]) > 1
        ece = _pct(r["ece"]) + (f" ± {_pct(r['ece_std'])}" if several else "")
        brier = "–" if r["brier"] is None else f"{r['brier']:.3f}" + (f" ± {r['brier_std']:.3f}" if several else "")
        w.md.append(f"| {r['task']} | {r['method']} | {len(r['seeds'])} | {_pct(r['accuracy'])} | "
                    f"{_pct(r['confidence'])} | {ece} | {brier} | {flips[0]} | {flips[1]} |")
    w.md.append("")
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


def _cos(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _leakage(w: _Writer, rows: list[dict[str, Any]]) -> None:
    w.tables["leakage"] = rows
    w.md += ["## Leakage audit", "",
             "Inputs with an exact duplicate in the retrieval corpus (equal after NFKC, case folding and dropping "
             "all but letters and digits) or a near one (cosine under the index's encoder at or above the "
             "threshold, among the first stage's k candidates; dense indexes only), and how many (input, seed) "
             "pairs of each evidence-reading method read a duplicate of their own input. The flagged corpus ids "
             "are in `<task>/leakage_ids.txt`; `retrieve.exclude_ids` drops them from a task's candidates.", "",
             "| task | split | inputs | exact | near (cos ≥ t, in top k) | flagged ids | read by | excluded |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        near = f"– ({retriever_title(r['retriever'])})" if r["near"] is None else \
            f"{r['near']} (t={r['threshold']}, k={r['k']}; highest cos {_cos(r.get('max_cosine'))})"
        read = "; ".join(f"{m}: {v['read_duplicate']}/{v['pairs']}" for m, v in r["methods"].items()) or "–"
        excl = r["excluded"]
        excluded = f"{excl['ids']} ids, {sum(excl['removed_from_top_k'].values())} removed" if excl else "no"
        w.md.append(f"| {r['task']} | {r['split']} | {r['inputs']} | {r['exact']} | {near} | {r['flagged_ids']} | "
                    f"{read} | {excluded} |")
    w.md.append("")
    for r in rows:
        for ex in r["examples"]:
            near = "; ".join(f"{n['id']} (cos {n['cosine']:.3f}): {n['text']}" for n in ex["near"])
            w.md.append(f"- {r['task']}/{r['split']} `{ex['id']}`: {ex['text']}" +
                        (f" — exact: {', '.join(ex['exact'])}" if ex["exact"] else "") + (f" — near: {near}" if near
                                                                                          else ""))
    if any(r["examples"] for r in rows):
        w.md.append("")


def _signed(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f}"


def _attribution(w: _Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import lines

    w.tables["attribution"] = rows
    w.md += ["## Evidence attribution", "",
             "Effect of an evidence sentence: the gold label's probability with every sentence read minus the "
             "probability with that sentence left out (blanked), in percentage points, averaged over the sampled "
             "inputs and the seeds; `all`: every sentence read minus none read. The reranker's verdict: among "
             "PGRA's evidence, sentences it promoted from beyond the first stage's top d or kept from it; among "
             "FiD's, sentences the reranker keeps in its top d or demotes out of it.", "",
             "| task | method | seeds | inputs | all evidence | per sentence | by verdict | by first-stage rank | "
             "by reranker rank |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fmt = (lambda groups: ", ".join(f"{k}: {_signed(v['mean_effect'])} ({v['sentences']})"  # noqa: E731
                                        for k, v in groups.items()) or "–")
        w.md.append(f"| {r['task']} | {r['method']} | {len(r['seeds'])} | {r['inputs']} | "
                    f"{_signed(r['all_evidence_effect'])} | {_signed(r['mean_effect'])} | {fmt(r['by_verdict'])} | "
                    f"{fmt(r['by_first_stage_rank'])} | {fmt(r['by_reranker_rank'])} |")
    w.md.append("")
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


def _flops(x: float | None) -> str:
    return "–" if x is None else f"{x:.2e}"


def _cost(w: _Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import pareto

    w.tables["cost"] = rows
    w.md += ["## Cost", "",
             "What each score cost: the method's cell (mean over seeds) plus the shared stages it needs (retrieval "
             "for the readers of corpus evidence, reranking for PGRA), counted in full. FLOPs: 2 x parameters per "
             "forward token and 6 x per trained token, from the tokens every model ran and its parameter count "
             "(attention over the sequence left out; `–`: a model or stage without a record; `(resumed)`: a cell resumed "
             "after a stop records the work after it only). Dominated: another "
             "method scores at least as well for at most the cost (by FLOPs; by wall-clock).", "",
             "| task | method | metric (%) | wall-clock (s) | of which stages | tokens | est. FLOPs | "
             "dominated (FLOPs) | dominated (time) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dom = (lambda xs: "–" if xs is None else (", ".join(xs) or "no"))  # noqa: E731
        tokens = "–" if r["tokens"] is None else f"{r['tokens']:,.0f}"
        seconds = "–" if r["elapsed_s"] is None else f"{r['elapsed_s']:,.0f}"
        stages = f"{r['stage_elapsed_s']:,.0f}" if r["stages"] else "–" if r["missing_stages"] else "0"
        seconds += " (resumed)" if r.get("resumed") else ""
        w.md.append(f"| {r['task']} | {r['method']} | {_pct(r['metric'])} | {seconds} | {stages} | {tokens} | "
                    f"{_flops(r['flops'])} | {dom(r['dominated_by_flops'])} | {dom(r['dominated_by_time'])} |")
    hardware = {str(r["hardware"]) for r in rows if r.get("hardware")}
    w.md += ["", f"Hardware: {'; '.join(sorted(hardware)) or 'not recorded'}.", ""]
    for task in dict.fromkeys(r["task"] for r in rows):
        sel = [r for r in rows if r["task"] == task]
        use_flops = all(r["flops"] is not None for r in sel)
        key, dom_key = ("flops", "dominated_by_flops") if use_flops else ("elapsed_s", "dominated_by_time")
        points = [(r["method"], r[key], r["metric"], bool(r[dom_key])) for r in sel
                  if r["metric"] is not None and r[key] is not None]
        if not points:
            continue
        path = pareto(w.runs.out / f"cost_{task}.png", points, f"Score against cost: {task}",
                      "estimated FLOPs" if use_flops else "wall-clock seconds", f"{w.runs.split} metric (%)")
        w.figure(path, f"Cost ({task})", f"{w.runs.split} metric against "
                 f"{'estimated FLOPs' if use_flops else 'wall-clock seconds'} per method on {task} (hollow: "
                 "dominated by another method).")


def analyze(cfg, ctx=None) -> ExperimentRuns:
    """Run the configured analyses of the experiment ``cfg`` (an ``ExperimentConfig``) and write them."""
    from ..distributed import init_distributed
    from ..experiment import Experiment

    check_config(cfg)
    ctx = ctx or init_distributed()
    runs = ExperimentRuns(Experiment(cfg), cfg.analysis.split)
    if not runs.experiment.out.exists():
        raise InputError(f"experiment folder {runs.experiment.out} does not exist: run `pgra experiment` first",
                         path=runs.experiment.out)
    chosen = cfg.analysis.analyses
    # analyses that run models run on every process (their stages shard); tables and figures on the main one
    results: dict[str, Any] = {}
    if "sweep" in chosen:
        from .sweep import run_sweeps

        results["sweep"] = run_sweeps(runs, ctx)
    if "retrievers" in chosen:
        from .retrievers import compare_retrievers

        results["retrievers"] = compare_retrievers(runs, ctx)
    if "consistency" in chosen:
        from .consistency import label_consistency

        results["consistency"] = label_consistency(runs, ctx)
    ctx.barrier()
    if not ctx.is_main:
        return runs
    if "differences" in chosen:
        from .differences import method_differences

        results["differences"] = method_differences(runs)
    if "cost" in chosen:
        from .costs import cost_table

        results["cost"] = cost_table(runs)
    if "attribution" in chosen:
        from .attribution import attribution

        results["attribution"] = attribution(runs)
    if "leakage" in chosen:
        from .leakage import leakage

        results["leakage"] = leakage(runs)
    if "calibration" in chosen:
        from .calibration import calibration

        results["calibration"] = calibration(runs)
    if "case_study" in chosen:
        from .case_study import case_study

        text, results["case_study"] = case_study(runs)
        write_text(runs.out / "case_study.md", text + "\n")
    # analyses not chosen this time keep the tables of the run that made them (analysis.json)
    previous = runs.out / "analysis.json"
    kept = read_json(previous).get("tables", {}) if previous.exists() else {}
    tables = {name: results.get(name, kept.get(name)) for name in ANALYSES if name in results or name in kept}
    w = _Writer(runs)
    for name, render in (("consistency", _consistency), ("sweep", _sweeps), ("retrievers", _retrievers),
                         ("differences", _differences), ("calibration", _calibration),
                         ("leakage", _leakage), ("attribution", _attribution),
                         ("cost", _cost)):
        if tables.get(name):
            render(w, tables[name])
    if "case_study" in tables and (runs.out / "case_study.md").exists():
        w.tables["case_study"] = tables["case_study"]
        w.md += ["## Case study", "", "[case_study.md](case_study.md)", ""]
    write_text(runs.out / "analysis.md", "\n".join(w.md) + "\n")
    write_json(runs.out / "analysis.json", {"split": runs.split, "analyses": list(w.tables), "tables": w.tables,
                                            "figures": w.figures, "config": to_dict(cfg),
                                            "git_commit": source_commit(), "versions": library_versions()})
    pages = [{"file": "analysis.md", "title": "Analyses (all tables)"}]
    if "case_study" in w.tables:
        pages.append({"file": "case_study.md", "title": "Case study"})
    write_json(runs.out / FIGURES_FILE, {"figures": w.figures, "pages": pages})
    if any(runs.experiment.out.glob("*/*/seed-*/cell.json")):
        from ..evaluation.report import write_report

        write_report(runs.experiment.out, reference=cfg.reference)
    return runs


__all__ = ["FIGURES_FILE", "analyze"]
