"""The corpus pass's throughput: the first N demo corpus sentences embedded under a task's reranking prompt into a
fresh evidence cache (``pgra.rerank.prompt_guided.corpus_pass.embed_rows``, what ``rerank.corpus_pass`` runs), per LM precision,
extrapolated linearly to the whole demo corpus (the pass's cost is linear in the sentences it embeds). On cores
shared with other jobs the wall-clock stretches: the CPU seconds over the threads estimate the time with the cores
to itself.

The prompt is the task's with the laptop experiment's demonstrations (``paper`` selection of m=8, seed 13); the LM
is loaded and warmed up on 4 of the sentences before the clock starts (the cache is fresh: they are embedded
again, timed).

    python bench/bench_corpus_pass.py [--sentences 500] [--dtypes fp32,bf16] [--tasks wiki_topic,mr]
                                      [--json bench/results/corpus_pass.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pgra.rerank.config import RerankConfig
from pgra.rerank.prompt_guided.cache import EmbeddingCache
from pgra.rerank.prompt_guided.corpus_pass import embed_rows
from pgra.rerank.prompt_guided.embedder import LMEmbedder
from pgra.rerank.prompt_guided.in_memory import PromptGuidedReranker
from pgra.runtime.device import cpu_flags
from pgra.runtime.distributed import DistContext
from pgra.selection import get_selector
from pgra.tasks import get_task, load_task

ROOT = Path(__file__).resolve().parents[1]


def run(task_name: str, lm: str, dtype: str, sentences: list[str], demos_m: int, data: Path) -> dict:
    """Seconds and LM tokens of one pass over ``sentences`` in ``dtype``."""
    task = get_task(task_name)
    train = load_task(task, data, splits=("train",))["train"]
    demos = get_selector("paper", demos_m, seed=13).fit(task, train).demo_examples
    reranker = PromptGuidedReranker(task, LMEmbedder(lm, device="cpu", dtype=dtype), top_d=1, demos=demos)
    reranker.embed(sentences[-4:], demos)  # warm-up: loads the LM, picks the attention path
    before = reranker.embedder.stats.tokens_run
    cfg = RerankConfig(show_progress=False)  # the default chunks of 1,024: one shared head per chunk
    with tempfile.TemporaryDirectory() as tmp:
        cache = EmbeddingCache(tmp, {"bench": task_name, "dtype": dtype}, len(sentences), reranker.embedder.dim)
        t, cpu = time.perf_counter(), time.process_time()
        embed_rows(reranker, cache, np.arange(len(sentences)), lambda rows: [sentences[i] for i in rows], demos,
                   cfg, DistContext(), "corpus pass")
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    return {"task": task_name, "dtype": dtype, "sentences": len(sentences), "seconds": round(seconds, 2),
            "cpu_seconds": round(cpu, 2), "threads": torch.get_num_threads(),
            "per_sentence_ms": round(1000 * seconds / len(sentences), 2),
            "tokens_run": reranker.embedder.stats.tokens_run - before}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lm", default=str(ROOT / "models/smollm2-135m"))
    ap.add_argument("--corpus", default=str(ROOT / "data/demo/wiki_sentences.txt"))
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--tasks", default="wiki_topic,mr")
    ap.add_argument("--demos", type=int, default=8)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    lines = Path(args.corpus).read_text(encoding="utf-8").splitlines()
    total = sum(1 for x in lines if x.strip())
    sentences = [x for x in lines if x.strip()][: args.sentences]
    rows = []
    for task in args.tasks.split(","):
        for dtype in args.dtypes.split(","):
            r = run(task, args.lm, dtype, sentences, args.demos, Path(args.data))
            r["corpus_sentences"] = total
            r["extrapolated_corpus_min"] = round(r["seconds"] / len(sentences) * total / 60, 1)
            # on cores shared with other jobs the wall-clock stretches; CPU seconds over the threads is what the
            # same work takes with the cores to itself (about)
            r["extrapolated_corpus_min_own_cores"] = round(r["cpu_seconds"] / r["threads"] / len(sentences) * total
                                                           / 60, 1)
            rows.append(r)
            print(f"{task:<11} {dtype:<5} {r['seconds']:7.1f} s wall, {r['cpu_seconds']:.1f} CPU s on "
                  f"{r['threads']} threads for {len(sentences)} sentences ({r['tokens_run']} LM tokens) -> "
                  f"{total} sentences: ~{r['extrapolated_corpus_min']} min wall here, "
                  f"~{r['extrapolated_corpus_min_own_cores']} min with the cores to itself", flush=True)
    if args.json:
        meta = {"cpu": platform.processor() or platform.machine(), "flags": sorted(cpu_flags() & {
            "avx2", "avx512f", "avx512_bf16", "amx_bf16"}), "threads": torch.get_num_threads(),
            "torch": torch.__version__}
        Path(args.json).write_text(json.dumps({"meta": meta, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
