"""Tracking that has run: TensorBoard event files and offline wandb runs are written and read back."""

import json
import struct
import sys
import time
from pathlib import Path

import pytest

from pgra.core.errors import InputError
from pgra.reader.train import TrainConfig, train
from pgra.runtime.tracking import open_tracker


def _wandb_records(run_dir: Path) -> list:
    """The Records of an offline wandb run's .wandb log (leveldb-style blocks of Record protos)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("run-*.wandb")
    data, pos, block, buf, records = path.read_bytes(), 7, 32768, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        buf = chunk if kind in (1, 2) else buf + chunk  # full / first, or middle / last
        if kind in (1, 4):
            records.append(wandb_internal_pb2.Record.FromString(buf))
    return records


def _wandb_history(run_dir: Path, timeout: float = 60.0) -> list[dict]:
    """History rows of a finished offline wandb run.

    wandb's service writes the run's log after ``finish()`` has returned (seen: the 7-byte header alone in about
    one run in six, the whole log milliseconds later), so this waits for the log's closing exit record.
    """
    deadline = time.monotonic() + timeout
    while not any(r.WhichOneof("record_type") == "exit" for r in _wandb_records(run_dir)) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    return [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in _wandb_records(run_dir) if r.WhichOneof("record_type") == "history"]


def _tensorboard_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _train(reranked, out, tiny_t5, log_with):
    cfg = TrainConfig(data=str(reranked), out=str(out), model=str(tiny_t5), n_passages=2, max_length=32,
                      batch_size=4, max_steps=4, eval_every=2, eval_batch_size=8, learning_rate=1e-3,
                      log_with=log_with, show_progress=False)
    train(cfg)
    return [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]


def test_reader_training_logs_to_tensorboard(reranked, tmp_path, tiny_t5):
    log = _train(reranked, tmp_path / "run", tiny_t5, "tensorboard")
    scalars = _tensorboard_scalars(next((tmp_path / "run").rglob("events.out.tfevents.*")).parent)
    assert [s for s, _ in scalars["loss"]] == [1, 2, 3, 4]
    for (_, got), want in zip(scalars["loss"], log, strict=True):
        assert got == pytest.approx(want["loss"], abs=1e-6)  # numerics: the log's loss stored as an fp32 event
    assert [s for s, _ in scalars["dev_accuracy"]] == [2, 4]


def test_reader_training_logs_to_offline_wandb(reranked, tmp_path, tiny_t5, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    log = _train(reranked, tmp_path / "run", tiny_t5, "wandb")
    (run_dir,) = (tmp_path / "run" / "wandb").glob("offline-run-*")
    rows = [r for r in _wandb_history(run_dir) if "loss" in r]
    assert [r["_step"] for r in rows] == [1, 2, 3, 4]
    for got, want in zip(rows, log, strict=True):
        assert got["loss"] == pytest.approx(want["loss"], abs=1e-6)  # numerics: one number written twice
    assert [r["dev_accuracy"] for r in rows if "dev_accuracy" in r] == \
        [pytest.approx(w["dev_accuracy"]) for w in log if "dev_accuracy" in w]  # numerics: one number twice
    assert not (tmp_path / "wandb").exists()


@pytest.mark.parametrize("kind", ["tensorboard", "wandb"])
def test_open_tracker_writes_what_it_is_given(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert open_tracker("none", tmp_path, "x", {}) is None
    for name in ("cell-a", "cell-b"):  # one run per cell, several in one process
        with open_tracker(kind, tmp_path / name, name, {"lr": 0.1, "skipped": [1, 2]}) as tracker:
            tracker.log({"test/accuracy": 0.25}, step=3)
            tracker.log({"test/accuracy": 0.75}, step=5)
        if kind == "tensorboard":
            got = _tensorboard_scalars(tracker.location)["test/accuracy"]
            assert got == [(3, 0.25), (5, 0.75)]
        else:
            rows = _wandb_history(tracker.location)
            assert [(r["_step"], r["test/accuracy"]) for r in rows] == [(3, 0.25), (5, 0.75)]


def test_missing_tracker_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(InputError, match=r"pip install wandb \(pgra's tracking extra\)"):
        open_tracker("wandb", tmp_path, "x", {})


def test_wandb_tracker_gets_its_own_run_while_another_is_active(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "other").mkdir()
    other = wandb.init(project="pgra", name="other", dir=str(tmp_path / "other"), mode="offline",
                       settings=wandb.Settings(silent=True, console="off"))
    try:  # e.g. a reader training that raised before end_training: wandb's default would return `other`
        with open_tracker("wandb", tmp_path / "cell", "cell", {}) as tracker:
            assert tracker._run is not other and tracker._run.name == "cell"
            tracker.log({"test/accuracy": 0.5}, step=1)
        assert tracker.location.parent == tmp_path / "cell" / "wandb"
        assert [(r["_step"], r["test/accuracy"]) for r in _wandb_history(tracker.location)] == [(1, 0.5)]
        other.log({"x": 1.0}, step=7)  # still open: the tracker left it alone
    finally:
        other.finish()
    (other_dir,) = (tmp_path / "other" / "wandb").glob("offline-run-*")
    assert [(r["_step"], r["x"]) for r in _wandb_history(other_dir)] == [(7, 1.0)]
