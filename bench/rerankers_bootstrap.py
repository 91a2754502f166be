"""Paired bootstrap intervals for `pgra analyze`'s *Rerankers compared* table (docs/rerankers.md).

Per reranked stage of an experiment: the label consistency of the top d it keeps on the test split (the share of
(input, evidence) pairs whose evidence the analysis's labeller labels with the input's gold label), a 95% interval
from resampling the inputs, the paired difference from the first stage's own top d, and the mean first-stage rank
of what it keeps. Reads only what `pgra analyze` (consistency) and the stages wrote.

    python bench/rerankers_bootstrap.py runs/demo-experiment --task mr --d 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", help="the experiment folder (after `pgra analyze` with the consistency analysis)")
    ap.add_argument("--task", default="mr")
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--split", default="test")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    root = Path(args.experiment)
    labels = json.loads((root / "analysis" / args.task / "pseudo_labels.json").read_text())["labels"]
    candidates = _lines(root / args.task / "candidates" / f"{args.split}.jsonl")
    stages = {"first stage": None, **{p.parent.name: p for p in sorted((root / args.task).glob(f"reranked*/{args.split}.jsonl"))}}
    idx = np.random.default_rng(args.seed).integers(0, len(candidates), (args.resamples, len(candidates)))

    def consistency(records: list[dict]) -> np.ndarray:
        return np.array([np.mean([labels[str(c["id"])] == r["label"] for c in r["ctxs"][: args.d]])
                         for r in records])

    base = consistency(candidates)
    print("| stage | label consistency (%) | 95% interval | vs first stage (points, 95%) | mean first-stage rank kept |")
    print("|---|---|---|---|---|")
    for name, path in stages.items():
        records = candidates if path is None else _lines(path)
        if [r["id"] for r in records] != [r["id"] for r in candidates]:
            raise SystemExit(f"{path}: its inputs are not the candidates' ({args.split})")
        c = consistency(records)
        boot, diff = 100 * c[idx].mean(1), 100 * (c - base)[idx].mean(1)
        ranks = [j + 1 if path is None else x["retrieval_rank"] for r in records for j, x in enumerate(r["ctxs"][: args.d])]
        vs = "—" if path is None else (f"{100 * (c - base).mean():+.1f} ({np.percentile(diff, 2.5):+.1f} to "
                                        f"{np.percentile(diff, 97.5):+.1f})")
        print(f"| {name} | {100 * c.mean():.1f} | {np.percentile(boot, 2.5):.1f}–{np.percentile(boot, 97.5):.1f} | {vs} | "
              f"{np.mean(ranks):.2f} |")


if __name__ == "__main__":
    main()
