"""The demo reader's cost per training step against ``train_top_layers`` n and the evidence count d.

bert2bert-MiniLM (6 encoder layers) on CPU: n = 0 (``freeze_encoder``: the decoder trains on the stored encoder
outputs), 1 and 2 (the top layers train on the stored outputs of the 4 or 5 frozen ones) and 6 (every weight trains,
the encoder runs at every step), for d = 2, 4, 8, 16 passages of ``--max-length`` tokens: MR training inputs, each
with d demo-corpus sentences as evidence (a step's cost depends on the token counts, not on which sentences), global
batch ``--batch``, AdamW. The readers' steps run round-robin (each n once per round, on the same batch). The cost is
the process's CPU seconds per step on ``--threads`` torch threads (1 by default: on cores shared with other jobs the
wall time of a step swings with their load, its CPU time much less, and one thread spins on no sibling), median of
the timed rounds after one warm-up round; its ratio to the n=0 step's in the same process is what compares.
``--precisions fp32,bf16`` also trains a copy of each reader with its forward under ``torch.autocast`` bf16 (what
``reader.mixed_precision: bf16`` does; fp32 master weights, the stored outputs shared), round-robin with the fp32
one, and reports each bf16 step's ratio to the fp32 step at the same (d, n).
Reported per (d, n, precision): CPU s/step, the ratios, wall s/step, the weights trained and the one-time CPU cost of
storing the frozen layers' outputs per training input.

    python bench/bench_reader_top_layers.py [--d 2,4,8,16] [--n 0,1,2,6] [--steps 2] [--batch 4] [--threads 1]
                                            [--precisions fp32[,bf16]]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", default="2,4,8,16", help="evidence sentences per input (comma-separated)")
    ap.add_argument("--n", default="0,1,2,6", help="train_top_layers values (6 = every weight; comma-separated)")
    ap.add_argument("--steps", type=int, default=2, help="timed rounds per d (after one warm-up round)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU time is measured)")
    ap.add_argument("--precisions", default="fp32", help="fp32 and/or bf16 (autocast), comma-separated")
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()

    import torch

    from pgra.reader.data import ReaderFormatter
    from pgra.reader.encoded import EncodedInputs
    from pgra.reader.fid import FiDReader, load_tokenizer
    from pgra.tasks import get_task, load_task

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    task = get_task("mr")
    inputs = (args.steps + 1) * args.batch
    train = load_task(task, ROOT / "data", splits=("train",))["train"][:inputs]
    corpus = (ROOT / "data/demo/wiki_sentences.txt").read_text(encoding="utf-8").splitlines()
    rng = random.Random(0)
    model = str(ROOT / "models/bert2bert-minilm")
    tok = load_tokenizer(model)
    ds, ns = [int(x) for x in args.d.split(",")], [int(x) for x in args.n.split(",")]
    precisions = args.precisions.split(",")
    if not set(precisions) <= {"fp32", "bf16"} or "fp32" not in precisions:
        ap.error("--precisions takes fp32 (the reference, always run) and bf16")
    readers = {}
    for n in ns:
        for p in precisions:
            reader = FiDReader.from_pretrained(model)
            layers = len(reader.model.get_encoder().encoder.layer)
            if n < layers:
                reader.freeze_encoder(n)
            opt = torch.optim.AdamW([w for w in reader.parameters() if w.requires_grad], lr=1e-4)
            readers[n, p] = (reader, opt)
    print(f"bert2bert-MiniLM ({layers} encoder layers), MR, batch {args.batch}, {args.max_length} tokens per passage, "
          f"{args.steps} timed rounds after 1 warm-up; torch threads {torch.get_num_threads()}")
    print("| d | n | precision | CPU s/step | vs n=0 | vs fp32 | wall s/step | weights trained | storing, CPU s per "
          "input |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for d in ds:
        records = [{"id": ex.id, "text": ex.text, "label": ex.label,
                    "ctxs": [{"id": j, "text": corpus[rng.randrange(len(corpus))]} for j in range(d)]} for ex in train]
        fmt = ReaderFormatter(task, tok, n_passages=d, max_length=args.max_length)
        encoded, store_s = {}, {}
        for n in ns:
            reader = readers[n, precisions[0]][0]  # the stored outputs (fp32) serve every precision
            if getattr(reader, "frozen_encoder", False):
                t = time.process_time()
                encoded[n] = EncodedInputs.compute(reader, fmt, records, batch_size=32)
                store_s[n] = (time.process_time() - t) / len(records)
        times: dict[tuple[int, str], list[float]] = {key: [] for key in readers}
        walls: dict[tuple[int, str], list[float]] = {key: [] for key in readers}
        for step in range(args.steps + 1):
            idx = list(range(step * args.batch, (step + 1) * args.batch))
            for (n, p), (reader, opt) in readers.items():
                reader.train()
                t, wall = time.process_time(), time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=p == "bf16"):
                    if n in encoded:
                        states, mask = encoded[n].passages(idx)
                        labels = fmt.label_batch([records[i] for i in idx])["labels"]
                        loss = reader(attention_mask=mask, labels=labels, stored_states=states).loss
                    else:  # tokenising is part of the full reader's step
                        b = fmt.collate([records[i] for i in idx])
                        loss = reader(b["input_ids"], b["attention_mask"], labels=b["labels"]).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                if step:  # the first round is warm-up
                    times[n, p].append(time.process_time() - t)
                    walls[n, p].append(time.perf_counter() - wall)
        for (n, p), (reader, _) in readers.items():
            s, w = statistics.median(times[n, p]), statistics.median(walls[n, p])
            base = statistics.median(times[ns[0], p])
            fp32 = statistics.median(times[n, "fp32"])
            trained = sum(x.numel() for x in reader.parameters() if x.requires_grad)
            row = {"d": d, "n": n, "precision": p, "cpu_s_per_step": s, "ratio_to_n0": s / base,
                   "ratio_to_fp32": s / fp32, "wall_s_per_step": w, "weights_trained": trained,
                   "store_cpu_s_per_input": store_s.get(n)}
            rows.append(row)
            stored = f"{store_s[n]:.3f}" if n in store_s else "–"
            print(f"| {d} | {n} | {p} | {s:.2f} | {s / base:.2f}x | {s / fp32:.2f}x | {w:.2f} | {trained / 1e6:.1f} M "
                  f"| {stored} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
