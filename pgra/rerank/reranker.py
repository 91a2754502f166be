"""``pgra rerank``: score each query's first-stage candidates with prompt-guided LM embeddings (Eq. 3).

For a query q with candidates e_1..e_k: p_j = softmax_j(q . e_j) over the k candidates; the top d go to the
reader. Query and evidence embeddings share one prompt prefix (the same demonstrations in the same order).
Evidence embeddings live in a persistent cache keyed by (LM, template, demonstrations, prompt format,
corpus), so later runs, k/d sweeps and other splits never embed the same sentence twice.

Per-query strategies (``random``, ``kate``, ``skill_knn``) give each query its own demonstrations: the query
and its candidates share that query's prefix (its KV cache computed once per query), and the cache rows of a
split are each query followed by its candidates, keyed by every query's demonstrations. Multi-process: ranks
embed disjoint rows (or queries) of the caches, rank 0 scores and writes. The embedding and the scoring are the
in-memory :class:`pgra.rerank.core.Reranker`'s (the one ``Pipeline`` replays); this module keeps the caches,
the processes and the folder.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import MANIFEST, check_disjoint, file_record, write_json, write_manifest
from ..causal_lm import LMCost
from ..config import check_config, to_dict
from ..corpus import CorpusStore
from ..distributed import DistContext, gather_objects, init_distributed, main_computes
from ..errors import InputError, StaleArtifactError
from ..faults import fault_point
from ..interchange import read_records, write_records
from ..lock import locks_output
from ..progress import progress
from ..provenance import folder_fingerprint, relative_path
from ..retrieval.retrieve import read_candidates_manifest
from ..selection import get_selector
from ..selection.base import with_index_encoder
from ..tasks import Example, TaskSpec, task_from_manifest
from .cache import EmbeddingCache
from .config import RerankConfig
from .core import RERANKED_KIND, Reranker, evidence_cache_key, prompt_key
from .prompts import demo_prefix, render_demo


def reranked_cost(manifest: dict[str, Any]) -> LMCost:
    """The LM work behind a reranked folder (its manifest): the embedding plus the demonstrations' selection."""
    e = manifest["embedding"]
    return LMCost(e["texts"], e["tokens_run"]) + LMCost.from_dict(manifest.get("selection_cost"))


def _open_corpus(cfg: RerankConfig, cand: dict[str, Any]) -> CorpusStore:
    index_dir = Path(cfg.index or cand["index"]["path"])
    if not (index_dir / "corpus" / "corpus.json").exists():
        raise InputError(f"index folder {index_dir} (needed for corpus ids) not found; pass --index",
                         field="index")
    store = CorpusStore(index_dir / "corpus")
    if store.fingerprint != cand["index"]["corpus_content_sha256"]:
        raise StaleArtifactError(
            f"the candidates in {cfg.candidates} were retrieved from another corpus than the one of index "
            f"{index_dir} (corpus fingerprints {cand['index']['corpus_content_sha256'][:12]}... vs "
            f"{store.fingerprint[:12]}...)")
    return store


def _load_split(path: Path, task: TaskSpec, k: int) -> list[dict[str, Any]]:
    records = []
    for line, rec in enumerate(read_records(path, labels=task.labels), start=1):
        if not rec.get("ctxs"):
            raise InputError("query has no candidates", path=path, line=line, field="ctxs")
        if k:
            rec["ctxs"] = rec["ctxs"][:k]
        records.append(rec)
    return records


def _embed_rows(reranker: Reranker, cache: EmbeddingCache, rows: np.ndarray, texts_of, demos: list[Example],
                cfg: RerankConfig, ctx: DistContext, desc: str, missing: np.ndarray | None = None) -> None:
    """Embed the missing rows of this rank's round-robin share of ``rows`` into ``cache``, chunk by chunk
    (``missing``: what :meth:`EmbeddingCache.missing` already returned for ``rows``, so as not to read them twice)."""
    share = rows[ctx.rank::ctx.world_size]  # shard first: other ranks are already writing their shares
    mine = cache.missing(share) if missing is None else np.intersect1d(share, missing)
    show = cfg.show_progress and ctx.is_main
    n_chunks = (len(mine) + cfg.chunk_size - 1) // cfg.chunk_size
    for c, start in enumerate(range(0, len(mine), cfg.chunk_size)):
        chunk = mine[start:start + cfg.chunk_size]
        vecs = reranker.embed(texts_of(chunk), demos, show_progress=show,
                              desc=f"{desc} (chunk {c + 1}/{n_chunks}, {len(mine)} texts)")
        cache.put(chunk, vecs)
        fault_point("rerank.chunk")


