"""Pseudo-label consistency (the paper's Figure 2; against the reranker's size its Figure 4 / Tables 9-10): how
often evidence carries its input's label, with a controls table (floor, ceiling, intervals) when
``analysis.consistency.k`` or ``.d`` is set. docs/analyses.md tells the rest."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import MAX_BATCH, MAX_ITEMS, MAX_RESAMPLES, SEED_MAX, option
from ..core.errors import InputError
from ..evaluation.report import p_text
from ..evaluation.significance import input_weights, share_bootstrap
from ..experiment import CELL_FILE
from ..experiment.grid import FULL_SEARCH
from ..experiment.reuse import finished_with, reuse_or_run
from ..methods import get_method
from ..rerank.base import reranker_class
from ..results.predictions import read_cell
from ..storage.artifacts import MANIFEST, read_json, read_json_object, write_json
from ..tasks.loaders import _columns, _rows, resolve_data_path
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .plots import grouped_bars, interval_panels
from .writer import Writer, pct


@dataclass
class ConsistencyConfig:
    """Pseudo-label consistency (the paper's Figure 2; against the reranker's size its Figure 4 / Tables 9-10)."""

    labeller_seed: int = option(0, min=0, max=SEED_MAX,
                                help="seed of the no_retrieval cell that labels the evidence (0 = first seed)")
    rerank_lms: list[str] = option(default_factory=list,
                                   help="more reranker LMs (paths or hub ids): each reranks the candidates again "
                                        "and its top d is labelled too (Figure 4 / Tables 9-10's OPT sizes)")
    batch_size: int = option(64, min=1, max=MAX_BATCH, help="evidence sentences per labelling batch")
    k: list[int] = option(default_factory=list, min=1, max=MAX_ITEMS, omit_default=True, record_default=False,
                          help="the controls table's k: candidates each reranker LM ranks (default: the "
                               "experiment's rerank.k when d is set; with k and d both empty, no controls table)")
    d: list[int] = option(default_factory=list, min=1, max=MAX_ITEMS, omit_default=True, record_default=False,
                          help="the controls table's d: evidence kept (default: PGRA's d when k is set)")
    resamples: int = option(1000, min=1, max=MAX_RESAMPLES, omit_default=True, record_default=False,
                            help="bootstrap replicates of the controls table's intervals")
    seed: int = option(0, min=0, max=SEED_MAX, omit_default=True, record_default=False,
                       help="seed of the controls table's bootstrap")
    group_field: str = option("", omit_default=True, record_default=False,
                              help="a column of the task's data naming each input's source (wiki_topic: article): "
                                   "the bootstrap resamples whole sources (a task without the column: each input)")


FIRST_STAGE = "first stage (FiD)"
FULL_SEARCH_SOURCE = "whole corpus, prompt-guided (pgra_full)"


def consistency_share(records: list[dict[str, Any]], d: int, pseudo: dict[str, str]) -> dict[str, Any]:
    """``{"share", "consistent", "evidence", "inputs"}`` of the top ``d`` ``ctxs`` of ``records`` (gold labels)."""
    consistent = evidence = 0
    for rec in records:
        for ctx in rec.get("ctxs", [])[:d]:
            evidence += 1
            consistent += int(pseudo[str(ctx["id"])] == str(rec["label"]))
    return {"share": consistent / evidence if evidence else float("nan"), "consistent": consistent,
            "evidence": evidence, "inputs": len(records)}


class PseudoLabeller:
    """The no-retrieval reader of a finished cell, labelling sentences; labels cached in ``cache_file``."""

    def __init__(self, cell: Path, cache_file: Path, batch_size: int = 64) -> None:
        self.cell, self.cache_file, self.batch_size = cell, cache_file, batch_size
        self.key = read_cell(cell / CELL_FILE).get("key")
        cached = read_json(cache_file) if cache_file.exists() else {}
        self.labels: dict[str, str] = cached.get("labels", {}) if cached.get("labeller") == self.key else {}
        self._predictor = None

    def label(self, sentences: dict[str, str]) -> dict[str, str]:
        """Pseudo-labels of ``{id: text}`` (new ones predicted, in batches; all saved to the cache)."""
        todo = [{"id": i, "text": t} for i, t in sentences.items() if i not in self.labels]
        if todo:
            if self._predictor is None:
                self._predictor = get_method("no_retrieval").load(self.cell)
                self._predictor.batch_size = self.batch_size
            for line in self._predictor.predict(todo):
                self.labels[str(line["id"])] = line["prediction"]
            write_json(self.cache_file, {"labeller": self.key, "cell": str(self.cell), "labels": self.labels})
        return {i: self.labels[i] for i in sentences}


LABELS_SUFFIX = ".labels.json"


def labels_sidecar(corpus: str | Path) -> Path:
    """Where a corpus file's evidence labels are kept: ``<folder>/<stem>.labels.json`` (``pgra tasks pool``)."""
    corpus = Path(corpus)
    return corpus.with_name(corpus.stem + LABELS_SUFFIX)


