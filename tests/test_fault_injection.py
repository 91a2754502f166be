"""Kill anywhere, resume, same result: each long stage is killed (exit 137, no cleanup, like `kill -9`) at chosen
points through the PGRA_FAULT hook (pgra/core/faults.py), re-run with the same command, and compared with an
uninterrupted run."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from pgra.cli import main
from pgra.core.faults import ENV, KILLED_EXIT

ROOT = Path(__file__).resolve().parents[1]


def _killed(argv: list[str], point: str) -> None:
    """Run ``pgra argv`` in a fresh process that dies at ``point``."""
    env = {**os.environ, ENV: point, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))",
                           *argv], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == KILLED_EXIT, (point, proc.returncode, proc.stderr[-2000:])
    assert f"killed at {point.split('@')[0]}" in proc.stderr


def _digest(folder: Path, names: list[str]) -> dict[str, str]:
    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names}


def _ok(argv: list[str], capsys) -> str:
    assert main(argv) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_index_build_killed_resumes_to_the_same_index(tmp_path, corpus_txt, tiny_bert, capsys):
    def argv(out):
        return ["build-index", "--corpus", str(corpus_txt), "--encoder", str(tiny_bert), "--out", str(out),
                "--shard-size", "5", "--no-show-progress"]
    _ok(argv(tmp_path / "ref"), capsys)
    names = ["index.faiss", "corpus/texts.bin", "corpus/offsets.npy"]
    for point in ("index.shard@2", "write:emb_00003.npy", "index.manifest"):
        out = tmp_path / point
        _killed(argv(out), point)
        assert not (out / "manifest.json").exists()
        if point == "index.shard@2":  # the finished shards are kept and not encoded again
            assert sorted(p.name for p in (out / ".build").glob("emb_*.npy")) == ["emb_00000.npy", "emb_00001.npy"]
        err = _ok(argv(out), capsys)
        assert "taking over the lock" in err  # the killed run's lock is stale
        assert _digest(out, names) == _digest(tmp_path / "ref", names), point
        assert not (out / ".build").exists()


def test_retrieve_killed_between_splits_reruns_to_the_same_candidates(tmp_path, candidates, sky_task, capsys):
    index = tmp_path / "bm25"  # built by the candidates fixture
    argv = ["retrieve", "--task", str(sky_task), "--index", str(index), "--out", str(tmp_path / "c2"), "-k", "10",
            "--no-show-progress"]
    _killed(argv, "retrieve.split@2")
    assert not (tmp_path / "c2" / "manifest.json").exists()
    _ok(argv, capsys)
    names = ["train.jsonl", "dev.jsonl", "test.jsonl"]
    assert _digest(tmp_path / "c2", names) == _digest(candidates, names)


def test_rerank_killed_resumes_to_the_same_evidence(tmp_path, candidates, tiny_opt, capsys):
    def argv(out, cache):
        return ["rerank", "--candidates", str(candidates), "--out", str(tmp_path / out), "--lm", str(tiny_opt),
                "--cache-dir", str(tmp_path / cache), "--top-d", "3", "--num-demos", "2", "--chunk-size", "8",
                "--no-show-progress"]
    _ok(argv("ref", "cache-ref"), capsys)
    names = ["train.jsonl", "dev.jsonl", "test.jsonl", "demonstrations.json"]
    for point in ("cache.put@2", "rerank.chunk@3", "write:manifest.json"):
        out, cache = f"r-{point}", f"cache-{point}"
        _killed(argv(out, cache), point)
        assert not (tmp_path / out / "manifest.json").exists()
        if point == "cache.put@2":  # killed with the 2nd chunk's vectors on disk: its rows are not marked filled
            (done,) = (tmp_path / cache).rglob("done.npy")
            assert int(np.load(done).sum()) == 8
        _ok(argv(out, cache), capsys)
        assert _digest(tmp_path / out, names) == _digest(tmp_path / "ref", names), point


def _reader_argv(data: Path, model: Path, out: Path, save_every: int = 3) -> list[str]:
    return ["train", "--data", str(data), "--out", str(out), "--model", str(model), "--n-passages", "2",
            "--max-length", "48", "--batch-size", "4", "--max-steps", "7", "--eval-every", "0", "--save-every",
            str(save_every), "--learning-rate", "1e-3", "--no-show-progress"]


@pytest.mark.parametrize("arch", ["t5", "bert2bert"])
def test_training_killed_resumes_to_the_same_reader(tmp_path, reranked, arch, request, capsys):
    """A tiny T5 (no dropout) and a bert2bert reader with BERT's dropout, as the demo's: killed mid-checkpoint,
    between checkpoints, and at an epoch boundary (4 batches an epoch), resumed runs are byte-identical to an
    uninterrupted one (weights, training log, predictions)."""
    model = request.getfixturevalue("tiny_t5" if arch == "t5" else "tiny_bert2bert_dropout")
    _ok(_reader_argv(reranked, model, tmp_path / "ref"), capsys)
    names = ["best/model.safetensors", "train_log.jsonl", "predictions_test.jsonl"]
    ref = _digest(tmp_path / "ref", names)
    # mid-checkpoint (state saved, marker not); between checkpoints (steps logged past the last checkpoint);
    # resumed at the start of the second epoch (checkpoint at step 4)
    for point, save_every in (("train.checkpoint@2", 3), ("train.step@5", 3), ("train.step@6", 4)):
        out = tmp_path / f"t-{point}-{save_every}"
        _killed(_reader_argv(reranked, model, out, save_every), point)
        assert not (out / "manifest.json").exists()
        err = _ok(_reader_argv(reranked, model, out, save_every), capsys)
        assert "resuming from" in err
        assert _digest(out, names) == ref, point


def test_interrupted_bert2bert_training_resumes_in_process_to_the_same_reader(tmp_path, reranked,
                                                                               tiny_bert2bert_dropout, monkeypatch,
                                                                               capsys):
    """Ctrl-C (KeyboardInterrupt, exit 130) between checkpoints, then the same command in the same process."""
    import pgra.reader.train as train_mod

    _ok(_reader_argv(reranked, tiny_bert2bert_dropout, tmp_path / "ref"), capsys)
    real, hits = train_mod.fault_point, {"n": 0}

    def interrupt(name):
        real(name)
        if name == "train.step":
            hits["n"] += 1
            if hits["n"] == 5:
                raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "fault_point", interrupt)
    assert main(_reader_argv(reranked, tiny_bert2bert_dropout, tmp_path / "b")) == 130
    monkeypatch.setattr(train_mod, "fault_point", real)
    _ok(_reader_argv(reranked, tiny_bert2bert_dropout, tmp_path / "b"), capsys)
    names = ["best/model.safetensors", "train_log.jsonl", "predictions_test.jsonl"]
    assert _digest(tmp_path / "b", names) == _digest(tmp_path / "ref", names)


def test_experiment_grid_killed_resumes_to_the_same_cells(tmp_path, corpus_txt, sky_task, capsys):
    import json

    import yaml

    # two tasks (the kNN vote is seed-independent: one cell per task whatever the seeds)
    other = tmp_path / "sky2.yaml"
    other.write_text(yaml.safe_dump({**yaml.safe_load(sky_task.read_text()), "name": "sky2"}))

    def argv(name):
        cfg = {"out": str(tmp_path / name), "tasks": [str(sky_task), str(other)], "methods": ["knn_vote"],
               "seeds": [1, 2], "index": {"corpus": str(corpus_txt), "out": str(tmp_path / f"{name}-index"),
                                          "retriever": "bm25"},
               "retrieve": {"k": 8}, "knn_vote": {"k": 3}, "show_progress": False}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return ["experiment", "--config", str(path)]

    _ok(argv("ref"), capsys)
    cells = [f"{t}/knn_vote/seed-1/{f}" for t in ("sky", "sky2") for f in ("predictions_dev.jsonl",
                                                                             "predictions_test.jsonl")]
    ref_results = json.loads((tmp_path / "ref" / "sky2" / "knn_vote" / "seed-1" / "cell.json").read_text())["results"]
    # mid-write of the candidates stage, and of the second cell's completion mark
    for point in ("write:dev.jsonl", "write:cell.json@2"):
        name = "g-" + point.replace(":", "-").replace("@", "-")
        _killed(argv(name), point)
        assert not (tmp_path / name / "results.json").exists()
        _ok(argv(name), capsys)
        assert _digest(tmp_path / name, cells) == _digest(tmp_path / "ref", cells), point
        folder = tmp_path / name / "sky2" / "knn_vote" / "seed-1"
        cell = json.loads((folder / "cell.json").read_text())
        assert cell["results"] == ref_results, point
        # each predictions file's checksum is recorded for the report
        names = [f"predictions_{s}.jsonl" for s in ("dev", "test")]
        assert cell["predictions_sha256"] == {n[12:-6]: d for n, d in _digest(folder, names).items()}, point


def test_simcse_training_killed_resumes_to_the_same_encoder(tmp_path, corpus_txt, tiny_bert, capsys):
    def argv(out):
        return ["train-simcse", "--corpus", str(corpus_txt), "--encoder", str(tiny_bert), "--out",
                str(tmp_path / out), "--batch-size", "4", "--heldout", "4", "--max-steps", "7", "--save-every", "3",
                "--learning-rate", "1e-3", "--no-show-progress"]
    _ok(argv("ref"), capsys)
    a = load_file(str(tmp_path / "ref" / "model.safetensors"))
    names = ["train_log.jsonl", "metrics.json", "simcse_head.safetensors"]
    # mid-checkpoint (state saved, marker not); between checkpoints (steps logged past the last checkpoint);
    # after training, with the encoder's files put in place but its metrics and manifest not yet
    for point in ("train.checkpoint@2", "simcse.step@5", "write:metrics.json"):
        out = "s-" + point.replace(":", "-").replace("@", "-")
        _killed(argv(out), point)
        assert not (tmp_path / out / "manifest.json").exists()
        _ok(argv(out), capsys)
        b = load_file(str(tmp_path / out / "model.safetensors"))
        assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a), point
        assert _digest(tmp_path / out, names) == _digest(tmp_path / "ref", names), point
