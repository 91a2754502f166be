"""The prompt-guided reranker's stage (``pgra rerank`` with ``rerank.reranker: prompt_guided``, the default): score
each query's first-stage candidates with prompt-guided LM embeddings (Eq. 3; docs/stage2-reranking.md).

The embedding and the scoring are the in-memory :class:`~pgra.rerank.prompt_guided.in_memory.PromptGuidedReranker`'s
(the one ``Pipeline`` replays); this module keeps the caches (keyed by LM, template, demonstrations, prompt format
and corpus; with per-query demonstrations, a split's rows are each query followed by its candidates), the
processes (ranks embed disjoint rows, rank 0 scores and writes) and the folder.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import InputError
from ...core.progress import progress
from ...lm.prompts import demo_prefix, render_demo
from ...retrieval.candidates_stage import StageInputs
from ...runtime.distributed import gather_objects, main_computes
from ...selection import get_selector
from ...selection.base import with_index_encoder
from ...stages.runner import StageRun
from ...storage.artifacts import write_json
from ...tasks import Example, TaskSpec
from ..config import RerankConfig
from ..stage import train_queries
from .corpus_pass import embed_rows as _embed_rows
from .corpus_pass import open_cache as _open_cache
from .corpus_pass import query_caches_of, run_corpus_pass
from .in_memory import PromptGuidedReranker, evidence_cache_key, prompt_key


def demo_records(demos: list[Example]) -> list[dict[str, Any]]:
    """The ``demonstrations`` field of a reranked record: each demonstration's id and label, in prompt order."""
    return [{"id": d.id, "label": d.label} for d in demos]


def _shared_prompt(cfg, ctx, task, store, cand, data, splits, reranker, demos):
    """One prompt prefix for every text: evidence embedded once per corpus row, queries once per split."""
    embedder = reranker.embedder
    base_key = prompt_key(embedder, cfg.lm, task, demos)
    evidence = _open_cache(ctx, cfg.cache_dir, evidence_cache_key(base_key, cand["index"]["corpus_content_sha256"]),
                           len(store), embedder.dim)
    rows_of = {split: [np.fromiter((store.position(c["id"]) for c in r["ctxs"]), dtype=np.int64)
                       for r in data[split]] for split in splits}
    all_rows = np.unique(np.concatenate([rows for split in splits for rows in rows_of[split]]))
    missing = evidence.missing(all_rows)  # reads every marked row once (damaged rows count as missing)
    hits_before = len(all_rows) - len(missing)
    _embed_rows(reranker, evidence, all_rows, store.texts, demos, cfg, ctx, "evidence", missing)
    query_caches = query_caches_of(cfg, ctx, task, data, splits, reranker, demos)

    def vectors(split: str, qi: int) -> tuple[np.ndarray, np.ndarray]:
        return query_caches[split].get(np.array([qi]))[0], evidence.get(rows_of[split][qi])

    info = {"evidence_rows": int(len(all_rows)), "evidence_cache_hits": int(hits_before),
            "cache": str(evidence.directory)}
    return vectors, info


def per_query_cache_key(base_key: dict[str, Any], task: TaskSpec, split: str, records: list[dict[str, Any]],
                        demos: list[list[Example]], corpus_fingerprint: str) -> dict[str, Any]:
    """The key of a split's per-query cache: rows are each query then its candidates, under that query's prompt."""
    h = hashlib.sha256()
    for rec, ds in zip(records, demos, strict=True):
        h.update(json.dumps([rec["text"], [c["id"] for c in rec["ctxs"]], [render_demo(task, d) for d in ds]],
                            ensure_ascii=False).encode())
    return {**base_key, "demos": "per query", "rows": f"per-query:{split}", "queries": h.hexdigest(),
            "corpus": corpus_fingerprint}


def _per_query_prompts(cfg, ctx, task, store, cand, data, splits, reranker, demos_of):
    """A prompt per query (its own demonstrations): the query and its candidates share that query's prefix."""
    embedder = reranker.embedder
    base_key = prompt_key(embedder, cfg.lm, task, [])
    show = cfg.show_progress and ctx.is_main
    caches, offsets = {}, {}
    for split in splits:
        records = data[split]
        sizes = np.array([1 + len(r["ctxs"]) for r in records], dtype=np.int64)
        offsets[split] = np.concatenate([[0], np.cumsum(sizes)])
        key = per_query_cache_key(base_key, task, split, records, demos_of[split], cand["index"]["corpus_content_sha256"])
        cache = _open_cache(ctx, cfg.cache_dir, key, int(sizes.sum()), embedder.dim)
        off = offsets[split]
        mine = [qi for qi in ctx.shard(len(records)) if len(cache.missing(np.arange(off[qi], off[qi + 1])))]
        bar = progress(total=len(mine), desc=f"per-query prompts ({split})", unit=" queries", disable=not show)
        for qi in mine:
            rec = records[qi]
            texts = [rec["text"], *store.texts(np.fromiter((store.position(c["id"]) for c in rec["ctxs"]),
                                                           dtype=np.int64))]
            cache.put(np.arange(off[qi], off[qi + 1]), reranker.embed(texts, demos_of[split][qi]))
            bar.update(1)
        bar.close()
        caches[split] = cache

    def vectors(split: str, qi: int) -> tuple[np.ndarray, np.ndarray]:
        off = offsets[split]
        rows = caches[split].get(np.arange(off[qi], off[qi + 1]))
        return rows[0], rows[1:]

    info = {"evidence_rows": int(sum(o[-1] - len(o) + 1 for o in offsets.values())), "evidence_cache_hits": 0,
            "cache": str(Path(cfg.cache_dir))}
    return vectors, info


