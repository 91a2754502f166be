"""Paired bootstrap intervals for `pgra analyze`'s *Rerankers compared* table (docs/rerankers.md).

Per reranked stage of an experiment: the label consistency of the top d it keeps on the test split (the share of
(input, evidence) pairs whose evidence the analysis's labeller labels with the input's gold label), a 95% interval
from resampling the inputs, the paired difference from the first stage's own top d, the mean first-stage rank of
what it keeps, how often it keeps each first-stage rank and how much of it each other stage keeps too. Reads only what `pgra analyze` (consistency) and the
stages wrote.

    python bench/rerankers_bootstrap.py runs/demo-experiment --task mr --d 2
    python bench/rerankers_bootstrap.py runs/demo-experiment --task mr --d 2 --json docs/results/rerankers-mr-intervals.json

``--json OUT`` also writes the rows as a record (shares as fractions, as `analysis.json` has them), which
scripts/rerankers_table.py renders into docs/rerankers.md beside the bundle's `analysis.json`.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

FIRST = "first stage"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def reranker_of(stage: str) -> str:
    """The reranker a stage folder holds, as `pgra analyze`'s *Rerankers compared* names it: ``reranked`` the
    prompt-guided one, ``reranked-<name>`` ``<name>``."""
    return FIRST if stage == FIRST else "prompt_guided" if stage == "reranked" else stage.removeprefix("reranked-")


def stages(root: Path, task: str, split: str) -> dict[str, Path | None]:
    """The first stage (None: the candidates themselves) and every reranked stage's ``<split>.jsonl``."""
    return {FIRST: None, **{p.parent.name: p for p in sorted((root / task).glob(f"reranked*/{split}.jsonl"))}}


def _shared(mine: list[set[str]], theirs: list[set[str]]) -> float:
    """The share of the sentences ``mine`` keeps (per input) that ``theirs`` keeps for the same input."""
    return sum(len(a & b) for a, b in zip(mine, theirs, strict=True)) / max(1, sum(map(len, mine)))


def intervals(root: Path, task: str = "mr", d: int = 2, split: str = "test", resamples: int = 2000,
              seed: int = 0) -> list[dict[str, Any]]:
    """One row per stage: its consistency ``share`` with its 2.5-97.5% interval, the paired difference from the
    first stage (``vs_first``, interval), the mean first-stage rank kept, the count of each rank kept and the share of
    its kept sentences each other stage keeps for the same input (``shared_with``)."""
    labels = json.loads((root / "analysis" / task / "pseudo_labels.json").read_text(encoding="utf-8"))["labels"]
    candidates = _lines(root / task / "candidates" / f"{split}.jsonl")
    idx = np.random.default_rng(seed).integers(0, len(candidates), (resamples, len(candidates)))

    def consistency(records: list[dict]) -> np.ndarray:
        return np.array([np.mean([labels[str(c["id"])] == r["label"] for c in r["ctxs"][:d]]) for r in records])

    base = consistency(candidates)
    found = {stage: candidates if path is None else _lines(path) for stage, path in stages(root, task, split).items()}
    for stage, records in found.items():
        if [r["id"] for r in records] != [r["id"] for r in candidates]:
            raise SystemExit(f"error: {root / task / stage}: its inputs are not the candidates' ({split})")
    kept = {stage: [{str(c["id"]) for c in r["ctxs"][:d]} for r in records] for stage, records in found.items()}
    rows = []
    for stage, records in found.items():
        c = consistency(records)
        boot, diff = c[idx].mean(1), (c - base)[idx].mean(1)
        ranks = [j + 1 if stage == FIRST else x["retrieval_rank"] for r in records for j, x in enumerate(r["ctxs"][:d])]
        rows.append({"stage": stage, "reranker": reranker_of(stage), "inputs": len(records), "pairs": len(ranks),
                     "share": float(c.mean()), "share_low": float(np.percentile(boot, 2.5)),
                     "share_high": float(np.percentile(boot, 97.5)), "vs_first": float((c - base).mean()),
                     "vs_first_low": float(np.percentile(diff, 2.5)), "vs_first_high": float(np.percentile(diff, 97.5)),
                     "mean_rank_kept": float(np.mean(ranks)),
                     "ranks_kept": {str(k): v for k, v in sorted(Counter(map(int, ranks)).items())},
                     "shared_with": {reranker_of(other): _shared(kept[stage], kept[other])
                                     for other in found if other != stage}})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as the markdown table this script always printed (points and percent)."""
    lines = ["| stage | label consistency (%) | 95% interval | vs first stage (points, 95%) | mean first-stage rank kept |",
             "|---|---|---|---|---|"]
    for r in rows:
        vs = "—" if r["stage"] == FIRST else (f"{100 * r['vs_first']:+.1f} ({100 * r['vs_first_low']:+.1f} to "
                                              f"{100 * r['vs_first_high']:+.1f})")
        lines.append(f"| {r['stage']} | {100 * r['share']:.1f} | {100 * r['share_low']:.1f}–{100 * r['share_high']:.1f}"
                     f" | {vs} | {r['mean_rank_kept']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", help="the experiment folder (after `pgra analyze` with the consistency analysis)")
    ap.add_argument("--task", default="mr")
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--split", default="test")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="OUT", help="also write the rows and the settings as a JSON record")
    args = ap.parse_args(argv)
    rows = intervals(Path(args.experiment), args.task, args.d, args.split, args.resamples, args.seed)
    print(markdown(rows))
    if args.json:
        record = {"what": "paired bootstrap over the inputs of each reranked stage's label consistency "
                          "(python bench/rerankers_bootstrap.py)",
                  "experiment": Path(args.experiment).resolve().name, "task": args.task, "d": args.d,
                  "split": args.split, "resamples": args.resamples, "seed": args.seed, "rows": rows}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
