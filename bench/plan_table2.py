"""The paper's Table 2 grid planned on one 8-GPU node from the H100 measurements in ``bench/results``, as
``configs/paper/experiment_table2.yaml`` runs it.

Measured on one H100 (random weights at the paper's shapes, ``bench/bench_gpu_scale.py``; which run files,
``gpu_plan_inputs.json`` and ``gpu_plan_cells.json`` name, read through :mod:`pgra.experiment.estimate`): BERT-base
encoding (sentences/s at steady state, batch 2,048), the flat faiss-cpu index of 1M vectors built and searched for
1,000 queries' top 150 on the node's 16 cores, OPT-13b reranking with the shared-prefix attention (token budget
65,536), the T5-base FiD step (batch 8, d=16 x 128 tokens) of each reader variant, and the cost pgra's own training
loop adds to a step (collation, the scheduler, the loss read back). Measured on the 2-core development machine
(``bench/bench_cell_overheads.py``): a cell's process start, the reader's load, a checkpoint and ``best/``.

Each reader cell is priced by :func:`pgra.experiment.estimate.estimate_cell` (what ``pgra experiment --dry-run``
uses) from the config's own reader settings for that task and method (``compile``, ``compile_mode``,
``adamw_impl``, batch size, steps, ``eval_every``, ...): steps, warm-up, evaluations, checkpoints, loads and start.

Derived (not measured): the LM-BFF split sizes (``bench_gpu_scale.TASKS``; dev carved from train at the tasks'
``dev_fraction``, 0.1), every input's k candidates and the input itself reranked (no de-duplication: an upper
bound), a step's model part linear in d and the batch (no retrieval: one sequence of 16), an evaluation's input
at the forward's share of the eager step, and perfect data-parallel scaling of a stage's GPU work over the GPUs.
The first-stage search runs on the CPU cores the processes share, so it does not shrink with them.

The plan: the index (encoding sharded over the GPUs), each task's candidates and reranked stages one after
another, each sharded over the GPUs; then the 72 reader cells side by side, ``cells_per_gpu`` per GPU, costliest
first (:func:`pgra.experiment.estimate.plan_wallclock`). The disk: the dry run's plan
(:func:`pgra.experiment.estimate.plan_disk`) at those splits and Wiki1M's 1M sentences (``CORPUS``: the corpus is not
here to count), and the embedding caches of the same rows that the analyses' further OPT sizes fill
(docs/beyond-one-machine.md, *Disk of the Table 2 grid*, renders it).

    python bench/plan_table2.py                          # the plan on 8 GPUs, one and two cells per GPU
    python bench/plan_table2.py --gpus 16 --cells-per-gpu 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.bench_gpu_scale import CORPUS, TASKS  # noqa: E402
from pgra.experiment.estimate import (  # noqa: E402
    BenchFits,
    Estimate,
    Plan,
    estimate_cell,
    format_seconds,
    gpu_measurements,
    plan_disk,
)

RESULTS = HERE / "results"
CONFIG = HERE.parent / "configs" / "paper" / "experiment_table2.yaml"
HOUR = 3600.0
# the reader the config ran before it took the fastest measured step: plain eager steps, the default AdamW
EAGER = {"reader": {"compile": False, "compile_mode": "default", "adamw_impl": "auto", "pad_to_multiple": 1}}


def table2_splits(dev_fraction: float = 0.1) -> dict[str, dict[str, int]]:
    """The LM-BFF splits of the eight tasks (``bench_gpu_scale.TASKS``), dev carved from train."""
    out = {}
    for task, (train, test, _) in TASKS.items():
        dev = int(round(train * dev_fraction))
        out[task] = {"train": train - dev, "dev": dev, "test": test}
    return out


def load_table2(config: Path = CONFIG, overrides: dict | None = None):
    from pgra.core.config import load_config
    from pgra.experiment import Experiment, ExperimentConfig

    return Experiment(load_config(ExperimentConfig, config, overrides))


def measured_settings(exp, results: Path = RESULTS) -> list[str]:
    """Where the config's index batch and reranker budget differ from the runs the plan's rates come from."""
    names = json.loads((results / "gpu_plan_inputs.json").read_text())
    encode = json.loads((results / names["encoding"]["file"]).read_text())["args"]
    rerank = json.loads((results / names["rerank"]["file"]).read_text())["args"]
    cfg = exp.cfg
    wanted = (("index.dense.batch_size", cfg.index.dense.batch_size, encode["encode_batch"]),
              ("rerank.max_tokens_per_batch", cfg.rerank.max_tokens_per_batch, rerank["rerank_token_budget"]),
              ("rerank.max_batch_size", cfg.rerank.max_batch_size, rerank["rerank_batch"]))
    return [f"{field}={got} (measured at {want})" for field, got, want in wanted if got != want]


def disk(exp, splits: dict[str, dict[str, int]], workers: int) -> dict:
    """The dry run's disk plan (:func:`pgra.experiment.estimate.plan_disk`) at the LM-BFF split sizes and Wiki1M's
    1M sentences (bytes), with the embedding caches of the same rows that the analyses' further LMs
    (``analysis.consistency.rerank_lms``) fill."""
    from dataclasses import replace

    from pgra.rerank.prompt_guided.cost_model import cache_bytes
    from pgra.runtime.sizes import model_bytes

    names = {t: exp.tasks[t].name for t in exp.cfg.tasks}
    d = plan_disk(exp, exp.plan(), {names[t]: splits[t] for t in exp.cfg.tasks}, workers, corpus=CORPUS)
    rerank = exp.rerank_config(exp.cfg.tasks[0])
    rows = d.cache / cache_bytes(rerank, 1)[0]
    lms = (exp.cfg.analysis or {}).get("consistency", {}).get("rerank_lms", [])
    out = {"index": d.index, "stages": sum(d.stages.values()), "cache": d.cache, "cache_rows": rows,
           "cells": sum(sum(v) for v in d.cells.values()), "models": sum(d.models.values()), "total": d.total,
           "peak": d.peak, "analyses_cache": sum(cache_bytes(replace(rerank, lm=lm), rows)[0] for lm in lms),
           "analyses_models": sum(model_bytes(lm)[0] or 0.0 for lm in lms), "lines": d.lines()}
    out["with_analyses"] = out["total"] + out["models"] + out["analyses_cache"] + out["analyses_models"]
    return out


def plan(gpus: int = 8, results: Path = RESULTS, cells_per_gpu: int = 1, config: Path = CONFIG,
         overrides: dict | None = None) -> dict:
    """The Table 2 grid's planned wall-clock on ``gpus`` GPUs of one node (seconds), with its parts; ``overrides``
    change the config (:data:`EAGER`: the former eager reader)."""
    exp = load_table2(config, overrides)
    fits = BenchFits.load(results, "gpu")
    measured = gpu_measurements(results)
    encoding, index = measured["encoding"], measured["index"]
    per_sentence = 1 / encoding["sentences_per_s"]  # BERT-base encoding on one GPU
    search_per_query = index["search_1000_queries_top150_s"] / 1000  # faiss-cpu on the node's 16 cores
    splits = table2_splits()
    names = {t: exp.tasks[t].name for t in exp.cfg.tasks}
    inputs = {names[t]: sum(splits[t].values()) for t in exp.cfg.tasks}
    queries = sum(inputs.values())
    cells: list[Estimate] = []
    for c in exp.plan():
        e = estimate_cell(names[c.task], c.method, exp.method(c.task, c.method).settings(), [], inputs, fits,
                          {names[t]: splits[t] for t in exp.cfg.tasks})
        e.label = c.label
        cells.append(e)
    k = exp.cfg.retrieve.k
    rerank_texts = sum(n * (k + 1) for n in inputs.values())
    rerank_gpu_s = sum(fits.rerank_seconds(n * (k + 1)) for n in inputs.values())

    def wallclock(n: int, per_gpu: int = cells_per_gpu) -> dict:
        index_s = CORPUS * per_sentence / n + index["index_build_s"]
        candidates_s = queries * (search_per_query + per_sentence / n)
        rerank_s = rerank_gpu_s / n
        cells_s = Plan([], cells, n * per_gpu, per_gpu).wallclock()[1]  # GPUs x cells_per_gpu workers
        return {"index_s": index_s, "candidates_s": candidates_s, "rerank_s": rerank_s, "cells_s": cells_s,
                "stages_s": index_s + candidates_s + rerank_s, "total_s": index_s + candidates_s + rerank_s + cells_s}

    parts = wallclock(gpus)
    needed = next((n for n in range(1, 64 * gpus) if wallclock(n)["total_s"] <= HOUR), None)
    costs = [e.seconds for e in cells]
    shared = Plan([], cells, gpus * cells_per_gpu, cells_per_gpu)  # a GPU's hours hold cells_per_gpu cells' seconds side by side
    cell_gpu_s = sum(shared.shared_seconds(e) for e in cells) / cells_per_gpu
    gpu_hours = (CORPUS * per_sentence + queries * per_sentence + rerank_gpu_s + cell_gpu_s) / HOUR
    by_method = {m: [e.seconds for e, c in zip(cells, exp.plan(), strict=True) if c.method == m]
                 for m in exp.cfg.methods}
    return {"gpus": gpus, "cells_per_gpu": cells_per_gpu, **parts, "queries": queries, "rerank_texts": rerank_texts,
            "cells": len(cells), "cell_gpu_s": cell_gpu_s, "longest_cell_s": max(costs),
            "shortest_cell_s": min(costs), "cell_s_by_method": {m: (min(v), max(v)) for m, v in by_method.items()},
            "cells_lower_bound_s": max(sum(costs) / (gpus * cells_per_gpu), max(costs)), "gpu_hours": gpu_hours,
            "gpus_for_one_hour": needed, "written_tb": sum(e.written_bytes for e in cells) / 1e12,
            "kept_gb": sum(e.kept_bytes for e in cells) / 1e9, "reader_source": cells[-1].source,
            "rerank_source": fits.rerank_source, "differs": measured_settings(exp, results), "estimates": cells,
            "disk": disk(exp, splits, gpus * cells_per_gpu)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--cells-per-gpu", type=int, nargs="*", default=[1, 2],
                    help="cells side by side on each GPU (several: one plan each)")
    args = ap.parse_args(argv)
    plans = [plan(args.gpus, cells_per_gpu=c) for c in args.cells_per_gpu]
    for p in plans:
        print(f"Table 2 grid on one node of {p['gpus']} H100s, {p['cells_per_gpu']} cell(s) per GPU "
              f"(planned from bench/results for configs/paper/experiment_table2.yaml):")
        for line in p["differs"]:
            print(f"  the config's {line}: priced at the measured rate")
        print(f"  index: 1M BERT-base sentences sharded over the GPUs + the flat index: {format_seconds(p['index_s'])}")
        print(f"  candidates (8 tasks, faiss-cpu search on the node's cores): {format_seconds(p['candidates_s'])}")
        print(f"  reranked (8 tasks, {p['rerank_texts']:,} texts, sharded): {format_seconds(p['rerank_s'])}"
              f"  [{p['rerank_source']}]")
        spans = ", ".join(f"{m} {format_seconds(a)}-{format_seconds(b)}" for m, (a, b) in p["cell_s_by_method"].items())
        print(f"  {p['cells']} reader cells, {p['cell_gpu_s'] / HOUR:.1f} GPU h ({spans}), on {p['gpus']} GPUs "
              f"costliest first: {format_seconds(p['cells_s'])} (bound {format_seconds(p['cells_lower_bound_s'])})")
        print(f"    e.g. {p['estimates'][-1].label}: {p['reader_source']}")
        print(f"  disk: checkpoints and best/ write at most {p['written_tb']:.2f} TB, {p['kept_gb']:.0f} GB kept")
        print("\n".join(f"  {line}" for line in p["disk"]["lines"]))
        print(f"    the analyses' further LMs' embedding caches of the same rows: up to "
              f"{p['disk']['analyses_cache'] / 1e9:.0f} GB")
        if p["cells_per_gpu"] > 1:
            print(f"  {p['cells_per_gpu']} cells per GPU: assumed, not measured (each cell at the longer of its own "
                  f"time and {p['cells_per_gpu']} x its device time)")
        met = "met" if p["total_s"] <= HOUR else "not met"
        print(f"  total: {format_seconds(p['total_s'])} wall-clock, {p['gpu_hours']:.1f} GPU h; goal under one hour: "
              f"{met} (at these rates {p['gpus_for_one_hour']} GPUs would meet it)")
    return plans


if __name__ == "__main__":
    main()
