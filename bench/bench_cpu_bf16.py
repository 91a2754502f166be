"""bf16 against fp32 for the causal LMs on CPU: is bf16 faster here, and does it agree with fp32 enough to be
the default?

Two workloads on the demo's MR data, each run in fp32 (the reference) and in bf16 in the same process, on the same
inputs, one after the other:

- **reranking**: the first N test inputs' first-stage top-k MiniLM candidates (the demo's index), reranked by
  SmolLM2-135M with the demo's shared demonstrations (``paper`` selection, seed 13) into their top d
  (``pgra.rerank.core.Reranker``, no evidence cache); agreement = share of inputs whose top d (as a set) is the
  same, and the largest difference of a kept candidate's reranker probability;
- **in-context learning**: the same N test inputs classified from m random demonstrations of a fixed pool
  (``pgra.icl.classify.ICLClassifier``); agreement = share of equal predicted labels, and the largest difference
  of a label probability.

It prints the seconds of each, the speed ratio (fp32 / bf16) and whether bf16 meets the bar for the default
(agreement at least 99% on both, probabilities within 1e-2): the CPU's flags (``avx512_bf16``, ``amx_bf16``)
are printed with it, since bf16 has no fast path without them.

    python bench/bench_cpu_bf16.py [--inputs 200] [--k 4] [--top-d 2] [--demos 4] [--json bench/results/cpu_bf16.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from pgra.config import from_dict
from pgra.device import cpu_flags
from pgra.icl.classify import ICLClassifier
from pgra.icl.config import ICLConfig
from pgra.rerank.core import Reranker
from pgra.rerank.embedder import LMEmbedder
from pgra.retrieval.index import Index
from pgra.selection import get_selector
from pgra.selection.base import SelectorSettings
from pgra.tasks import get_task, load_task

ROOT = Path(__file__).resolve().parents[1]
BAR_AGREEMENT, BAR_PROB = 0.99, 1e-2


def rerank_run(args, task, queries, candidates, demos, dtype: str) -> tuple[float, list[list[dict]]]:
    reranker = Reranker(task, LMEmbedder(args.lm, device="cpu", dtype=dtype), top_d=args.top_d, k=args.k, demos=demos)
    reranker.embed([q for q in queries[:4]], demos)  # warm-up
    t = time.perf_counter()
    out = reranker.rerank(queries, candidates)
    return time.perf_counter() - t, out


def icl_run(args, task, train, records, dtype: str) -> tuple[float, list[dict]]:
    cfg = from_dict(ICLConfig, {"lm": args.lm, "selection": "random", "num_demos": args.demos, "pool": 0,
                                "device": "cpu", "dtype": dtype, "show_progress": False})
    clf = ICLClassifier(cfg, task, train, SelectorSettings())
    clf.predict(records[:4])  # warm-up (loads the LM)
    t = time.perf_counter()
    out = clf.predict(records)
    return time.perf_counter() - t, out


def compare_rerank(a: list[list[dict]], b: list[list[dict]]) -> dict[str, float]:
    same = [set(c["id"] for c in x) == set(c["id"] for c in y) for x, y in zip(a, b, strict=True)]
    diff = 0.0
    for x, y in zip(a, b, strict=True):
        py = {c["id"]: c["score"] for c in y}
        diff = max([diff] + [abs(c["score"] - py[c["id"]]) for c in x if c["id"] in py])
    return {"top_d_agreement": float(np.mean(same)), "max_prob_diff": diff}


def compare_icl(a: list[dict], b: list[dict]) -> dict[str, float]:
    same = [x["prediction"] == y["prediction"] for x, y in zip(a, b, strict=True)]
    diff = max(abs(x["scores"][k] - y["scores"][k]) for x, y in zip(a, b, strict=True) for k in x["scores"])
    return {"label_agreement": float(np.mean(same)), "max_prob_diff": float(diff)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lm", default=str(ROOT / "models/smollm2-135m"))
    ap.add_argument("--index", default=str(ROOT / "indexes/demo-minilm"))
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--inputs", type=int, default=200)
    ap.add_argument("--k", type=int, default=4, help="candidates reranked per input (the demo's 4)")
    ap.add_argument("--top-d", type=int, default=2, help="evidence kept per input (the demo's 2)")
    ap.add_argument("--demos", type=int, default=4, help="in-context demonstrations (the demo's 4)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--json", default="", help="also write the numbers to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    task = get_task("mr")
    data = load_task(task, args.data, splits=("train", "test"))
    train, test = data["train"], data["test"][: args.inputs]
    queries = [ex.text for ex in test]
    candidates = Index(args.index).search_hits(queries, args.k)
    demos = get_selector("paper", 8, seed=13).fit(task, train).demo_examples
    records = [{"id": ex.id, "text": ex.text, "label": ex.label} for ex in test]

    bf16_flags = sorted(f for f in cpu_flags() if "bf16" in f or f.startswith("amx"))
    result: dict = {"cpu": platform.processor() or platform.machine(), "bf16_flags": bf16_flags,
                    "threads": args.threads, "inputs": len(test), "k": args.k, "top_d": args.top_d,
                    "demos": args.demos, "torch": torch.__version__}
    runs = {}
    for dtype in ("fp32", "bf16"):
        runs[dtype] = {"rerank": rerank_run(args, task, queries, candidates, demos, dtype),
                       "icl": icl_run(args, task, train, records, dtype)}
    for stage, compare in (("rerank", compare_rerank), ("icl", compare_icl)):
        (t32, out32), (t16, out16) = runs["fp32"][stage], runs["bf16"][stage]
        agree = compare(out32, out16)
        result[stage] = {"fp32_s": t32, "bf16_s": t16, "speedup": t32 / t16, **agree}
    agreements = [result["rerank"]["top_d_agreement"], result["icl"]["label_agreement"]]
    diffs = [result["rerank"]["max_prob_diff"], result["icl"]["max_prob_diff"]]
    faster = all(result[s]["speedup"] > 1 for s in ("rerank", "icl"))
    result["meets_bar"] = bool(faster and min(agreements) >= BAR_AGREEMENT and max(diffs) <= BAR_PROB)

    print(f"CPU bf16 flags: {', '.join(result['bf16_flags']) or 'none'}; {args.threads} threads; "
          f"{len(test)} MR test inputs, k={args.k}, d={args.top_d}, m={args.demos}")
    print("| stage | fp32 s | bf16 s | fp32 / bf16 | agreement | max prob diff |")
    print("|---|---|---|---|---|---|")
    for stage, key in (("rerank", "top_d_agreement"), ("icl", "label_agreement")):
        r = result[stage]
        print(f"| {stage} | {r['fp32_s']:.1f} | {r['bf16_s']:.1f} | {r['speedup']:.2f}x | {100 * r[key]:.1f}% "
              f"| {r['max_prob_diff']:.4f} |")
    print(f"bf16 as the CPU default (faster, agreement >= {100 * BAR_AGREEMENT:.0f}%, probabilities within "
          f"{BAR_PROB}): {'yes' if result['meets_bar'] else 'no'}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
