"""What a reader cell spends besides its training steps, through pgra's own code: the cell process's start (a fresh
Python importing what a cell's child imports), loading the reader, a resumable checkpoint (weights, AdamW's two
moments, scheduler, RNG: ``pgra.runtime.training.save_checkpoint``) and ``best/`` (``save_pretrained``), with their sizes.

The reader is the bench's T5-base (``bench_gpu_scale.build``: random weights at T5-base's shape, a word-level
tokenizer of its vocabulary) trained by ``pgra.reader.train.train`` on a small random-word task for ``--steps``
steps, a checkpoint and a dev evaluation after each; the parts are timed by wrapping pgra's own functions. The
training steps themselves are not the point (``bench_gpu_scale.py`` times them on a GPU); the disk, the imports and
the load are what a plan adds to each cell. ``pgra.experiment.estimate`` and ``bench/plan_table2.py`` read the
result (``bench/results/gpu_plan_cells.json`` names the file).

    python bench/bench_cell_overheads.py --json bench/results/cell_overheads_cpu.json
    python bench/bench_cell_overheads.py --tiny --json /tmp/o.json     # tiny T5 (the test suite)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# what a cell's child process imports before it runs anything (python -m pgra.experiment.child cell SPEC)
CHILD_IMPORTS = "import pgra.experiment.child, pgra.reader.train, pgra.reader.fid, accelerate"


def process_start(repeats: int) -> list[float]:
    """Seconds of ``repeats`` fresh interpreters importing what a cell's child imports, one after another."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", CHILD_IMPORTS], check=True, cwd=HERE.parent)
        times.append(time.perf_counter() - start)
    return times


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def cell_parts(model: str, tiny: bool, steps: int, root: Path) -> dict:
    """Train ``model`` for ``steps`` steps with a checkpoint and a dev evaluation after each, timing pgra's parts."""
    import torch

    import pgra.reader.train as train_mod
    from bench.bench_gpu_scale import _loop_data, _loop_reader, params
    from pgra.reader.config import TrainConfig
    from pgra.reader.fid import FiDReader

    args = SimpleNamespace(tiny=tiny, passage_tokens=8, reader_batch=2, seed=0)
    import numpy as np

    reader_dir = _loop_reader(model, root / "reader", args, torch.device("cpu"))
    vocab = list(json.loads((reader_dir / "tokenizer.json").read_text())["model"]["vocab"])
    data = _loop_data(root / "data", vocab, args, np.random.default_rng(0))
    timed: dict[str, list[float]] = {"load": [], "checkpoint": [], "best": []}
    sizes: dict[str, int] = {}
    out = root / "run"

    def wrap(fn, name, size=None):
        def inner(*a, **k):
            start = time.perf_counter()
            result = fn(*a, **k)
            timed[name].append(time.perf_counter() - start)
            if size is not None:
                sizes[name] = size(*a, **k)
            return result
        return inner

    def newest_checkpoint(acc, out_dir, state, *rest):
        return folder_bytes(Path(out_dir) / "checkpoints" / f"step_{state['step']}")

    saved = train_mod.save_checkpoint, train_mod._save_model, FiDReader.from_pretrained
    train_mod.save_checkpoint = wrap(saved[0], "checkpoint", newest_checkpoint)
    train_mod._save_model = wrap(saved[1], "best", lambda acc, reader, tok, directory, *r: folder_bytes(directory))
    FiDReader.from_pretrained = wrap(saved[2], "load")
    try:
        cfg = TrainConfig(data=str(data), out=str(out), model=str(reader_dir), n_passages=2, max_length=8,
                          batch_size=2, max_steps=steps, eval_every=1, save_every=1, eval_batch_size=8,
                          learning_rate=1e-4, show_progress=False, test_split="test", seed=0)
        start = time.perf_counter()
        train_mod.train(cfg)
        total = time.perf_counter() - start
    finally:
        train_mod.save_checkpoint, train_mod._save_model, FiDReader.from_pretrained = saved
    from transformers import AutoModelForSeq2SeqLM

    n_params = params(AutoModelForSeq2SeqLM.from_pretrained(reader_dir))
    return {"model": model, "params": n_params, "steps": steps, "train_total_s": total,
            "load_s": timed["load"], "checkpoint_s": timed["checkpoint"], "checkpoint_bytes": sizes["checkpoint"],
            "best_s": timed["best"], "best_bytes": sizes["best"],
            "checkpoint_bytes_per_param": sizes["checkpoint"] / n_params,
            "checkpoint_bytes_per_s": sizes["checkpoint"] / statistics.median(timed["checkpoint"]),
            "best_bytes_per_s": sizes["best"] / statistics.median(timed["best"])}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="t5-base")
    ap.add_argument("--tiny", action="store_true", help="a tiny T5 (the test suite's smoke run)")
    ap.add_argument("--steps", type=int, default=3, help="steps, each followed by a checkpoint and an evaluation")
    ap.add_argument("--starts", type=int, default=5, help="fresh interpreters timed")
    ap.add_argument("--dir", default=None, help="where the reader, data and run are written (default: a temp folder)")
    ap.add_argument("--json", default="bench/out/cell_overheads.json")
    args = ap.parse_args(argv)
    starts = process_start(args.starts)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        parts = cell_parts(args.model, args.tiny, args.steps, Path(tmp))
    import torch

    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                          "load_average": os.getloadavg()},
              "process_start_s": starts, "process_start_median_s": statistics.median(starts),
              "child_imports": CHILD_IMPORTS, **parts,
              "load_median_s": statistics.median(parts["load_s"]),
              "checkpoint_median_s": statistics.median(parts["checkpoint_s"]),
              "best_median_s": statistics.median(parts["best_s"])}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"process start {result['process_start_median_s']:.2f} s (median of {len(starts)}); {args.model} "
          f"({parts['params']:,} parameters): load {result['load_median_s']:.2f} s, checkpoint "
          f"{parts['checkpoint_bytes'] / 1e9:.2f} GB in {result['checkpoint_median_s']:.2f} s "
          f"({parts['checkpoint_bytes_per_s'] / 1e9:.2f} GB/s), best/ {parts['best_bytes'] / 1e9:.2f} GB in "
          f"{result['best_median_s']:.2f} s")
    return result


if __name__ == "__main__":
    main()
