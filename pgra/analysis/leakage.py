"""Leakage audit: is a task's test (or dev) input in the retrieval corpus (exactly, or as a near duplicate among the
first k), and did a reader read it? docs/analyses.md tells the rest."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.config import MAX_ITEMS, option
from ..core.markdown import md_code, md_text
from ..data.corpus import CorpusStore
from ..retrieval.base import recorded_retriever, retriever_title
from ..retrieval.candidates_stage import CandidatesStage
from ..retrieval.retrieve import read_excluded_ids
from ..storage.artifacts import path_under, write_text
from .base import Analysis, register_analysis
from .inputs import ExperimentRuns
from .writer import Writer, number


@dataclass
class LeakageConfig:
    """Test and dev inputs with an exact or near duplicate in the retrieval corpus, and who read it."""

    threshold: float = option(0.95, min=0, max=1, help="cosine (index encoder) at or above which a corpus "
                                                       "sentence is a near duplicate of an input (dense indexes)")
    splits: list[str] = option(default_factory=lambda: ["dev", "test"], path_segment=True, help="splits audited")
    examples: int = option(5, min=0, max=MAX_ITEMS, help="flagged inputs shown per task and split")


IDS_FILE = "leakage_ids.txt"
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """The form exact duplicates are compared in: NFKC, case folded, only letters and digits, single spaces."""
    return " ".join(_NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


def exact_duplicates(queries: dict[str, str], corpus: list[tuple[Any, str]] | Any) -> dict[str, list[str]]:
    """Per query id, the ids of the corpus sentences equal to it after :func:`normalise` (one pass)."""
    wanted: dict[str, list[str]] = {}
    for qid, text in queries.items():
        if form := normalise(text):
            wanted.setdefault(form, []).append(qid)
    found: dict[str, list[str]] = {}
    for cid, text in corpus:
        for qid in wanted.get(normalise(text), ()):
            found.setdefault(qid, []).append(str(cid))
    return found


def near_duplicates(records: list[dict[str, Any]], threshold: float) -> dict[str, list[tuple[str, float]]]:
    """Per input id, the candidates whose first-stage score (a cosine) is at least ``threshold``."""
    out: dict[str, list[tuple[str, float]]] = {}
    for rec in records:
        hits = [(str(c["id"]), float(c["score"])) for c in rec.get("ctxs", []) if float(c["score"]) >= threshold]
        if hits:
            out[str(rec["id"])] = hits
    return out


def _corpus_rows(store: CorpusStore, batch: int = 65536):
    for start in range(0, len(store), batch):
        positions = range(start, min(start + batch, len(store)))
        yield from zip(store.external_ids(list(positions)), store.texts(positions), strict=True)


def read_evidence(runs: ExperimentRuns, task: str, method: str, split: str) -> list[list[dict[str, Any]]]:
    """Per finished seed of ``method``, its prediction lines on ``split``."""
    analysed, runs.split = runs.split, split
    try:
        return [runs.predictions(task, method, s) for s in runs.finished_seeds(task, method)]
    finally:
        runs.split = analysed


def audit_task(runs: ExperimentRuns, task: str) -> list[dict[str, Any]]:
    """The audit rows (one per split) of ``task``; writes the flagged ids file."""
    cfg = runs.cfg.analysis.leakage
    folder = runs.experiment.stage_dir(task, "candidates")
    manifest = CandidatesStage.open(folder)
    index = manifest["index"]
    retriever = recorded_retriever(index)
    dense = bool(retriever and retriever.cosine_scores)  # its scores are cosines: near duplicates are seen
    splits = [s for s in cfg.splits if (folder / f"{s}.jsonl").exists()]
    records = {s: list(runs.stage_records(task, "candidates", s).values()) for s in splits}
    store = CorpusStore(Path(index["path"]) / "corpus")
    try:
        exact = exact_duplicates({f"{s}\t{r['id']}": r["text"] for s in splits for r in records[s]},
                                 _corpus_rows(store))
    finally:
        store.close()
    rows, flagged_all = [], set()
    for split in splits:
        near = near_duplicates(records[split], cfg.threshold) if dense else {}
        flagged: dict[str, set[str]] = {}
        for rec in records[split]:
            qid = str(rec["id"])
            ids = set(exact.get(f"{split}\t{qid}", [])) | {cid for cid, _ in near.get(qid, [])}
            if ids:
                flagged[qid] = ids
        flagged_all |= {cid for ids in flagged.values() for cid in ids}
        by_id = {str(r["id"]): r for r in records[split]}
        examples = []
        for qid in list(flagged)[: cfg.examples]:
            ctx_text = {str(c["id"]): c["text"] for c in by_id[qid].get("ctxs", [])}
            examples.append({"id": qid, "text": by_id[qid]["text"], "exact": exact.get(f"{split}\t{qid}", []),
                             "near": [{"id": cid, "cosine": score, "text": ctx_text[cid]}
                                      for cid, score in near.get(qid, [])[:3]]})
        methods = {}
        for method in runs.methods("corpus"):
            seeds = read_evidence(runs, task, method, split)
            pairs = sum(len(lines) for lines in seeds)
            read = sum(bool(flagged.get(str(x["id"]), set()) & {str(e) for e in x.get("evidence", [])})
                       for lines in seeds for x in lines)
            methods[method] = {"seeds": len(seeds), "pairs": pairs, "read_duplicate": read}
        exact_inputs = sum(f"{split}\t{r['id']}" in exact for r in records[split])
        rows.append({"task": runs.task_name(task), "split": split, "inputs": len(records[split]),
                     "exact": exact_inputs, "near": len(near) if dense else None,
                     "flagged_inputs": len(flagged), "threshold": cfg.threshold, "k": manifest["k"],
                     "max_cosine": max((float(c["score"]) for r in records[split] for c in r.get("ctxs", [])[:1]),
                                       default=None) if dense else None,
                     "retriever": index["retriever"], "corpus_size": index.get("corpus_size"),
                     "excluded": manifest.get("excluded"), "methods": methods, "examples": examples})
    excluded = manifest.get("excluded")
    if excluded and Path(excluded["file"]).is_file():  # ids the candidates already left out stay flagged (they
        flagged_all |= read_excluded_ids(excluded["file"])  # are gone from them, so the audit cannot see them again)
    ids_file = path_under(runs.out, runs.task_name(task), IDS_FILE)
    write_text(ids_file, "".join(f"{cid}\n" for cid in sorted(flagged_all)))
    for row in rows:
        row["ids_file"] = str(ids_file)
        row["flagged_ids"] = len(flagged_all)
    return rows


def leakage(runs: ExperimentRuns) -> list[dict[str, Any]]:
    """The leakage audit of every task of the experiment."""
    return [row for task in runs.cfg.tasks for row in audit_task(runs, task)]


def _cells(r: dict[str, Any]) -> tuple[Any, ...]:
    """An audit row's cells in the table."""
    near = f"– ({retriever_title(r['retriever'])})" if r["near"] is None else \
        f"{r['near']} (t={r['threshold']}, k={r['k']}; highest cos {number(r.get('max_cosine'), '.3f')})"
    read = "; ".join(f"{m}: {v['read_duplicate']}/{v['pairs']}" for m, v in r["methods"].items()) or "–"
    excl = r["excluded"]
    excluded = f"{excl['ids']} ids, {sum(excl['removed_from_top_k'].values())} removed" if excl else "no"
    return r["task"], r["split"], r["inputs"], r["exact"], near, r["flagged_ids"], read, excluded


