"""``pgra_full``'s stage: prompt-guided retrieval without a first stage.

Each input's prompted embedding searches every corpus sentence's prompted embedding (a faiss flat inner-product
index over the corpus pass's vectors, :mod:`pgra.rerank.corpus_pass`); its top d go to the reader. Ranking by inner
product is ranking by Eq. 3's probability over the whole corpus (a softmax keeps the order): the reranker at
k = the corpus. The folder is a reranked folder's twin (kind ``full_search``; ``score`` is the inner product).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ..artifacts import MANIFEST, file_record, write_json, write_manifest
from ..config import to_dict
from ..distributed import DistContext, gather_objects, init_distributed, main_computes
from ..errors import InputError
from ..interchange import write_records
from ..lock import locks_output
from ..prompts import demo_prefix
from ..provenance import folder_fingerprint, relative_path
from .cache import EmbeddingCache
from .config import RerankConfig
from .core import Reranker, evidence_cache_key, prompt_key
from .corpus_pass import query_caches_of, run_corpus_pass
from .reranker import _select, demo_records, stage_inputs
from .stage import train_queries

FULL_SEARCH_KIND = "full_search"


def search_corpus(vectors: np.ndarray, queries: np.ndarray, top_d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)``: each query's ``top_d`` corpus rows by inner product, best first (a faiss flat index)."""
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    scores, rows = index.search(np.ascontiguousarray(queries, dtype=np.float32), min(top_d, len(vectors)))
    return scores, rows


@locks_output(kind=FULL_SEARCH_KIND)
def full_search(cfg: RerankConfig, ctx: DistContext | None = None) -> Path:
    """Write each input's top ``cfg.top_d`` of the whole corpus under the prompt-guided embedding (``pgra_full``'s
    evidence) for every requested split; the corpus pass (``corpus``) runs first. ``cfg.k`` is not read."""
    cand, task, store, data, splits = stage_inputs(replace(cfg, k=0))
    ctx = ctx or init_distributed()
    cand_dir, out = Path(cfg.candidates), Path(cfg.out)
    selection = main_computes(ctx, lambda: _select(cfg, task, cand, data, splits))
    if selection["per_query"]:
        raise InputError(f"the search over the corpus needs one prompt for every text; demo_selection "
                         f"{cfg.demo_selection} gives each query its own", field="demo_selection")
    demos = selection["demos"]
    reranker = Reranker.from_config(cfg, task, demos)
    data["train"] = train_queries(cfg, data["train"], demos)
    corpus = run_corpus_pass(replace(cfg, corpus_pass="corpus"), ctx, task, store, cand, reranker, demos)
    queries = query_caches_of(cfg, ctx, task, data, splits, reranker, demos)  # all cached by the pass
    stats = gather_objects(ctx, reranker.embedder.stats.record())
    ctx.barrier()
    if not ctx.is_main:
        return out

    key = evidence_cache_key(prompt_key(reranker.embedder, cfg.lm, task, demos), cand["index"]["corpus_content_sha256"])
    evidence = EmbeddingCache(cfg.cache_dir, key, len(store), reranker.embedder.dim, create=False)
    vectors = evidence.get(np.arange(len(store)))
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    counts = {}
    for split in splits:
        recs = data[split]
        scores, rows = search_corpus(vectors, queries[split].get(np.arange(len(recs))), cfg.top_d)
        records = []
        for rec, s, r in zip(recs, scores, rows, strict=True):
            ids, texts = store.external_ids(r), store.texts(r)
            records.append({**{k: v for k, v in rec.items() if k != "ctxs"},
                            "ctxs": [{"id": i, "text": t, "score": float(x)} for i, t, x in zip(ids, texts, s, strict=True)],
                            "demonstrations": demo_records(demos)})
        counts[split] = write_records(out / f"{split}.jsonl", records)
    write_json(out / "demonstrations.json", [{"id": d.id, "text": d.text, "label": d.label} for d in demos])
    total = {k: sum(s[k] for s in stats) for k in stats[0]}
    write_manifest(out, {
        "kind": FULL_SEARCH_KIND, "task": to_dict(task), "lm": cfg.lm, "lm_fingerprint": reranker.embedder.fingerprint,
        "demo_selection": selection["describe"], "per_query_demonstrations": False,
        "demonstrations": [d.id for d in demos], "prompt_prefix": demo_prefix(task, demos), "top_d": cfg.top_d,
        "searched_rows": len(store), "counts": counts, "embedding": {**total, "cache": str(evidence.directory)},
        "corpus_pass": corpus, "selection_cost": selection["cost"],
        "candidates": {"path": str(cand_dir.resolve()), "relative": relative_path(cand_dir, out),
                       "fingerprint": folder_fingerprint(cand_dir), "index": cand["index"]},
        "config": to_dict(cfg),
        "files": {n: file_record(out / n) for n in [f"{sp}.jsonl" for sp in splits] + ["demonstrations.json"]},
    })
    return out


__all__ = ["FULL_SEARCH_KIND", "full_search", "search_corpus"]