class CorpusLabels:
    """A labelled pool's true evidence labels from its sidecar (id = line): they only score consistency."""

    def __init__(self, sidecar: Path, task: str) -> None:
        data = read_json_object(sidecar)
        if data.get("task") != task or not isinstance(data.get("labels"), list):
            raise InputError(f"labels the evidence of task '{data.get('task')}', not '{task}'", path=sidecar,
                             field="task")
        self.sidecar, self.labels_list = sidecar, [str(x) for x in data["labels"]]

    def label(self, sentences: dict[str, str]) -> dict[str, str]:
        """The sidecar's label of each evidence id (its line in the corpus)."""
        try:
            return {i: self.labels_list[int(i)] for i in sentences}
        except (ValueError, IndexError):
            raise InputError(f"an evidence id is not a line of the labelled corpus ({len(self.labels_list)} lines)",
                             path=self.sidecar) from None


def task_labeller(runs: ExperimentRuns, task: str,
                  why: str = "label consistency") -> PseudoLabeller | CorpusLabels:
    """The labeller of ``task``'s evidence: the corpus's label sidecar, else the no-retrieval cell's reader."""
    sidecar = labels_sidecar(runs.cfg.index.corpus) if runs.cfg.index.corpus else None
    if sidecar is not None and sidecar.is_file():
        return CorpusLabels(sidecar, runs.task_name(task))
    cfg = runs.cfg.analysis.consistency
    seed = cfg.labeller_seed or runs.cfg.seeds[0]
    return PseudoLabeller(runs.require_cell(task, "no_retrieval", seed, why),
                          runs.out / runs.task_name(task) / "pseudo_labels.json", cfg.batch_size)


def evidence_consistency(labeller: PseudoLabeller | CorpusLabels, records: list[dict[str, Any]], d: int) -> dict[str, Any]:
    """:func:`consistency_share` of the top ``d`` of ``records``, their evidence labelled by ``labeller``."""
    if any("label" not in r for r in records):
        raise InputError(f"label consistency needs gold labels on every input; {sum('label' not in r for r in records)}"
                         " of the analysed split's have none", field="analysis.split")
    return consistency_share(records, d, labeller.label(evidence_texts(records, d)))


def evidence_texts(records: list[dict[str, Any]], d: int) -> dict[str, str]:
    """``{id: text}`` of the top ``d`` evidence of ``records``: what a labeller labels."""
    return {str(c["id"]): c["text"] for rec in records for c in rec.get("ctxs", [])[:d]}


def _lm_name(lm: str) -> str:
    return Path(lm.rstrip("/")).name or lm


def _extra_rerank(runs: ExperimentRuns, task: str, lm: str, top: int = 0) -> tuple[Any, Path, str]:
    """Config, folder and reuse key of ``task``'s reranking with ``lm`` (``top``: of the first ``top`` only)."""
    exp = runs.experiment
    cfg = replace(exp.rerank_config(task), lm=lm,
                  out=str(runs.out / runs.task_name(task) / f"rerank-{_lm_name(lm)}"))
    key = exp.stage_keys(task)["reranked"] + ":" + lm
    if top:
        cfg = replace(cfg, k=top, top_d=top, splits=[runs.split], corpus_pass="off", out=f"{cfg.out}-top{top}")
        key += f":top{top}:{runs.split}"
    return cfg, Path(cfg.out), key


def extra_reranked(runs: ExperimentRuns, task: str, lm: str, ctx, top: int = 0) -> Path:
    """Rerank ``task``'s candidates with another LM (reused when done) through the stage runner; its folder."""
    cfg, out, key = _extra_rerank(runs, task, lm, top)
    reuse_or_run(out, ".analysis_key", key, lambda: runs.experiment.stage("reranked").run(cfg, ctx), ctx)
    return out


