"""Reranking cost: the naive batched reranker (full prompt for every candidate, batch 4, as the paper's code)
vs ours (the demonstrations' and the template head's KV computed once, each text's own tokens batched by a token
budget, evidence de-duplicated and cached), and the LM tokens ours runs against the floor: the shared head once
plus every distinct text's own tokens, the template's tail and the answer cue.

Workload: the first N wiki_topic training queries x their top-K MiniLM candidates (default 32 x 150),
SmolLM2-135M on CPU, 8 demonstrations. Ours runs the whole workload cold (empty cache) and warm (second
run); the naive reranker is timed on a uniform random sample of its prompts (it takes ~0.6 s per prompt here)
and its time per prompt is multiplied by the workload's prompt count. Token counts are exact for both.

    python bench/bench_rerank.py [--queries 32] [--k 150] [--naive-sample 200]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from pgra.lm.prompts import ANSWER_CUE, demo_prefix
from pgra.rerank.prompt_guided.cache import EmbeddingCache
from pgra.rerank.prompt_guided.embedder import LMEmbedder, shared_head
from pgra.retrieval.index import Index
from pgra.selection import get_selector
from pgra.tasks import get_task, load_task

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lm", default=str(ROOT / "models/smollm2-135m"))
    ap.add_argument("--index", default=str(ROOT / "indexes/demo-minilm"))
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--k", type=int, default=150)
    ap.add_argument("--naive-sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    task = get_task("wiki_topic")
    train = load_task(task, ROOT / "data", splits=("train",))["train"]
    demos = get_selector("paper", 8, seed=13).fit(task, train).demo_examples
    queries = [ex for ex in train if ex not in demos][: args.queries]
    index = Index(args.index)
    _, positions = index.search([q.text for q in queries], args.k)
    prefix = demo_prefix(task, demos)
    emb = LMEmbedder(args.lm)
    pairs = [(qi, int(p)) for qi in range(len(queries)) for p in positions[qi]]
    unique_rows = np.unique(positions)
    head = len(emb.ids(shared_head(prefix, task.render)))
    distinct = [q.text for q in queries] + index.corpus.texts(unique_rows)
    floor = head + sum(len(emb.prompt_ids(prefix, task.render, ANSWER_CUE, t)) - head for t in distinct)
    print(f"workload: {len(queries)} queries x {args.k} candidates = {len(pairs)} candidate slots, "
          f"{len(unique_rows)} distinct sentences; demonstrations {len(emb.ids(prefix))} tokens, shared head "
          f"(demonstrations + template before the text) {head} tokens; token floor {floor}")

    # naive: full prompt for the query and every candidate of every query, batch 4, in query order
    naive_texts = [q.text for q in queries] + [index.corpus.text(p) for _, p in pairs]
    naive_ids = [emb.prompt_ids(prefix, task.render, ANSWER_CUE, t) for t in naive_texts]
    naive_tokens = sum(len(x) for x in naive_ids)
    rng = np.random.default_rng(args.seed)
    sample = rng.choice(len(naive_ids), size=min(args.naive_sample, len(naive_ids)), replace=False)
    emb.embed_full([naive_ids[i] for i in sample[:8]], batch_size=4)  # warm-up
    t = time.perf_counter()
    emb.embed_full([naive_ids[i] for i in sample], batch_size=4)
    naive_per_prompt = (time.perf_counter() - t) / len(sample)
    naive_total = naive_per_prompt * len(naive_ids)

    # ours, cold then warm, through the evidence cache as `pgra rerank` uses it
    cache_root = Path(tempfile.mkdtemp())
    try:
        runs = []
        for label in ("cold", "warm"):
            emb.cost.tokens = 0
            t = time.perf_counter()
            cache = EmbeddingCache(cache_root, {"bench": 1}, len(index.corpus), emb.dim)
            todo = cache.missing(unique_rows)
            if len(todo):
                cache.put(todo, emb.embed(index.corpus.texts(todo), prefix, task.render, ANSWER_CUE))
            qcache = EmbeddingCache(cache_root, {"bench": "q"}, len(queries), emb.dim)
            qtodo = qcache.missing(np.arange(len(queries)))
            if len(qtodo):
                qcache.put(qtodo, emb.embed([queries[i].text for i in qtodo], prefix, task.render, ANSWER_CUE))
            q = qcache.get(np.arange(len(queries)))
            for qi in range(len(queries)):
                s = cache.get(positions[qi]) @ q[qi]
                np.argsort(-s, kind="stable")[:16]
            runs.append((label, time.perf_counter() - t, emb.cost.tokens))
    finally:
        shutil.rmtree(cache_root)

    print(f"naive batched (full prompts, batch 4): {naive_per_prompt:.3f} s/prompt measured on {len(sample)} "
          f"prompts -> {naive_total:.0f} s for {len(naive_ids)} prompts; {naive_tokens} tokens")
    for label, secs, tokens in runs:
        print(f"ours ({label} cache): {secs:.1f} s; {tokens} tokens ({tokens / floor:.3f}x the floor) -> "
              f"{naive_total / secs:.1f}x faster than naive")
    print("(ours runs the shared head twice: once for the candidates' cache, once for the queries')")
    result = {"queries": len(queries), "k": args.k, "distinct_sentences": int(len(unique_rows)),
              "shared_head_tokens": head, "token_floor": floor,
              "naive_s_per_prompt": naive_per_prompt, "naive_total_s": naive_total, "naive_tokens": naive_tokens,
              "ours": [{"cache": c, "seconds": s, "tokens": n} for c, s, n in runs]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
