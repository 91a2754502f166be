"""Case study (the paper's Table 9): chosen inputs with the gold label, every method's prediction and evidence."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ..core.config import MAX_ITEMS, SEED_MAX, option
from ..core.errors import InputError
from ..core.markdown import md_cell, md_code, md_row, md_table, md_text
from ..methods import get_method
from ..storage.artifacts import write_text
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .writer import Writer


@dataclass
class CaseStudyConfig:
    """Inputs shown with every method's prediction and top evidence (the paper's Table 9)."""

    ids: list[str] = option(default_factory=list, help="input ids to show (default: n drawn at random)")
    n: int = option(5, min=1, max=MAX_ITEMS, help="inputs drawn at random when no ids are given")
    seed: int = option(0, min=0, max=SEED_MAX, help="seed of the random draw")
    top: int = option(3, min=1, max=MAX_ITEMS, help="evidence sentences shown per method")
    prefer_disagreement: bool = option(True, help="draw from the inputs where FiD and PGRA disagree when any do")


def choose_inputs(ids: list[str], candidates: list[str], n: int, seed: int, preferred: list[str]) -> list[str]:
    """``ids`` when given, else ``n`` drawn with ``seed``, from ``preferred`` first, in input order."""
    if ids:
        unknown = [i for i in ids if i not in candidates]
        if unknown:
            raise InputError(f"case study ids not among the analysed inputs: {unknown[:5]}",
                             field="analysis.case_study.ids")
        return list(ids)
    rng = random.Random(seed)
    first = [i for i in candidates if i in set(preferred)]
    rest = [i for i in candidates if i not in set(preferred)]
    chosen = rng.sample(first, min(n, len(first)))
    chosen += rng.sample(rest, min(n - len(chosen), len(rest)))
    order = {i: k for k, i in enumerate(candidates)}
    return sorted(chosen, key=order.__getitem__)


def _cell_text(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _evidence(runs: ExperimentRuns, task: str, method: str, line: dict[str, Any],
              top: int) -> list[tuple[int, str]]:
    """Up to ``top`` evidence items of a prediction as (position, text with score, first-stage rank or label)."""
    kind = get_method(method).evidence
    if kind == "none":
        return []
    items = []
    if kind == "corpus":
        data = runs.experiment.method(task, method).data_dir
        ctxs = {str(c["id"]): c for c in runs.records(task, data)[str(line["id"])].get("ctxs", [])}
        for i in line["evidence"][:top]:
            if (c := ctxs.get(str(i))) is None:
                items.append(f"#{i}")
                continue
            where = f"p={c['score']:.3f}, first-stage rank {c['retrieval_rank']}" if "retrieval_rank" in c \
                else f"score {c['score']:.3f}" if c.get("score") is not None else ""
            items.append(f"{_cell_text(c['text'])} ({where})" if where else _cell_text(c["text"]))
    else:  # demonstrations: the ones next to the input in the prompt; voters: the nearest
        train = runs.stage_records(task, "candidates", "train")
        ids = line["evidence"]
        first = max(0, len(ids) - top) if get_method(method).evidence_in_prompt else 0
        for pos in range(first, min(len(ids), first + top)):
            r = train.get(str(ids[pos]))
            text = f"{_cell_text(r['text'])} [{r.get('label')}]" if r else f"#{ids[pos]}"
            items.append((pos + 1, text))
        return items
    return list(enumerate(items, start=1))


def case_study(runs: ExperimentRuns) -> tuple[str, list[dict[str, Any]]]:
    """The case study as markdown, and its rows (input, gold, per method: prediction and evidence)."""
    cfg = runs.cfg.analysis.case_study
    lines = ["# Case study", "",
             f"Inputs of the {runs.split} split with each method's prediction (seed {runs.cfg.seeds[0]}) and its "
             f"top {cfg.top} evidence: corpus sentences with the reranker's probability p and their first-stage "
             "rank (PGRA) or the first-stage score (FiD); the nearest voters (kNN vote) and the demonstrations right before the "
             "input in the prompt (in-context learning), numbered by their position, with their [label].", ""]
    rows = []
    for task in runs.cfg.tasks:
        seed = runs.cfg.seeds[0]
        methods = [m for m in runs.cfg.methods if runs.cell(task, m, seed) is not None]
        if not methods:
            continue
        preds = {m: {str(x["id"]): x for x in runs.predictions(task, m, seed)} for m in methods}
        inputs = list(preds[methods[0]])
        disagree = []
        if cfg.prefer_disagreement and {"fid", "pgra"} <= set(methods):
            disagree = [i for i in inputs if preds["fid"][i]["prediction"] != preds["pgra"][i]["prediction"]]
        chosen = choose_inputs([str(i) for i in cfg.ids], inputs, cfg.n, cfg.seed, disagree)
        lines += [f"## {runs.task_name(task)}", ""]
        for i in chosen:
            first = preds[methods[0]][i]
            lines += [f"### input {md_text(_cell_text(i))}: gold {md_code(_cell_text(first['label']))}", "",
                      f"> {md_text(_cell_text(first['text'], 500))}", "", *md_table(["method", "prediction", "evidence (top)"], [])]
            row = {"task": runs.task_name(task), "id": i, "text": first["text"], "label": first["label"], "methods": {}}
            for m in methods:
                line = preds[m][i]
                mark = "✓" if line["prediction"] == line["label"] else "✗"
                evidence = _evidence(runs, task, m, line, cfg.top)
                row["methods"][m] = {"prediction": line["prediction"], "evidence": [e for _, e in evidence]}
                shown = md_cell("\n".join(f"{k}. {e}" for k, e in evidence)) or "–"  # one line each (<br>)
                lines.append(md_row([m, f"{line['prediction']} {mark}"]) + f" {shown} |")
            lines.append("")
            rows.append(row)
    return "\n".join(lines), rows
def write_case_study(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """Write ``case_study.md`` into the analysis folder; its rows."""
    text, rows = case_study(runs)
    write_text(runs.out / "case_study.md", text + "\n")
    return rows


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    if (w.runs.out / "case_study.md").exists():
        w.tables["case_study"] = rows
        w.md += ["## Case study", "", "[case_study.md](case_study.md)", ""]


register_analysis(Analysis("case_study", compute=lambda runs, ctx: write_case_study(runs), render=render,
                           config=CaseStudyConfig, help="case study", render_empty=True))


__all__ = ["case_study", "choose_inputs"]
