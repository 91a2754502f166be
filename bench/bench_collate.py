"""The reader's training collation on the host, first epoch against later ones (``ReaderFormatter(cache_ids=True)``,
what ``pgra train`` uses): each (input, evidence) pair is tokenized and cut to ``max_length`` once, then read back.

Two inputs: the GPU benchmark's random-word task (every pair cut from 152 words to 128 tokens: several tokenizer
calls a pair, the worst case) with its T5-sized word-level tokenizer, and, when ``make demo`` has run, the demo's
MR candidates (short Wikipedia evidence) with the demo reader's MiniLM tokenizer. Prints milliseconds per batch of
8 inputs x 16 passages for epoch 1 and epoch 2, and their ratio.

    python bench/bench_collate.py [--demo runs/demo-experiment/mr/candidates --tokenizer models/bert2bert-minilm]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from transformers import PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.bench_gpu_scale import _loop_data, word_tokenizer  # noqa: E402
from pgra.reader.data import ReaderFormatter  # noqa: E402
from pgra.reader.fid import load_tokenizer  # noqa: E402
from pgra.storage.artifacts import MANIFEST, read_manifest  # noqa: E402
from pgra.tasks import task_from_manifest  # noqa: E402


def epochs(data: Path, tokenizer, inputs: int, batch: int = 8, passages: int = 16) -> tuple[float, float]:
    """Seconds per batch collating the first ``inputs`` training inputs twice with one cached formatter."""
    task = task_from_manifest(read_manifest(data, ("reranked", "candidates")), data / MANIFEST, "")
    records = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()][:inputs]
    fmt = ReaderFormatter(task, tokenizer, passages, 128, cache_ids=True)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        for i in range(0, len(records), batch):
            fmt.collate(records[i:i + batch])
        times.append((time.perf_counter() - start) / -(-len(records) // batch))
    return times[0], times[1]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=160)
    ap.add_argument("--demo", default="runs/demo-experiment/mr/candidates")
    ap.add_argument("--tokenizer", default="models/bert2bert-minilm")
    args = ap.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        shape = SimpleNamespace(reader_batch=8, passage_tokens=128)
        tokenizer = word_tokenizer(Path(tmp) / "tokenizer", 32128)  # T5's vocabulary size
        vocab = list(json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"])
        data = _loop_data(Path(tmp) / "data", vocab, shape, np.random.default_rng(0))
        rows["random words, cut to 128 tokens"] = epochs(data, PreTrainedTokenizerFast.from_pretrained(tokenizer),
                                                         args.inputs)
    if (Path(args.demo) / MANIFEST).is_file() and Path(args.tokenizer).is_dir():
        rows["demo MR candidates, MiniLM tokenizer"] = epochs(Path(args.demo), load_tokenizer(args.tokenizer),
                                                              args.inputs)
    for name, (first, later) in rows.items():
        print(f"{name}: epoch 1 {1e3 * first:.1f} ms a batch, epoch 2 {1e3 * later:.1f} ms ({first / later:.0f}x)")
    return rows


if __name__ == "__main__":
    main()