def extra_reranks(runs: ExperimentRuns) -> list[tuple[str, str, bool, Any]]:
    """``(task, what, done, rerank config)`` of each reranking with ``rerank_lms``, for ``--dry-run``."""
    planned = []
    for task in runs.cfg.tasks:
        top = max(control_points(runs, task, planning=True)[0], default=0)
        for lm in runs.cfg.analysis.consistency.rerank_lms if top < _experiment_k(runs, task, True) else []:
            cfg, out, key = _extra_rerank(runs, task, lm)
            planned.append((task, f"rerank with {_lm_name(lm)}", finished_with(out, ".analysis_key", key), cfg))
        for lm in control_lms(runs, task) if top else []:
            cfg, out, key = _extra_rerank(runs, task, lm, top)
            planned.append((task, f"rank the first {top} candidates of {runs.split} with {_lm_name(lm)}",
                            finished_with(out, ".analysis_key", key), cfg))
    return planned


def label_consistency(runs: ExperimentRuns, ctx) -> list[dict[str, Any]]:
    """One row per task and evidence source, then the controls table's rows (they hold ``oracle``)."""
    cfg = runs.cfg.analysis.consistency
    rows: list[dict[str, Any]] = []
    controls: list[dict[str, Any]] = []
    for task in runs.cfg.tasks:
        name = runs.task_name(task)
        top = max(control_points(runs, task)[0], default=0)
        ranked = {lm: extra_reranked(runs, task, lm, ctx, top) for lm in control_lms(runs, task)} if top else {}
        within = _experiment_k(runs, task) if top >= _experiment_k(runs, task) else 0
        extra = {lm: extra_reranked(runs, task, lm, ctx) for lm in cfg.rerank_lms if not within}
        if not ctx.is_main:
            continue
        labeller = task_labeller(runs, task)
        sources: list[tuple[str, str | None, list[dict[str, Any]], int]] = [
            (FIRST_STAGE, None, list(runs.stage_records(task, "candidates").values()), runs.n_passages(task, "fid"))]
        d_pgra = runs.n_passages(task, "pgra")
        reranker_of = {FIRST_STAGE: "first stage"}
        if "reranked" in runs.experiment.reranked_stages():  # the prompt-guided reranker's
            lm = runs.settings(task).rerank.lm
            sources.append((f"PGRA ({_lm_name(lm)})", lm, list(runs.stage_records(task, "reranked").values()), d_pgra))
            reranker_of[sources[-1][0]] = runs.experiment.stage("reranked").reranker
        for lm in cfg.rerank_lms:  # the controls' ranking of the first `top` holds the experiment's k: read off it
            records = (list(runs.records(task, extra[lm]).values()) if not within else
                       [{**r, "ctxs": [c for c in r.get("ctxs", []) if int(c["retrieval_rank"]) <= within]}
                        for r in runs.records(task, ranked[lm]).values()])
            sources.append((f"PGRA ({_lm_name(lm)})", lm, records, d_pgra))
        # the grid's other reranked stages (fid_upr, fid_mmr ...): one row each, and the comparison of the rerankers
        others = runs.other_rerankers()
        for reranker, stage, method in others:
            title = reranker_class(reranker).title or reranker
            reranker_of[title] = reranker
            sources.append((title, None, list(runs.stage_records(task, stage).values()), runs.n_passages(task, method)))
        if FULL_SEARCH in runs.experiment.stages_needed():
            sources.append((FULL_SEARCH_SOURCE, None, list(runs.stage_records(task, FULL_SEARCH).values()),
                            runs.n_passages(task, "pgra_full")))
        first = {r["id"]: r for r in sources[0][2]}
        for source, lm, records, d in sources:
            row = {"task": name, "source": source, "lm": lm, "d": d, **evidence_consistency(labeller, records, d)}
            if others and source in reranker_of:  # (a grid of the prompt-guided reranker alone: rows as before)
                row.update({"reranker": reranker_of[source], **first_stage_overlap(records, first, d)})
            if isinstance(labeller, CorpusLabels):
                row["labels"] = "corpus"
            rows.append(row)
        if top:
            controls += controls_table(runs, task, labeller, ranked)
    return rows + controls


def _experiment_k(runs: ExperimentRuns, task: str, planning: bool = False) -> int:
    """The candidates the experiment's reranker ranks per input: its rerank.k, else all retrieved."""
    retrieved = _retrieved_k(runs, task, planning)
    return runs.settings(task, "pgra" if "pgra" in runs.cfg.methods else None).rerank.k or retrieved