def render(w: Writer, rows: list[dict[str, Any]]) -> None:
    w.section("leakage", rows, "Leakage audit",
              ("Inputs with an exact duplicate in the retrieval corpus (equal after NFKC, case folding and dropping "
               "all but letters and digits) or a near one (cosine under the index's encoder at or above the "
               "threshold, among the first stage's k candidates; dense indexes only), and how many (input, seed) "
               "pairs of each evidence-reading method read a duplicate of their own input. The flagged corpus ids "
               "are in `<task>/leakage_ids.txt`; `retrieve.exclude_ids` drops them from a task's candidates."),
              ["task", "split", "inputs", "exact", "near (cos ≥ t, in top k)", "flagged ids", "read by", "excluded"],
              _cells)
    for r in rows:
        for ex in r["examples"]:
            near = "; ".join(f"{md_text(n['id'])} (cos {n['cosine']:.3f}): {md_text(n['text'])}" for n in ex["near"])
            w.md.append(f"- {r['task']}/{r['split']} {md_code(ex['id'])}: {md_text(ex['text'])}" +
                        (f" — exact: {md_text(', '.join(map(str, ex['exact'])))}" if ex["exact"] else "") +
                        (f" — near: {near}" if near else ""))
    if any(r["examples"] for r in rows):
        w.md.append("")


register_analysis(Analysis("leakage", compute=lambda runs, ctx: leakage(runs), render=render,
                           config=LeakageConfig, help="leakage audit"))


__all__ = ["IDS_FILE", "audit_task", "exact_duplicates", "leakage", "near_duplicates", "normalise"]
