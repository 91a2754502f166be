"""The demo reader with ``freeze_encoder`` (decoder trained on stored encoder outputs) against today's reader
(every weight trained, the encoder run at every step), on the same batches in one process.

bert2bert-MiniLM on CPU, MR training inputs with their MiniLM evidence (d passages of ``max_length`` tokens),
global batch 16, AdamW. Reported per epoch of ``--inputs`` training inputs: the full reader's training time
against the frozen reader's one-time encoding plus its training time (``--epochs`` epochs amortise the encoding).

    python bench/bench_reader_frozen.py [--inputs 256] [--steps 8] [--d 2] [--epochs 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=256, help="training inputs encoded (one epoch)")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per reader (after one warm-up step)")
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=5, help="epochs over which the one-time encoding is spread")
    args = ap.parse_args()

    import torch

    from pgra.reader.data import ReaderFormatter
    from pgra.reader.encoded import EncodedInputs
    from pgra.reader.fid import FiDReader, load_tokenizer
    from pgra.retrieval.index import Index
    from pgra.tasks import get_task, load_task

    torch.manual_seed(0)
    task = get_task("mr")
    train = load_task(task, ROOT / "data", splits=("train",))["train"][: args.inputs]
    hits = Index(ROOT / "indexes/demo-minilm").search_hits([ex.text for ex in train], max(args.d, 1))
    records = [{"id": ex.id, "text": ex.text, "label": ex.label, "ctxs": h} for ex, h in zip(train, hits, strict=True)]
    model = str(ROOT / "models/bert2bert-minilm")
    fmt = ReaderFormatter(task, load_tokenizer(model), n_passages=args.d, max_length=args.max_length)
    batches = [list(range(i * args.batch, (i + 1) * args.batch)) for i in range(args.steps + 1)]

    def timed(step_fn, reader) -> float:
        opt = torch.optim.AdamW([p for p in reader.parameters() if p.requires_grad], lr=1e-4)
        times = []
        for i, idx in enumerate(batches):
            t = time.perf_counter()
            step_fn(reader, idx).backward()
            opt.step()
            opt.zero_grad()
            if i:  # the first step is warm-up
                times.append(time.perf_counter() - t)
        return sum(times) / len(times)

    def full_step(reader, idx):
        b = fmt.collate([records[i] for i in idx])  # tokenising is part of today's step too
        return reader(b["input_ids"], b["attention_mask"], labels=b["labels"]).loss

    full = FiDReader.from_pretrained(model).train()
    full_s = timed(full_step, full)

    frozen = FiDReader.from_pretrained(model)
    frozen.freeze_encoder()
    t = time.perf_counter()
    encoded = EncodedInputs.compute(frozen, fmt, records, batch_size=64)
    encode_s = time.perf_counter() - t
    frozen.train()

    def frozen_step(reader, idx):
        states, mask = encoded.batch(idx)
        labels = fmt.label_batch([records[i] for i in idx])["labels"]
        return reader(attention_mask=mask, labels=labels, encoder_states=states).loss

    frozen_s = timed(frozen_step, frozen)
    steps_per_epoch = args.inputs / args.batch
    full_epoch = full_s * steps_per_epoch
    frozen_epoch = frozen_s * steps_per_epoch + encode_s / args.epochs
    trainable = sum(p.numel() for p in frozen.parameters() if p.requires_grad)
    print(f"MR, {args.inputs} inputs, d={args.d}, {args.max_length} tokens, batch {args.batch}; "
          f"torch threads {torch.get_num_threads()}")
    print(f"full reader:   {full_s:.3f} s/step ({sum(p.numel() for p in full.parameters()):,} weights trained)")
    print(f"frozen reader: {frozen_s:.3f} s/step ({trainable:,} weights trained) + encoding {encode_s:.1f} s once "
          f"({args.inputs / encode_s:.0f} inputs/s)")
    print(f"per step: {full_s / frozen_s:.2f}x; per epoch with the encoding spread over {args.epochs} epochs: "
          f"{full_epoch:.1f} s vs {frozen_epoch:.1f} s = {full_epoch / frozen_epoch:.2f}x")


if __name__ == "__main__":
    main()
