"""Unsupervised SimCSE: the loss falls, exact resume, 2 processes = 1 process, build-index reads the output."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from pgra.simcse.config import SimCSEConfig
from pgra.simcse.geometry import alignment, uniformity
from pgra.simcse.train import setup, train_loop, train_simcse
from tests import numerics
from tests.conftest import SENTENCES, copy_in_dtype, launch_failure

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def corpus(tmp_path) -> Path:
    path = tmp_path / "corpus.txt"  # 48 distinct sentences: the fixtures and their numbered variants
    path.write_text("\n".join(SENTENCES + [f"{s} {i}" for i, s in enumerate(SENTENCES)]) + "\n")
    return path


def _cfg(corpus, tiny_bert, out, **kw) -> SimCSEConfig:
    base = {"corpus": str(corpus), "encoder": str(tiny_bert), "out": str(out), "batch_size": 8, "heldout": 8,
            "max_steps": 6, "learning_rate": 1e-3, "show_progress": False}
    return SimCSEConfig(**{**base, **kw})


def _log(out: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (out / "train_log.jsonl").read_text().splitlines()]


def test_geometry_metrics():
    x = torch.nn.functional.normalize(torch.randn(50, 8), dim=-1)
    assert alignment(x, x) == numerics.close(0.0, depth=8, scale=1)  # unit rows, 8 dims
    assert alignment(x, -x) == numerics.close(4.0, depth=8)
    same = torch.nn.functional.normalize(torch.ones(50, 8), dim=-1)
    assert uniformity(same) == numerics.close(0.0, depth=8, scale=1)  # all on one point: the worst value
    assert uniformity(x) < -1.0


def test_loss_falls_and_output_is_an_index_encoder(corpus, tiny_bert, tmp_path):
    """Dropout 0 here: the random tiny BERT's CLS vectors are nearly the same for every sentence (uniformity
    about 0), so dropout 0.1 noise swamps them and the loss only sinks to ln(batch); without dropout the loss
    must fall far below ln(batch), which needs the in-batch negatives to be told apart. The real dropout
    setting is measured on the demo corpus (bench/README.md) and trained in the resume test."""
    out = tmp_path / "simcse"
    metrics = train_simcse(_cfg(corpus, tiny_bert, out, max_steps=40, dropout=0.0))
    losses = _log(out)
    assert len(losses) == 40 and np.mean(losses[:5]) > 0.9 * np.log(8)
    assert np.mean(losses[-5:]) < 0.4 * np.log(8)
    m = json.loads((out / "manifest.json").read_text())
    assert m["kind"] == "simcse" and m["steps"] == 40 and m["loss"] == losses[-1]
    assert m["corpus"]["size"] == 48 and m["corpus"]["source_fingerprint"].startswith("sha256:")
    assert set(metrics["before"]) == set(metrics["after"]) == {"alignment", "uniformity", "sentences"}
    assert json.loads((out / "metrics.json").read_text()) == metrics
    assert set(load_file(out / "simcse_head.safetensors")) == {"0.weight", "0.bias"}

    from pgra.retrieval.index import DenseConfig, Index, IndexConfig, build_index

    index = build_index(IndexConfig(corpus=str(corpus), out=str(tmp_path / "index"), show_progress=False,
                                    dense=DenseConfig(encoder=str(out), pooler="cls_before_pooler", batch_size=8)))
    hits = Index(index).search_hits([SENTENCES[3]], 1)[0]
    assert hits[0]["text"] == SENTENCES[3]


def test_a_half_precision_checkpoint_trains_with_fp32_weights(corpus, tiny_bert, tmp_path):
    """transformers 5 keeps a checkpoint's dtype: a fp16 start encoder must still train (fp32 master weights)."""
    half = copy_in_dtype(tiny_bert, tmp_path / "half", "float16")
    out = tmp_path / "simcse"
    train_simcse(_cfg(corpus, half, out, max_steps=2))
    assert np.isfinite(_log(out)).all()
    assert {v.dtype for v in load_file(out / "model.safetensors").values()} == {torch.float32}


def test_resume_reaches_the_uninterrupted_weights(corpus, tiny_bert, tmp_path):
    train_simcse(_cfg(corpus, tiny_bert, tmp_path / "full", max_steps=8))
    cfg = _cfg(corpus, tiny_bert, tmp_path / "resumed", max_steps=8, save_every=3)
    train_loop(setup(cfg), stop_after=4)  # "killed" after step 4: the last checkpoint is step 3
    train_simcse(cfg)
    assert _log(tmp_path / "full") == numerics.close(_log(tmp_path / "resumed")[-8:], depth=numerics.trained(8, numerics.TINY_MODEL))
    a = load_file(tmp_path / "full" / "model.safetensors")
    b = load_file(tmp_path / "resumed" / "model.safetensors")
    numerics.assert_close(numerics.flat(a), numerics.flat(b), depth=numerics.trained(8, numerics.TINY_MODEL))


@pytest.mark.distributed
def test_two_processes_give_the_one_process_loss(corpus, tiny_bert, tmp_path):
    """Dropout 0: each process draws its own dropout masks, so only deterministic views can match exactly."""
    train_simcse(_cfg(corpus, tiny_bert, tmp_path / "one", dropout=0.0))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts" / "train_simcse.py"), "--corpus", str(corpus), "--encoder", str(tiny_bert),
           "--out", str(tmp_path / "two"), "--batch-size", "8", "--heldout", "8", "--max-steps", "6",
           "--learning-rate", "1e-3", "--dropout", "0", "--no-show-progress"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, launch_failure(proc)
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["processes"] == 2
    one, two = _log(tmp_path / "one"), _log(tmp_path / "two")
    assert len(two) == 6 and two == numerics.close(one, depth=numerics.trained(6, numerics.TINY_MODEL))
    a, b = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    numerics.assert_close(numerics.flat(a), numerics.flat(b), depth=numerics.trained(6, numerics.TINY_MODEL))


def test_bad_input_is_one_error_line(corpus, tiny_bert, tmp_path, capsys):
    from pgra.cli import main

    assert main(["train-simcse", "--encoder", str(tiny_bert), "--out", str(tmp_path / "o")]) == 2
    assert main(["train-simcse", "--corpus", str(corpus), "--encoder", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "o"), "--heldout", "8", "--batch-size", "8"]) == 2
    assert main(["train-simcse", "--corpus", str(corpus), "--encoder", str(tiny_bert), "--out", str(tmp_path / "o"),
                 "--heldout", "45", "--batch-size", "8"]) == 2  # 3 sentences left: less than one batch
    err = capsys.readouterr().err
    assert "needs a corpus" in err and "no such folder" in err and "fewer than one batch" in err