def _retrieved_k(runs: ExperimentRuns, task: str, planning: bool = False) -> int:
    """The candidates retrieved per input: their folder's ``k``, else (``planning``) the config's ``retrieve.k``."""
    folder = runs.experiment.stage_dir(task, "candidates")
    if (folder / MANIFEST).exists() and not planning:
        return int(runs.experiment.stage("candidates").open(folder)["k"])
    return runs.experiment.retrieve_config(task).k


def control_lms(runs: ExperimentRuns, task: str) -> list[str]:
    """The controls table's reranker LMs: the experiment's (when its grid reranks), then ``rerank_lms``."""
    own = [runs.settings(task).rerank.lm] if "reranked" in runs.experiment.reranked_stages() else []
    return list(dict.fromkeys(own + list(runs.cfg.analysis.consistency.rerank_lms)))


def control_points(runs: ExperimentRuns, task: str, planning: bool = False) -> tuple[list[int], list[int]]:
    """The controls table's ks and ds for ``task`` (both empty: no table); a k beyond retrieve.k refused."""
    cfg = runs.cfg.analysis.consistency
    if not cfg.k and not cfg.d:
        return [], []
    s = runs.settings(task, "pgra") if "pgra" in runs.cfg.methods else runs.settings(task)
    k_max = _retrieved_k(runs, task, planning)
    ks = sorted(set(cfg.k or [s.rerank.k or k_max]))
    ds = sorted(set(cfg.d or [s.reader.n_passages]))
    if ks[-1] > k_max:
        raise InputError(f"k={ks[-1]} is beyond the {k_max} candidates retrieved per input (retrieve.k)",
                         field="analysis.consistency.k")
    return ks, ds


def input_groups(runs: ExperimentRuns, task: str, column: str) -> dict[str, str] | None:
    """``{input id: its value of column}`` in the analysed split's data; None when no row has the column."""
    spec = runs.task_spec(task)
    rows, source = _rows(spec.data, resolve_data_path(spec.data, runs.settings(task).data_dir), runs.split)
    id_col = _columns(spec.data)[2]
    groups, lacking = {}, None
    for n, (line, row) in enumerate(rows):
        if column in row:
            groups[str(row[id_col]) if id_col else f"{runs.split}-{n}"] = str(row[column])
        elif lacking is None:
            lacking = line
    if groups and lacking is not None:
        raise InputError(f"no column '{column}' on this row, though others have it", path=source, line=lacking,
                         field="analysis.consistency.group_field")
    return groups or None


def control_counts(first: list[dict[str, Any]], ranked: list[list[dict[str, Any]]], consistent: list[set[str]],
                   k: int, d: int) -> dict[str, np.ndarray]:
    """Per input, the evidence kept (min(d, candidates among the first k)) and how much of it is consistent for
    each source: the ``first`` stage's top d, the ``random`` floor's expectation, the ``oracle``, ``full`` (the first
    k hold ``kept`` consistent sentences) and each reranker's top d (``ranked[j][i]``: reranker j's ranking of
    input i)."""
    n = len(first)
    out = {name: np.zeros(n) for name in ("kept", "first", "random", "oracle", "full")}
    out.update({f"reranker{j}": np.zeros(n) for j in range(len(ranked))})
    for i, rec in enumerate(first):
        top = [str(c["id"]) for c in rec.get("ctxs", [])[:k]]
        ok = consistent[i]
        kept = min(d, len(top))
        hits = sum(t in ok for t in top)
        out["kept"][i] = kept
        out["first"][i] = sum(t in ok for t in top[:d])
        out["random"][i] = kept * hits / len(top) if top else 0.0
        out["oracle"][i] = min(kept, hits)
        out["full"][i] = float(hits >= kept)
        for j, ranking in enumerate(ranked):
            mine = [str(c["id"]) for c in ranking[i] if int(c["retrieval_rank"]) <= k][:d]
            out[f"reranker{j}"][i] = sum(t in ok for t in mine)
    return out


CONTROLS = (("reranker", "reranker's top d"), ("first", "first stage's top d (FiD)"),
            ("random", "random d of the top k (floor)"), ("oracle", "oracle (ceiling)"))