def _write_splits(cfg: RerankConfig, folder: StageRun, data: dict[str, list[dict]], reranker: PromptGuidedReranker,
                  vectors: Any, demos_of: dict[str, list]) -> int:
    """Rank 0: score each split's candidates and write its top d with each query's demonstrations; how many
    queries had fewer than d candidates (warned)."""
    folder.begin()
    short = 0
    for split, recs in data.items():
        short += sum(len(rec["ctxs"]) < cfg.top_d for rec in recs)
        ranked = reranker.rerank([r["text"] for r in recs], [r["ctxs"] for r in recs],
                                 vectors=lambda qi, split=split: vectors(split, qi))
        # (with demos_in_train off, a shared prompt's demonstrations left train after demos_of was made: index it by
        # position)
        records = [{**{k: v for k, v in rec.items() if k != "ctxs"}, "ctxs": ctxs,
                    "demonstrations": demo_records(demos_of[split][qi])}
                   for qi, (rec, ctxs) in enumerate(zip(recs, ranked, strict=True))]
        folder.split(split, lambda records=records: records)
    if short:
        warnings.warn(f"{short} queries had fewer than d={cfg.top_d} candidates; they keep all they have",
                      stacklevel=3)
    return short


def _select(cfg: RerankConfig, task: TaskSpec, cand: dict[str, Any], data: dict[str, list[dict[str, Any]]],
            splits: list[str]) -> dict[str, Any]:
    """The demonstrations of every query of ``splits`` (``demos``: the shared ones of a global strategy), what
    defines them and what choosing them cost; the selection's models are freed before the reranker's LM loads."""
    train = [Example(str(r["id"]), r["text"], r.get("label")) for r in data["train"]]
    selector = get_selector(cfg.demo_selection, cfg.num_demos, cfg.seed, with_index_encoder(cfg.demos, cand["index"]),
                            lm=cfg.lm, device=cfg.device, show_progress=cfg.show_progress, dtype=cfg.dtype)
    selector.fit(task, train)
    if selector.per_query:
        demos = []
        demos_of = {split: selector.select_examples(
            [Example(str(r["id"]), r["text"], r.get("label")) for r in data[split]]) for split in splits}
    else:
        demos = [selector.train[i] for i in selector.demos]
        demos_of = {split: [demos] * len(data[split]) for split in splits}
    selector.release()
    return {"per_query": selector.per_query, "demos": demos, "demos_of": demos_of, "describe": selector.describe(),
            "cost": asdict(selector.cost)}


def prompt_guided_stage(cfg: RerankConfig, folder: StageRun) -> dict[str, Any] | None:
    """The prompt-guided reranker's stage build (:meth:`PromptGuided.build_stage`: every process of ``folder.ctx``
    embeds its share, rank 0 scores and writes); returns the manifest's fields on rank 0."""
    run = StageInputs.read(cfg)
    cand, task, store, data, splits = run.cand, run.task, run.store, run.data, run.splits
    ctx = folder.ctx
    selection = main_computes(ctx, lambda: _select(cfg, task, cand, data, splits))
    demos, demos_of = selection["demos"], selection["demos_of"]
    reranker = PromptGuidedReranker.from_config(cfg, task, demos)
    embedder = reranker.embedder
    corpus_pass = None
    if selection["per_query"]:  # never itself: the training queries keep their rows
        if cfg.corpus_pass != "off":
            raise InputError(f"corpus_pass {cfg.corpus_pass} needs one prompt for every text; "
                             f"demo_selection {cfg.demo_selection} gives each query its own", field="corpus_pass")
        vectors, info = _per_query_prompts(cfg, ctx, task, store, cand, data, splits, reranker, demos_of)
        prefix = None
    else:
        data["train"] = train_queries(cfg, data["train"], demos)
        if cfg.corpus_pass != "off":  # every row any k reads, embedded up front (then nothing below embeds)
            corpus_pass = run_corpus_pass(cfg, ctx, task, store, cand, reranker, demos)
        vectors, info = _shared_prompt(cfg, ctx, task, store, cand, data, splits, reranker, demos)
        prefix = demo_prefix(task, demos)
    stats = gather_objects(ctx, embedder.stats.record())
    ctx.barrier()
    if not ctx.is_main:
        return None

    short = _write_splits(cfg, folder, {s: data[s] for s in splits}, reranker, vectors, demos_of)
    write_json(folder.out / "demonstrations.json", [{"id": d.id, "text": d.text, "label": d.label} for d in demos])
    total = {k: sum(s[k] for s in stats) for k in stats[0]}
    folder.task, folder.inputs, folder.files = task, run.inputs(), ["demonstrations.json"]
    folder.after = {"corpus_pass": corpus_pass} if corpus_pass else None
    return {"lm": cfg.lm, "lm_fingerprint": embedder.fingerprint,
            "demo_selection": selection["describe"], "per_query_demonstrations": selection["per_query"],
            "demonstrations": [d.id for d in demos], "prompt_prefix": prefix, "k": cfg.k or cand["k"],
            "top_d": cfg.top_d, "counts": folder.counts, "queries_with_fewer_than_d": short,
            "embedding": {**total, **info}, "selection_cost": selection["cost"]}