def _open_cache(ctx: DistContext, root: str, key: dict[str, Any], size: int, dim: int) -> EmbeddingCache:
    """Rank 0 creates the cache folder; the others open it after a barrier."""
    if ctx.is_main:
        EmbeddingCache(root, key, size, dim)
    ctx.barrier()
    return EmbeddingCache(root, key, size, dim, create=False, report=ctx.is_main)


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
    query_caches = {}
    for split in splits:
        texts = [r["text"] for r in data[split]]
        qkey = {**base_key, "rows": f"queries:{split}",
                "texts": hashlib.sha256("\x00".join(texts).encode()).hexdigest()}
        qc = _open_cache(ctx, cfg.cache_dir, qkey, len(texts), embedder.dim)
        _embed_rows(reranker, qc, np.arange(len(texts)), lambda rows, t=texts: [t[i] for i in rows], demos, cfg, ctx,
                    f"queries ({split})")
        query_caches[split] = qc

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


@locks_output(kind=RERANKED_KIND)
def rerank(cfg: RerankConfig, ctx: DistContext | None = None) -> Path:
    """Rerank every requested split of a candidates folder; returns the output folder."""
    check_config(cfg)
    if not cfg.candidates or not cfg.out:
        raise InputError("rerank needs --candidates and --out", field="candidates" if not cfg.candidates else "out")
    ctx = ctx or init_distributed()
    cand = read_candidates_manifest(cfg.candidates)
    check_disjoint({"out": cfg.out}, {"index": cfg.index or cand["index"]["path"]})  # recorded with the candidates
    task = task_from_manifest(cand, Path(cfg.candidates) / MANIFEST, cfg.task)
    store = _open_corpus(cfg, cand)
    cand_dir, out = Path(cfg.candidates), Path(cfg.out)
    if "train" not in cand["counts"]:
        raise InputError(f"{cand_dir} has no train split to draw demonstrations from", field="splits")
    splits = [s for s in cfg.splits if s in cand["counts"]]
    data = {s: _load_split(cand_dir / f"{s}.jsonl", task, cfg.k) for s in dict.fromkeys(["train", *splits])}
    selection = main_computes(ctx, lambda: _select(cfg, task, cand, data, splits))
    demos, demos_of = selection["demos"], selection["demos_of"]
    reranker = Reranker.from_config(cfg, task, demos)
    embedder = reranker.embedder
    if selection["per_query"]:  # never itself: the training queries keep their rows
        vectors, info = _per_query_prompts(cfg, ctx, task, store, cand, data, splits, reranker, demos_of)
        prefix = None
    else:
        demo_ids = {d.id for d in demos}
        data["train"] = [r for r in data["train"] if str(r["id"]) not in demo_ids]
        vectors, info = _shared_prompt(cfg, ctx, task, store, cand, data, splits, reranker, demos)
        prefix = demo_prefix(task, demos)
    stats = gather_objects(ctx, embedder.stats.record())
    ctx.barrier()
    if not ctx.is_main:
        return out

    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    counts, short = {}, 0
    for split in splits:
        recs = data[split]
        short += sum(len(rec["ctxs"]) < cfg.top_d for rec in recs)
        ranked = reranker.rerank([r["text"] for r in recs], [r["ctxs"] for r in recs],
                                 vectors=lambda qi, split=split: vectors(split, qi))
        # (a shared prompt's demonstrations left train after demos_of was made: index it by position)
        records = [{**{k: v for k, v in rec.items() if k != "ctxs"}, "ctxs": ctxs,
                    "demonstrations": demo_records(demos_of[split][qi])}
                   for qi, (rec, ctxs) in enumerate(zip(recs, ranked, strict=True))]
        counts[split] = write_records(out / f"{split}.jsonl", records)
    if short:
        warnings.warn(f"{short} queries had fewer than d={cfg.top_d} candidates; they keep all they have",
                      stacklevel=2)
    write_json(out / "demonstrations.json", [{"id": d.id, "text": d.text, "label": d.label} for d in demos])
    total = {k: sum(s[k] for s in stats) for k in stats[0]}
    write_manifest(out, {
        "kind": RERANKED_KIND, "task": to_dict(task), "lm": cfg.lm, "lm_fingerprint": embedder.fingerprint,
        "demo_selection": selection["describe"], "per_query_demonstrations": selection["per_query"],
        "demonstrations": [d.id for d in demos], "prompt_prefix": prefix, "k": cfg.k or cand["k"],
        "top_d": cfg.top_d, "counts": counts, "queries_with_fewer_than_d": short,
        "embedding": {**total, **info}, "selection_cost": selection["cost"],
        "candidates": {"path": str(cand_dir.resolve()), "relative": relative_path(cand_dir, out),
                       "fingerprint": folder_fingerprint(cand_dir), "index": cand["index"]},
        "config": to_dict(cfg),
        "files": {n: file_record(out / n) for n in [f"{sp}.jsonl" for sp in splits] + ["demonstrations.json"]},
    })
    return out
