"""FiD reader training throughput and peak memory vs the number of passages d (demo reader, CPU).

Each d runs in its own process (peak RSS is per process): bert2bert-MiniLM, global batch 8, 48 tokens per
passage, AdamW; wiki_topic training inputs with their MiniLM evidence. The encoder runs on batch x d
passages, so its cost should grow linearly in d while the decoder's stays flat.

    python bench/bench_reader.py [--steps 6] [--ds 1,4,8,16] [--index indexes/demo-minilm] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_one(d: int, steps: int, batch: int, max_length: int, index: str) -> dict:
    import torch

    from pgra.reader.data import ReaderFormatter
    from pgra.reader.fid import FiDReader, load_tokenizer
    from pgra.retrieval.index import Index
    from pgra.tasks import get_task, load_task

    torch.manual_seed(0)
    task = get_task("wiki_topic")
    train = load_task(task, ROOT / "data", splits=("train",))["train"][: batch * (steps + 1)]
    hits = Index(index).search_hits([ex.text for ex in train], max(d, 1))
    records = [{"id": ex.id, "text": ex.text, "label": ex.label, "ctxs": h} for ex, h in zip(train, hits, strict=True)]
    model = str(ROOT / "models/bert2bert-minilm")
    reader = FiDReader.from_pretrained(model).train()
    fmt = ReaderFormatter(task, load_tokenizer(model), n_passages=d, max_length=max_length)
    opt = torch.optim.AdamW(reader.parameters(), lr=1e-4)
    times = []
    for step in range(steps + 1):
        batch_t = fmt.collate(records[step * batch:(step + 1) * batch])
        t = time.perf_counter()
        loss = reader(batch_t["input_ids"], batch_t["attention_mask"], labels=batch_t["labels"]).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step:  # the first step is warm-up
            times.append(time.perf_counter() - t)
    per_step = sum(times) / len(times)
    return {"d": d, "s_per_step": per_step, "examples_per_s": batch / per_step,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--ds", default="1,4,8,16")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=48)
    ap.add_argument("--index", default=str(ROOT / "indexes/demo-minilm"), help="the demo's MiniLM index")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args.one, args.steps, args.batch, args.max_length, args.index)))
        return
    rows = []
    for d in [int(x) for x in args.ds.split(",")]:
        out = subprocess.run([sys.executable, __file__, "--one", str(d), "--steps", str(args.steps), "--batch",
                              str(args.batch), "--max-length", str(args.max_length), "--index", args.index], capture_output=True,
                             text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    base = rows[0]
    print(f"{'d':>3} {'s/step':>8} {'examples/s':>11} {'peak RSS GiB':>13} {'time vs d=' + str(base['d']):>12}")
    for r in rows:
        print(f"{r['d']:>3} {r['s_per_step']:>8.2f} {r['examples_per_s']:>11.2f} {r['peak_rss_gib']:>13.2f} "
              f"{r['s_per_step'] / base['s_per_step']:>11.2f}x")
    if len(rows) > 2:  # linear fit of time in d: the slope is the per-passage (encoder) cost
        import numpy as np

        ds = np.array([r["d"] for r in rows], dtype=float)
        ts = np.array([r["s_per_step"] for r in rows])
        slope, icpt = np.polyfit(ds, ts, 1)
        resid = np.max(np.abs(ts - (slope * ds + icpt)) / ts)
        print(f"linear fit: {icpt:.2f} s + {slope:.3f} s per passage per step; max relative residual {resid:.1%}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
