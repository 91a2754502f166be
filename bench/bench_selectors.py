"""Every demonstration-selection strategy at laptop scale: in-context learning accuracy, selection cost and wall
time on a sample of a task's training and test inputs, with the offline ICL LM (SmolLM2-135M) and MiniLM as the
strategies' sentence encoder.

For each task: ``--train`` training inputs and ``--test`` test inputs sampled (seed 0), m = ``--num-demos``; the
strategies that draw at random (``random``, ``paper``, ``mdl``) run once per seed of ``--seeds``; the others once.
``mdl`` and ``topk_cone`` use small candidate pools here (``--lm-candidates``; ``mdl_samples`` 5) to stay cheap.

    python bench/bench_selectors.py --tasks mr,wiki_topic --train 256 --test 100 [--out bench/results/selectors.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from pgra.icl.classify import ICLClassifier
from pgra.icl.config import ICLConfig
from pgra.selection import STRATEGIES, SelectorSettings
from pgra.tasks import get_task, load_task

ROOT = Path(__file__).resolve().parents[1]
SEEDED = ("random", "paper", "mdl")


def run(task_name: str, strategies: list[str], n_train: int, n_test: int, m: int, seeds: list[int],
        lm_candidates: int, cache: Path, dtype: str = "fp32") -> list[dict]:
    task = get_task(task_name)
    data = load_task(task, ROOT / "data", splits=("train", "test"))
    rng = np.random.default_rng(0)
    pools = {split: data.splits[split] for split in ("train", "test")}
    n = {"train": min(n_train, len(pools["train"])), "test": min(n_test, len(pools["test"]))}  # all, at most
    train, test = ([pools[s][i] for i in sorted(rng.choice(len(pools[s]), n[s], replace=False))]
                   for s in ("train", "test"))
    records = [{"id": ex.id, "text": ex.text, "label": ex.label} for ex in test]
    options = {"mdl_candidates": lm_candidates, "mdl_samples": 5, "cone_candidates": lm_candidates,
               "votek_pool": min(64, len(train)), "dpp_candidates": 32}
    rows = []
    for name in strategies:
        for seed in (seeds if name in SEEDED else seeds[:1]):
            settings = SelectorSettings(encoder=str(ROOT / "models" / "minilm"), pooler="mean",
                                        cache_dir=str(cache), **options)
            cfg = ICLConfig(lm=str(ROOT / "models" / "smollm2-135m"), selection=name, num_demos=m, seed=seed,
                            demos=settings, show_progress=False, max_tokens_per_batch=8192, dtype=dtype)
            start = time.perf_counter()
            clf = ICLClassifier(cfg, task, train, settings)
            clf.prepare(records)
            selected_s = time.perf_counter() - start
            lines = clf.predict(records)
            acc = float(np.mean([x["prediction"] == r["label"] for x, r in zip(lines, records, strict=True)]))
            cost = clf.cost()["selection"]
            rows.append({"task": task_name, "strategy": name, "seed": seed, "accuracy": acc,
                         "test_inputs": len(records),
                         "selection_lm_calls": cost["lm_calls"], "selection_lm_tokens": cost["lm_tokens"],
                         "selection_s": round(selected_s, 1), "total_s": round(time.perf_counter() - start, 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="mr,wiki_topic")
    p.add_argument("--strategies", default=",".join(s for s in STRATEGIES.names() if s != "skill_knn"))
    p.add_argument("--train", type=int, default=256)
    p.add_argument("--test", type=int, default=100)
    p.add_argument("--num-demos", type=int, default=4)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--lm-candidates", type=int, default=8)
    p.add_argument("--dtype", default="bf16-if-native", help="the ICL LM's dtype (icl.dtype)")
    p.add_argument("--out", default="")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        rows = [r for t in a.tasks.split(",") for r in run(t, a.strategies.split(","), a.train, a.test, a.num_demos,
                                                          [int(s) for s in a.seeds.split(",")], a.lm_candidates,
                                                          Path(cache), a.dtype)]
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1) + "\n")
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Per task and strategy: accuracy (the mean over seeds, their range when several), its 95% binomial interval
    on one seed's test inputs (about ±1.96 sqrt(p(1-p)/n)), and the selection's LM cost and seconds (means)."""
    out = ["| task | strategy | seeds | accuracy (%) | ±95% (one seed) | seed range | selection LM calls | "
           "selection LM tokens | selection s | total s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in rows):
        for name in dict.fromkeys(r["strategy"] for r in rows if r["task"] == task):
            rs = [r for r in rows if r["task"] == task and r["strategy"] == name]
            acc = np.array([r["accuracy"] for r in rs])
            half = 196 * np.sqrt(acc.mean() * (1 - acc.mean()) / rs[0]["test_inputs"])
            spread = f"{100 * acc.min():.1f}–{100 * acc.max():.1f}" if len(rs) > 1 else "—"
            mean = {k: np.mean([r[k] for r in rs]) for k in ("selection_lm_calls", "selection_lm_tokens",
                                                              "selection_s", "total_s")}
            out.append(f"| {task} | `{name}` | {len(rs)} | {100 * acc.mean():.1f} | {half:.1f} | {spread} | "
                       f"{mean['selection_lm_calls']:.0f} | {mean['selection_lm_tokens']:.0f} | "
                       f"{mean['selection_s']:.1f} | {mean['total_s']:.1f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
