"""Pseudo-label consistency (the paper's Figure 2 / Table 10): how often evidence carries its input's label.

A reader trained without retrieval labels every evidence sentence; an evidence sentence is consistent when
that pseudo-label equals its input's gold label. The share is counted over every (input, evidence) pair of the
analysed split, for the first stage's top d (FiD's evidence), the reranker's top d (PGRA's), the top d of
any further reranker LMs, and the top d of the prompt-guided search of the whole corpus (``pgra_full``'s).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..artifacts import read_json, write_json
from ..config import MAX_BATCH, SEED_MAX, option
from ..errors import InputError
from ..experiment import CELL_FILE
from ..experiment.grid import FULL_SEARCH
from ..experiment.reuse import reuse_or_run
from ..predictions import read_cell
from ..rerank.base import DEFAULT, reranker_class
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .writer import Writer, pct


@dataclass
class ConsistencyConfig:
    """Pseudo-label consistency (the paper's Figure 2 / Table 10)."""

    labeller_seed: int = option(0, min=0, max=SEED_MAX,
                                help="seed of the no_retrieval cell that labels the evidence (0 = first seed)")
    rerank_lms: list[str] = option(default_factory=list,
                                   help="more reranker LMs (paths or hub ids): each reranks the candidates again "
                                        "and its top d is labelled too (Table 10's OPT sizes)")
    batch_size: int = option(64, min=1, max=MAX_BATCH, help="evidence sentences per labelling batch")


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
        self.labelled_now = 0
        self._predictor = None

    def label(self, sentences: dict[str, str]) -> dict[str, str]:
        """Pseudo-labels of ``{id: text}`` (new ones predicted, in batches; all saved to the cache)."""
        todo = [{"id": i, "text": t} for i, t in sentences.items() if i not in self.labels]
        if todo:
            if self._predictor is None:
                from ..methods import get_method

                self._predictor = get_method("no_retrieval").load(self.cell)
                self._predictor.batch_size = self.batch_size
            for line in self._predictor.predict(todo):
                self.labels[str(line["id"])] = line["prediction"]
            self.labelled_now += len(todo)
            write_json(self.cache_file, {"labeller": self.key, "cell": str(self.cell), "labels": self.labels})
        return {i: self.labels[i] for i in sentences}


def task_labeller(runs: ExperimentRuns, task: str, why: str = "label consistency") -> PseudoLabeller:
    """The pseudo-labeller of ``task``: the no-retrieval cell at ``analysis.consistency.labeller_seed`` (labels
    cached in the analysis folder's ``<task>/pseudo_labels.json``, shared by every analysis that labels evidence)."""
    cfg = runs.cfg.analysis.consistency
    seed = cfg.labeller_seed or runs.cfg.seeds[0]
    return PseudoLabeller(runs.require_cell(task, "no_retrieval", seed, why),
                          runs.out / runs.task_name(task) / "pseudo_labels.json", cfg.batch_size)


def evidence_consistency(labeller: PseudoLabeller, records: list[dict[str, Any]], d: int) -> dict[str, Any]:
    """:func:`consistency_share` of the top ``d`` of ``records``, their evidence labelled by ``labeller``."""
    if any("label" not in r for r in records):
        raise InputError(f"label consistency needs gold labels on every input; {sum('label' not in r for r in records)}"
                         " of the analysed split's have none", field="analysis.split")
    return consistency_share(records, d, labeller.label(_sentences(records, d)))


def _sentences(records: list[dict[str, Any]], d: int) -> dict[str, str]:
    return {str(c["id"]): c["text"] for rec in records for c in rec.get("ctxs", [])[:d]}


def _lm_name(lm: str) -> str:
    return Path(lm.rstrip("/")).name or lm


def _extra_rerank(runs: ExperimentRuns, task: str, lm: str) -> tuple[Any, Path, str]:
    """The experiment's reranking of ``task`` with another LM: its config, folder and reuse key."""
    exp = runs.experiment
    cfg = replace(exp.rerank_config(task), lm=lm,
                  out=str(runs.out / runs.task_name(task) / f"rerank-{_lm_name(lm)}"))
    return cfg, Path(cfg.out), exp.stage_keys(task)["reranked"] + ":" + lm


def extra_reranked(runs: ExperimentRuns, task: str, lm: str, ctx) -> Path:
    """Rerank the experiment's candidates of ``task`` with another LM (reused when done); returns the folder."""
    from ..rerank.reranker import rerank

    cfg, out, key = _extra_rerank(runs, task, lm)
    reuse_or_run(out, ".analysis_key", key, lambda: rerank(cfg, ctx), ctx)
    return out


def extra_reranks(runs: ExperimentRuns) -> list[tuple[str, str, bool]]:
    """``(task, what, done)`` for each reranking with ``analysis.consistency.rerank_lms`` (for ``pgra analyze
    --dry-run``); ``done``: a finished folder of the same key is reused."""
    from ..experiment.reuse import finished_with

    planned = []
    for task in runs.cfg.tasks:
        for lm in runs.cfg.analysis.consistency.rerank_lms:
            _, out, key = _extra_rerank(runs, task, lm)
            planned.append((task, f"rerank with {_lm_name(lm)}", finished_with(out, ".analysis_key", key)))
    return planned


def label_consistency(runs: ExperimentRuns, ctx) -> list[dict[str, Any]]:
    """One row per task and evidence source: ``{"task", "source", "lm", "d", "share", "consistent", ...}``."""
    cfg = runs.cfg.analysis.consistency
    rows = []
    for task in runs.cfg.tasks:
        name = runs.task_name(task)
        extra = {lm: extra_reranked(runs, task, lm, ctx) for lm in cfg.rerank_lms}
        if not ctx.is_main:
            continue
        labeller = task_labeller(runs, task)
        sources: list[tuple[str, str | None, list[dict[str, Any]], int]] = []
        d_fid = runs.n_passages(task, "fid")
        sources.append((FIRST_STAGE, None, list(runs.stage_records(task, "candidates").values()), d_fid))
        d_pgra = runs.n_passages(task, "pgra")
        reranker_of = {FIRST_STAGE: "first stage"}
        if DEFAULT in runs.experiment.rerankers_needed():
            lm = runs.settings(task).rerank.lm
            sources.append((f"PGRA ({_lm_name(lm)})", lm, list(runs.stage_records(task, "reranked").values()), d_pgra))
            reranker_of[sources[-1][0]] = DEFAULT
        for lm, folder in extra.items():
            sources.append((f"PGRA ({_lm_name(lm)})", lm, list(runs.records(task, folder).values()), d_pgra))
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
            rows.append(row)
    return rows


def first_stage_overlap(records: list[dict[str, Any]], first: dict[str, dict[str, Any]], d: int) -> dict[str, Any]:
    """How much of each input's top ``d`` the first stage's own top ``d`` holds (``overlap``: mean share) and the
    share of kept sentences promoted from beyond it (``promoted``)."""
    shared = kept = 0
    for rec in records:
        mine = [str(c["id"]) for c in rec.get("ctxs", [])[:d]]
        theirs = {str(c["id"]) for c in first[rec["id"]].get("ctxs", [])[:d]}
        shared += sum(i in theirs for i in mine)
        kept += len(mine)
    return {"overlap": shared / kept if kept else float("nan"), "promoted": 1 - shared / kept if kept else float("nan")}


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    from .plots import grouped_bars

    w.section("consistency", rows, "Label consistency",
              ("Share of evidence sentences whose pseudo-label (from the no-retrieval reader) equals their input's "
               "gold label, over every (input, evidence) pair (the paper's Figure 2 / Table 10)."),
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


register_analysis(Analysis("consistency", compute=lambda runs, ctx: label_consistency(runs, ctx), render=render,
                           config=ConsistencyConfig, help='label consistency', every_process=True,
                           reranks=extra_reranks))


__all__ = ["FIRST_STAGE", "FULL_SEARCH_SOURCE", "PseudoLabeller", "consistency_share", "evidence_consistency",
           "extra_reranked", "first_stage_overlap", "label_consistency", "task_labeller"]