def controls_table(runs: ExperimentRuns, task: str, labeller, ranked: dict[str, Path]) -> list[dict[str, Any]]:
    """The controls table's rows of ``task`` per reranker LM, k and d: shares with intervals, tested gains."""
    cfg = runs.cfg.analysis.consistency
    ks, ds = control_points(runs, task)
    first = list(runs.stage_records(task, "candidates").values())
    if any("label" not in r for r in first):
        raise InputError("label consistency needs gold labels on every input", field="analysis.split")
    rankings = {lm: runs.records(task, folder) for lm, folder in ranked.items()}
    first = [r for r in first if all(str(r["id"]) in got for got in rankings.values())]
    top = max(ks)
    labels = labeller.label(evidence_texts(first, top))
    consistent = [{str(c["id"]) for c in r.get("ctxs", [])[:top] if labels[str(c["id"])] == str(r["label"])}
                  for r in first]
    groups = input_groups(runs, task, cfg.group_field) if cfg.group_field else None
    clusters = [groups.get(str(r["id"]), f"input {r['id']}") for r in first] if groups else None
    weights = input_weights(cfg.resamples, len(first), cfg.seed, clusters)
    lms = list(rankings)
    ranked_lists = [[rankings[lm][str(r["id"])].get("ctxs", []) for r in first] for lm in lms]
    rows = []
    for k in ks:
        for d in (d for d in ds if d <= k):
            counts = control_counts(first, ranked_lists, consistent, k, d)
            shared = {name: share_bootstrap(counts[name], counts["kept"], weights) for name, _ in CONTROLS[1:]}
            full = share_bootstrap(counts["full"], np.ones(len(first)), weights)
            for j, lm in enumerate(lms):
                mine = share_bootstrap(counts[f"reranker{j}"], counts["kept"], weights)
                gain = share_bootstrap(counts[f"reranker{j}"] - counts["random"], counts["kept"], weights)
                over_first = share_bootstrap(counts[f"reranker{j}"] - counts["first"], counts["kept"], weights)
                row = {"task": runs.task_name(task), "lm": _lm_name(lm), "k": k, "d": d, "inputs": len(first),
                       "clusters": len(set(clusters)) if clusters else len(first),
                       "labels": "corpus" if isinstance(labeller, CorpusLabels) else "pseudo"}
                for name, res in (("reranker", mine), *shared.items()):
                    row.update({name: res.delta, f"{name}_low": res.ci_low, f"{name}_high": res.ci_high})
                row.update({"over_floor": gain.delta, "over_floor_p": gain.p_value, "over_first": over_first.delta,
                            "over_first_p": over_first.p_value, "resamples": cfg.resamples,
                            "full_inputs": full.delta, "full_inputs_low": full.ci_low, "full_inputs_high": full.ci_high})
                rows.append(row)
    return rows


def first_stage_overlap(records: list[dict[str, Any]], first: dict[str, dict[str, Any]], d: int) -> dict[str, Any]:
    """How much of each top ``d`` the first stage's own top ``d`` holds (``overlap``), and ``promoted``."""
    shared = kept = 0
    for rec in records:
        mine = [str(c["id"]) for c in rec.get("ctxs", [])[:d]]
        theirs = {str(c["id"]) for c in first[rec["id"]].get("ctxs", [])[:d]}
        shared += sum(i in theirs for i in mine)
        kept += len(mine)
    return {"overlap": shared / kept if kept else float("nan"), "promoted": 1 - shared / kept if kept else float("nan")}


def _interval(r: dict[str, Any], name: str) -> str:
    return f"{pct(r[name])} [{pct(r[name + '_low'])}, {pct(r[name + '_high'])}]"


def render_controls(w: Writer, rows: list[dict[str, Any]]) -> None:
    """The controls table (against LM, k and d, with floor and ceiling) and its Figure 4 layout per task and d."""
    w.section("consistency_controls", rows, "Label consistency with controls",
              ("Per task, reranker LM, k (candidates ranked) and d (evidence kept): the share of kept evidence whose "
               "label (`labels`: the corpus's true labels, or pseudo-labels of the no-retrieval reader) equals the "
               "input's gold label, for the reranker's top d of the first k, the first stage's top d (FiD's "
               "evidence), a random d of the first k (the floor: its expectation) and the oracle's (the ceiling: "
               "per input min(d, consistent among the first k) of d; `d consistent`: the share of inputs whose "
               "first k hold d consistent sentences). In brackets the 2.5-97.5% bootstrap interval "
               "over the inputs (`clusters` < `inputs`: whole sources resampled), all sources on the same "
               "replicates; `over floor` and `over FiD`: the reranker minus the floor or the first stage in points, "
               "each with its two-sided bootstrap p."),
              ["task", "LM", "k", "d", "labels", "reranker (%)", "first stage (%)", "random (%)", "oracle (%)",
               "d consistent (%)", "over floor", "p", "over FiD", "p", "inputs", "clusters"],
              lambda r: (r["task"], r["lm"], r["k"], r["d"], r["labels"], _interval(r, "reranker"),
                         _interval(r, "first"), _interval(r, "random"), _interval(r, "oracle"), _interval(r, "full_inputs"),
                         *_gain(r, "over_floor"), *_gain(r, "over_first"), r["inputs"], r["clusters"]))
    for task in dict.fromkeys(r["task"] for r in rows):
        for d in dict.fromkeys(r["d"] for r in rows if r["task"] == task):
            _size_figure(w, [r for r in rows if r["task"] == task and r["d"] == d], task, d)


