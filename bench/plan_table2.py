"""The paper's Table 2 grid planned on one 8-GPU node from the H100 measurements in ``bench/results``.

Measured on one H100 (random weights at the paper's shapes, ``bench/bench_gpu_scale.py``; which run files,
``gpu_plan_inputs.json`` names, read through :func:`pgra.experiment.estimate.gpu_measurements`): BERT-base
encoding (sentences/s at steady state), the flat faiss-cpu index of 1M vectors built and searched for 1,000
queries' top 150 on the node's 16 cores, OPT-13b reranking with the shared-prefix attention, and a T5-base FiD
training step at batch 8, d=16 x 128 tokens in pgra's own training loop (collation, the scheduler, the loss read
back). Everything else is derived: the LM-BFF split sizes and the paper's batch sizes (``bench_gpu_scale.TASKS``),
5,000 steps per reader, every input's 150 candidates and the input itself reranked (no de-duplication: an upper
bound), a reader step linear in d (the no-retrieval reader's step at 1/16 of d=16's), a batch-4 task's step at
half a batch-8 step, and perfect data-parallel scaling of a stage's GPU work over the node's GPUs. The first-stage
search runs on the CPU cores the processes share, so it does not shrink with them.

The plan: the index (encoding sharded over the GPUs), each task's candidates and reranked stages one after
another, each sharded over the GPUs; then the 72 reader cells (8 tasks x 3 seeds x {no retrieval, FiD, PGRA})
side by side, one per GPU, costliest first (:func:`pgra.experiment.estimate.plan_wallclock`).

    python bench/plan_table2.py            # the plan on 8 GPUs
    python bench/plan_table2.py --gpus 16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.bench_gpu_scale import CORPUS, SEEDS, STEPS, TASKS, D, K  # noqa: E402
from pgra.experiment.estimate import BenchFits, format_seconds, gpu_measurements, plan_wallclock  # noqa: E402

RESULTS = HERE / "results"
HOUR = 3600.0


def plan(gpus: int = 8, results: Path = RESULTS) -> dict:
    """The Table 2 grid's planned wall-clock on ``gpus`` GPUs of one node (seconds), with its parts."""
    fits = BenchFits.load(results, "gpu")
    measured = gpu_measurements(results)
    encoding, index = measured["encoding"], measured["index"]
    per_sentence = 1 / encoding["sentences_per_s"]  # BERT-base encoding on one GPU
    search_per_query = index["search_1000_queries_top150_s"] / 1000  # faiss-cpu on the node's 16 cores
    queries = sum(train + test for train, test, _ in TASKS.values())
    cells: list[tuple[str, float]] = []
    for task, (_, _, batch) in TASKS.items():
        for seed in range(1, SEEDS + 1):
            for method, d in (("no_retrieval", 0), ("fid", D), ("pgra", D)):
                cells.append((f"{task}/{method}/seed-{seed}", fits.reader_seconds(STEPS, d, batch)))
    costs = [c for _, c in cells]
    rerank_gpu_s = sum(fits.rerank_seconds((train + test) * (K + 1)) for train, test, _ in TASKS.values())

    def wallclock(n: int) -> dict:
        index_s = CORPUS * per_sentence / n + index["index_build_s"]
        candidates_s = queries * (search_per_query + per_sentence / n)
        rerank_s = rerank_gpu_s / n
        cells_s = plan_wallclock(costs, n)
        return {"index_s": index_s, "candidates_s": candidates_s, "rerank_s": rerank_s, "cells_s": cells_s,
                "stages_s": index_s + candidates_s + rerank_s, "total_s": index_s + candidates_s + rerank_s + cells_s}

    parts = wallclock(gpus)
    needed = next((n for n in range(1, 64 * gpus) if wallclock(n)["total_s"] <= HOUR), None)
    gpu_hours = (CORPUS * per_sentence + queries * per_sentence + rerank_gpu_s + sum(costs)) / HOUR
    return {"gpus": gpus, **parts, "queries": queries, "rerank_texts": sum((t + s) * (K + 1) for t, s, _ in TASKS.values()),
            "cells": len(cells), "cell_gpu_s": sum(costs), "longest_cell_s": max(costs),
            "cells_lower_bound_s": max(sum(costs) / gpus, max(costs)), "gpu_hours": gpu_hours,
            "gpus_for_one_hour": needed, "reader_source": fits.reader_source, "rerank_source": fits.rerank_source}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args(argv)
    p = plan(args.gpus)
    print(f"Table 2 grid on one node of {p['gpus']} H100s (planned from bench/results):")
    print(f"  index: 1M BERT-base sentences sharded over the GPUs + the flat index: {format_seconds(p['index_s'])}")
    print(f"  candidates (8 tasks, faiss-cpu search on the node's cores): {format_seconds(p['candidates_s'])}")
    print(f"  reranked (8 tasks, every input's {K} candidates + itself, sharded): {format_seconds(p['rerank_s'])}"
          f"  [{p['rerank_source']}]")
    print(f"  {p['cells']} reader cells, {p['cell_gpu_s'] / HOUR:.1f} GPU h, longest {format_seconds(p['longest_cell_s'])}, "
          f"on {p['gpus']} GPUs costliest first: {format_seconds(p['cells_s'])} (bound {format_seconds(p['cells_lower_bound_s'])})"
          f"  [{p['reader_source']}]")
    met = "met" if p["total_s"] <= HOUR else "not met"
    print(f"  total: {format_seconds(p['total_s'])} wall-clock, {p['gpu_hours']:.1f} GPU h; goal under one hour: {met} "
          f"(at these rates {p['gpus_for_one_hour']} GPUs would meet it)")
    return p


if __name__ == "__main__":
    main()
