"""bf16 against fp32 for the causal LMs on CPU: is bf16 faster here, and does it agree with fp32 enough to be
the default?

Two workloads on the demo's MR data, each run in fp32 (the reference) and in bf16 in the same process, on the same
inputs, one after the other:

- **reranking**: the first N test inputs' first-stage top-k MiniLM candidates (the demo's index), reranked by
  SmolLM2-135M with the demo's shared demonstrations (``paper`` selection, seed 13) into their top d
  (``pgra.rerank.prompt_guided.in_memory.PromptGuidedReranker``, no evidence cache); agreement = share of inputs whose top d (as a set) is the
  same, and the largest difference of a kept candidate's reranker probability;
- **in-context learning**: the same N test inputs classified from m random demonstrations of a fixed pool
  (``pgra.icl.classify.ICLClassifier``); agreement = share of equal predicted labels, and the largest difference
  of a label probability;
- **the readers' inference** (``--readers``, default the demo's FiD and PGRA cells, after ``make demo``): each
  trained reader loaded with ``pgra.Reader.load(run, dtype=...)`` scores its own dev and test inputs (every
  label word's likelihood, as ``eval_dtype`` does); agreement as for in-context learning.

It prints the seconds of each, the speed ratio (fp32 / bf16) and whether bf16 meets the bar for the default
(agreement at least 99% on both, probabilities within 1e-2): the CPU's flags (``avx512_bf16``, ``amx_bf16``)
are printed with it, since bf16 has no fast path without them.

    python bench/bench_cpu_bf16.py [--inputs 200] [--k 4] [--top-d 2] [--demos 4] [--stages rerank,icl,reader]
                                   [--readers RUN,RUN] [--json bench/results/cpu_bf16.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from pgra.core.config import from_dict
from pgra.icl.classify import ICLClassifier
from pgra.icl.config import ICLConfig
from pgra.rerank.prompt_guided.embedder import LMEmbedder
from pgra.rerank.prompt_guided.in_memory import PromptGuidedReranker
from pgra.retrieval.index import Index
from pgra.runtime.device import cpu_flags
from pgra.selection import get_selector
from pgra.selection.base import SelectorSettings
from pgra.tasks import get_task, load_task

ROOT = Path(__file__).resolve().parents[1]
BAR_AGREEMENT, BAR_PROB = 0.99, 1e-2


def rerank_run(args, task, queries, candidates, demos, dtype: str) -> tuple[float, list[list[dict]]]:
    reranker = PromptGuidedReranker(task, LMEmbedder(args.lm, device="cpu", dtype=dtype), top_d=args.top_d, k=args.k, demos=demos)
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


def reader_run(run: Path, records: list[dict], dtype: str, repeats: int = 3) -> tuple[float, list[dict]]:
    from pgra.reader.predict import Reader

    reader = Reader.load(run, device="cpu", dtype=dtype)
    reader.predict(records[:8])  # warm-up
    best, out = float("inf"), []
    for _ in range(repeats):  # a pass takes seconds: the fastest of a few
        t = time.perf_counter()
        out = reader.predict(records, batch_size=64)
        best = min(best, time.perf_counter() - t)
    return best, out


def reader_records(run: Path) -> list[dict]:
    """A reader run's own dev and test inputs (the data folder its manifest records)."""
    from pgra.storage.artifacts import iter_jsonl, read_json

    data = Path(read_json(run / "manifest.json")["data"])
    return [r for split in ("dev", "test") for _, r in iter_jsonl(data / f"{split}.jsonl")]


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
    ap.add_argument("--stages", default="rerank,icl,reader", help="comma-separated: rerank, icl, reader")
    ap.add_argument("--readers", default=",".join(str(ROOT / f"runs/demo-experiment/mr/{m}/seed-1")
                                                  for m in ("fid", "pgra")),
                    help="trained reader runs (comma-separated); those without a manifest are skipped")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--json", default="", help="also write the numbers to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    task = get_task("mr")
    data = load_task(task, args.data, splits=("train", "test"))
    train, test = data["train"], data["test"][: args.inputs]
    queries = [ex.text for ex in test]
    stages = [s for s in args.stages.split(",") if s]
    if "rerank" in stages:  # only reranking reads the index and the shared demonstrations
        candidates = Index(args.index).search_hits(queries, args.k)
        demos = get_selector("paper", 8, seed=13).fit(task, train).demo_examples
    records = [{"id": ex.id, "text": ex.text, "label": ex.label} for ex in test]

    bf16_flags = sorted(f for f in cpu_flags() if "bf16" in f or f.startswith("amx"))
    result: dict = {"cpu": platform.processor() or platform.machine(), "bf16_flags": bf16_flags,
                    "threads": args.threads, "inputs": len(test), "k": args.k, "top_d": args.top_d,
                    "demos": args.demos, "torch": torch.__version__}
    readers = [Path(r) for r in args.readers.split(",") if r and (Path(r) / "manifest.json").exists()]
    compares = {"rerank": compare_rerank, "icl": compare_icl}
    runs: dict = {"fp32": {}, "bf16": {}}
    for dtype in ("fp32", "bf16"):
        if "rerank" in stages:
            runs[dtype]["rerank"] = rerank_run(args, task, queries, candidates, demos, dtype)
        if "icl" in stages:
            runs[dtype]["icl"] = icl_run(args, task, train, records, dtype)
        if "reader" in stages:
            for run in readers:
                name = f"reader {run.parts[-2]}"  # the method of a cell folder <task>/<method>/seed-N
                runs[dtype][name] = reader_run(run, reader_records(run), dtype)
                compares[name] = compare_icl
                result.setdefault("readers", {})[name] = str(run)
    for stage in runs["fp32"]:
        (t32, out32), (t16, out16) = runs["fp32"][stage], runs["bf16"][stage]
        agree = compares[stage](out32, out16)
        result[stage] = {"fp32_s": t32, "bf16_s": t16, "speedup": t32 / t16, "inputs": len(out32), **agree}
    measured = list(runs["fp32"])
    agreements = [result[s].get("top_d_agreement", result[s].get("label_agreement")) for s in measured]
    diffs = [result[s]["max_prob_diff"] for s in measured]
    result["meets_bar"] = {s: bool(result[s]["speedup"] > 1 and a >= BAR_AGREEMENT and d <= BAR_PROB)
                           for s, a, d in zip(measured, agreements, diffs, strict=True)}

    print(f"CPU bf16 flags: {', '.join(result['bf16_flags']) or 'none'}; {args.threads} threads; "
          f"{len(test)} MR test inputs, k={args.k}, d={args.top_d}, m={args.demos}")
    print("| stage | inputs | fp32 s | bf16 s | fp32 / bf16 | agreement | max prob diff | bf16 as default |")
    print("|---|---|---|---|---|---|---|---|")
    for stage, agree in zip(measured, agreements, strict=True):
        r = result[stage]
        print(f"| {stage} | {r['inputs']} | {r['fp32_s']:.1f} | {r['bf16_s']:.1f} | {r['speedup']:.2f}x | "
              f"{100 * agree:.1f}% | {r['max_prob_diff']:.4f} | {'yes' if result['meets_bar'][stage] else 'no'} |")
    print(f"bar for the default: faster, agreement >= {100 * BAR_AGREEMENT:.0f}%, probabilities within {BAR_PROB}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
