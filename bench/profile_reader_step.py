"""Where a demo reader's training step goes (issue 66): the frozen-encoder bert2bert reader of `make demo` (decoder
trained on stored encoder outputs, batch 16, 64 tokens a passage) with no evidence (``no_retrieval``) and with d=2
(FiD, PGRA), at 1 and 2 torch threads, profiled by torch.profiler in one process: the step's seconds, the share in
matrix products and the top operators. Run once per SIMD level (the variables are read at import)::

    python bench/profile_reader_step.py --json bench/results/reader_step_native.json
    python bench/profile_reader_step.py --busy     # a busy process beside it: one of the cores shared
    OMP_WAIT_POLICY=PASSIVE python bench/profile_reader_step.py --busy   # torch's threads sleep, not spin, at a wait
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \\
        python bench/profile_reader_step.py --json bench/results/reader_step_avx2.json

Needs `make prepare` and the demo's index (``indexes/demo-minilm``, built by `make demo`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ("addmm", "mm", "bmm", "matmul", "linear", "baddbmm")


def _profile(task, records: list[dict], model: str, d: int, steps: int, batch: int = 16) -> list[dict]:
    """The reader's step with ``d`` passages at 1 and 2 threads: seconds, the share in matrix products, top ops."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pgra.reader.data import ReaderFormatter
    from pgra.reader.encoded import EncodedInputs
    from pgra.reader.fid import FiDReader, load_tokenizer

    torch.manual_seed(0)
    fmt = ReaderFormatter(task, load_tokenizer(model), n_passages=d, max_length=64)
    reader = FiDReader.from_pretrained(model)
    reader.freeze_encoder()
    encoded = EncodedInputs.compute(reader, fmt, records, batch_size=64)
    reader.train()
    opt = torch.optim.AdamW([p for p in reader.parameters() if p.requires_grad], lr=3e-4)

    def step(i: int) -> None:
        idx = [(i * batch + j) % len(records) for j in range(batch)]
        states, mask = encoded.batch(idx)
        labels = fmt.label_batch([records[j] for j in idx])["labels"]
        reader(attention_mask=mask, labels=labels, encoder_states=states).loss.backward()
        opt.step()
        opt.zero_grad()

    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        step(0), step(1)  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            for i in range(steps):
                step(2 + i)
            seconds = (time.perf_counter() - start) / steps
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in ops) or 1
        matmul = sum(e.self_cpu_time_total for e in ops if e.key.split("::")[-1] in MATMUL)
        rows.append({"d": d, "threads": threads, "s_per_step": round(seconds, 4),
                     "matmul_share": round(matmul / total, 3), "encoder_tokens": (1 + d) * 64,
                     "top_ops": [[e.key, round(e.self_cpu_time_total / total, 3)] for e in ops[:6]]})
        print(f"d={d} threads={threads}: {seconds:.3f} s/step, {100 * matmul / total:.0f}% in matrix products; "
              + ", ".join(f"{k} {100 * s:.0f}%" for k, s in rows[-1]["top_ops"][:4]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=192)
    ap.add_argument("--steps", type=int, default=8, help="profiled steps per setting (after two warm-up steps)")
    ap.add_argument("--index", default=str(ROOT / "indexes" / "demo-minilm"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--busy", action="store_true",
                    help="one busy process beside the reader all along (a core shared, as with another job or an SMT "
                         "sibling): what 2 threads then cost")
    args = ap.parse_args()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        _main(args)
    finally:
        if busy:
            busy.kill()


def _main(args: argparse.Namespace) -> None:

    import torch

    from pgra.retrieval.index import Index
    from pgra.runtime.device import cpu_flags, cpu_model
    from pgra.tasks import get_task, load_task

    task = get_task("mr")
    train = load_task(task, ROOT / "data", splits=("train",))["train"][: args.inputs]
    hits = Index(args.index).search_hits([ex.text for ex in train], 2)
    records = [{"id": ex.id, "text": ex.text, "label": ex.label, "ctxs": h} for ex, h in zip(train, hits, strict=True)]
    model = str(ROOT / "models" / "bert2bert-minilm")
    rows = [row for d in (0, 2) for row in _profile(task, records, model, d, args.steps)]
    by = {(r["d"], r["threads"]): r["s_per_step"] for r in rows}
    print(f"evidence (d=2) against none: {by[2, 2] / by[0, 2]:.2f}x at 2 threads, {by[2, 1] / by[0, 1]:.2f}x at 1; "
          f"1 thread against 2: {by[0, 1] / by[0, 2]:.2f}x without evidence, {by[2, 1] / by[2, 2]:.2f}x with it")
    if args.json:
        held = {k: v for k, v in os.environ.items() if k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                                                             "ONEDNN_MAX_CPU_ISA", "OMP_WAIT_POLICY")}
        record = {"cpu": cpu_model(), "avx512_bf16": "avx512_bf16" in cpu_flags(), "held": held, "busy": args.busy,
                  "torch_capability": str(torch.backends.cpu.get_cpu_capability()), "torch": torch.__version__,
                  "machine": platform.machine(), "cores": os.cpu_count(), "rows": rows}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