def _gain(r: dict[str, Any], name: str) -> tuple[str, str]:
    if name not in r:  # a table written before the column existed
        return "", ""
    return f"{100 * r[name]:+.1f}", p_text(r[f"{name}_p"], r["resamples"]).lstrip("=")


def _size_figure(w: Writer, rows: list[dict[str, Any]], task: str, d: int) -> None:
    """The paper's Figure 4 layout: consistency against the reranker LM, a panel per k, floor and ceiling."""
    lms = list(dict.fromkeys(r["lm"] for r in rows))
    panels = {}
    for k in dict.fromkeys(r["k"] for r in rows):
        at = {r["lm"]: r for r in rows if r["k"] == k}
        panels[f"k={k}"] = {label: [(at[lm][name], at[lm][f"{name}_low"], at[lm][f"{name}_high"]) for lm in lms]
                            for name, label in CONTROLS}
    path = interval_panels(w.runs.out / f"consistency_size_{task}_d{d}.png", panels, lms,
                           f"{task}: label consistency of the top {d} against the reranker", "reranker LM",
                           "consistent evidence (%)")
    w.figure(path, f"Label consistency against the reranker, {task}, d={d}",
             f"The paper's Figure 4 layout: per k (candidates ranked), the share of the kept {d} whose label equals "
             "the input's, for each reranker LM (in the configured order), the first stage's top d, a random d of "
             "the top k (floor) and the oracle (ceiling), with 2.5-97.5% bootstrap intervals.")


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    controls = [r for r in rows if "oracle" in r]
    rows = [r for r in rows if "oracle" not in r]
    w.section("consistency", rows, "Label consistency",
              ("Share of evidence sentences whose pseudo-label (from the no-retrieval reader) equals their input's "
               "gold label, over every (input, evidence) pair (the paper's Figure 2; against the reranker's size its "
               "Figure 4 / Tables 9-10)."),
              ["task", "evidence", "d", "consistent", "evidence pairs", "share (%)"],
              lambda r: (r["task"], r["source"], r["d"], r["consistent"], r["evidence"], pct(r["share"])))
    compared = [r for r in rows if "reranker" in r]
    if compared:
        w.section("rerankers", compared, "Rerankers compared",
                  ("Per reranked stage of the grid: the label consistency of the top d it keeps (as above) and how "
                   "much of it the first stage's own top d already holds (overlap) or it promoted from beyond it."),
                  ["task", "reranker", "d", "label consistency (%)", "overlap with first stage (%)", "promoted (%)"],
                  lambda r: (r["task"], r["reranker"], r["d"], pct(r["share"]), pct(r["overlap"]), pct(r["promoted"])))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    sources = list(dict.fromkeys(r["source"] for r in rows))
    share = {(r["task"], r["source"]): r["share"] for r in rows}
    series = {s: [share.get((t, s), float("nan")) for t in tasks] for s in sources}
    path = grouped_bars(w.runs.out / "label_consistency.png", tasks, series,
                        "Pseudo-label consistency of the evidence", "consistent evidence (%)", "task")
    w.figure(path, "Label consistency", "Share of evidence whose no-retrieval pseudo-label equals the input's gold "
             "label, per task and evidence source.")
    if controls:
        render_controls(w, controls)


register_analysis(Analysis("consistency", compute=lambda runs, ctx: label_consistency(runs, ctx), render=render,
                           config=ConsistencyConfig, help='label consistency', every_process=True,
                           reranks=extra_reranks))


__all__ = ["FIRST_STAGE", "FULL_SEARCH_SOURCE", "CorpusLabels", "PseudoLabeller", "consistency_share",
           "control_counts", "controls_table", "evidence_consistency", "extra_reranked", "first_stage_overlap",
           "label_consistency", "labels_sidecar", "task_labeller"]
