"""Reranking time against k, the first-stage candidates reranked per input (demo reranker, CPU).

The first N MR test inputs' top-k MiniLM candidates (the demo's index) reranked by SmolLM2-135M with the demo's 8
shared demonstrations into their top d=2 (``pgra.rerank.prompt_guided.in_memory.PromptGuidedReranker``, no evidence cache), for each k in one
process on the same inputs. Per k it prints the seconds, the distinct candidate sentences (each is embedded once
per call, so the cost follows them rather than the k x N slots) and the LM tokens run, and fits seconds against
distinct sentences: the per-sentence cost and the fixed part (the shared head and the queries).

    python bench/bench_rerank_scale.py [--inputs 8] [--ks 10,25,50,100,150] [--dtype fp32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from pgra.rerank.prompt_guided.embedder import LMEmbedder
from pgra.rerank.prompt_guided.in_memory import PromptGuidedReranker
from pgra.retrieval.index import Index
from pgra.runtime.cost import meter
from pgra.selection import get_selector
from pgra.tasks import get_task, load_task

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lm", default=str(ROOT / "models/smollm2-135m"))
    ap.add_argument("--index", default=str(ROOT / "indexes/demo-minilm"))
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--ks", default="10,25,50,100,150")
    ap.add_argument("--top-d", type=int, default=2)
    ap.add_argument("--dtype", default="fp32", help="the LM's precision (fp32, bf16, bf16-if-native)")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    task = get_task("mr")
    data = load_task(task, args.data, splits=("train", "test"))
    queries = [ex.text for ex in data["test"][: args.inputs]]
    hits = Index(args.index).search_hits(queries, max(ks))
    demos = get_selector("paper", 8, seed=13).fit(task, data["train"]).demo_examples
    embedder = LMEmbedder(args.lm, device="cpu", dtype=args.dtype)
    PromptGuidedReranker(task, embedder, top_d=args.top_d, k=4, demos=demos).rerank(queries[:2], [h[:4] for h in hits[:2]])
    rows = []
    print(f"{len(queries)} MR test inputs, SmolLM2-135M ({args.dtype}), d={args.top_d}, {torch.get_num_threads()} "
          "threads")
    print("| k | candidate slots | distinct sentences | LM tokens | seconds | ms per distinct sentence |")
    print("|---|---|---|---|---|---|")
    for k in ks:
        candidates = [h[:k] for h in hits]
        distinct = len({c["id"] for h in candidates for c in h})
        reranker = PromptGuidedReranker(task, embedder, top_d=args.top_d, k=k, demos=demos)
        before = meter.snapshot()
        t = time.perf_counter()
        reranker.rerank(queries, candidates)
        seconds = time.perf_counter() - t
        tokens = sum(v for v in (meter.snapshot() - before).values())
        row = {"k": k, "inputs": len(queries), "slots": sum(map(len, candidates)), "distinct": distinct,
               "lm_tokens": int(tokens), "seconds": seconds}
        rows.append(row)
        print(f"| {k} | {row['slots']:,} | {distinct:,} | {row['lm_tokens']:,} | {seconds:.1f} | "
              f"{1e3 * seconds / distinct:.0f} |", flush=True)
    if len(rows) > 2:
        x = np.array([r["distinct"] for r in rows], dtype=float)
        y = np.array([r["seconds"] for r in rows])
        slope, icpt = np.polyfit(x, y, 1)
        resid = np.max(np.abs(y - (slope * x + icpt)) / y)
        print(f"linear fit: {icpt:.1f} s + {1e3 * slope:.1f} ms per distinct sentence; max relative residual "
              f"{resid:.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
