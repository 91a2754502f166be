"""One writer per output folder: a second process refuses, naming the folder and the other process; a stale
lock of a dead process on this host is taken over."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from pgra.cli import main
from pgra.lock import LOCK_FILE, OutputBusyError


@contextlib.contextmanager
def _held(out, command):
    """Another live process holding ``out``'s lock for the block (killed after it, leaving a stale lock)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from pgra.lock import output_lock\n"
         f"with output_lock({str(out)!r}, {command!r}):\n print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _build(corpus_txt, out):
    return main(["build-index", "--corpus", str(corpus_txt), "--out", str(out), "--retriever", "bm25",
                 "--no-show-progress"])


def test_a_second_writer_is_refused_while_the_first_runs(tmp_path, corpus_txt, capsys):
    out = tmp_path / "idx"
    with _held(out, "pgra build-index") as holder:
        assert _build(corpus_txt, out) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert str(out) in lines[0] and f"process {holder.pid} on host {socket.gethostname()}" in lines[0]
        assert "pgra build-index" in lines[0]
        assert not (out / "manifest.json").exists()
    # the holder died without releasing: its lock is stale and taken over
    assert (out / LOCK_FILE).exists()
    assert _build(corpus_txt, out) == 0
    assert "taking over the lock" in capsys.readouterr().err
    assert (out / "manifest.json").exists() and not (out / LOCK_FILE).exists()


def test_a_lock_from_another_host_is_not_guessed_dead(tmp_path, corpus_txt, capsys):
    out = tmp_path / "idx"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": 1, "host": "node-17", "command": "pgra build-index",
                                             "started": time.time()}))
    assert _build(corpus_txt, out) == 2
    err = capsys.readouterr().err
    assert "process 1 on host node-17" in err and f"delete {out / LOCK_FILE}" in err
    (out / LOCK_FILE).unlink()
    assert _build(corpus_txt, out) == 0


def test_a_refused_run_leaves_no_folder(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["build-index", "--corpus", str(tmp_path / "missing.txt"), "--out", str(out), "--retriever",
                 "bm25"]) == 2
    assert not out.exists()


def _stage_functions():
    from pgra.experiment import ExperimentConfig, run_experiment
    from pgra.icl.config import ICLConfig
    from pgra.icl.run import run_icl
    from pgra.reader.config import TrainConfig
    from pgra.reader.train import train
    from pgra.rerank.config import RerankConfig
    from pgra.rerank.reranker import rerank
    from pgra.retrieval.index import IndexConfig, build_index
    from pgra.retrieval.retrieve import RetrieveConfig, retrieve
    from pgra.simcse.config import SimCSEConfig
    from pgra.simcse.train import train_simcse

    return [(build_index, IndexConfig), (retrieve, RetrieveConfig), (rerank, RerankConfig), (train, TrainConfig),
            (run_icl, ICLConfig), (run_experiment, ExperimentConfig), (train_simcse, SimCSEConfig)]


def test_every_stage_function_refuses_a_folder_a_live_process_writes(tmp_path, corpus_txt):
    """Called from Python, each stage function holds its output's lock: it refuses before reading its (here
    empty) config, which would otherwise fail on the first missing input, and writes nothing."""
    from pgra.retrieval.index import IndexConfig, build_index

    out = tmp_path / "busy"
    with _held(out, "job C") as holder:
        for fn, cfg in _stage_functions():
            with pytest.raises(OutputBusyError, match=f"{out} is being written by process {holder.pid} .*job C"):
                fn(cfg(out=str(out)))
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    # the holder died: its stale lock is taken over, and a finished stage leaves no lock behind
    build_index(IndexConfig(corpus=str(corpus_txt), out=str(out), retriever="bm25", show_progress=False))
    assert (out / "manifest.json").exists() and not (out / LOCK_FILE).exists()


def _live_stranger():
    """A live process that never took any lock (as when a dead writer's pid is given to a new process)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.mark.parametrize("recorded", ["start time", "no start time"])
def test_a_lock_whose_pid_now_belongs_to_another_process_is_taken_over(recorded, tmp_path, corpus_txt, capsys):
    from pgra.lock import _start_token

    if _start_token(os.getpid()) is None:
        pytest.skip("no way to read a process's start time here (no /proc, no psutil)")
    out = tmp_path / "idx"
    out.mkdir()
    stranger = _live_stranger()
    try:
        info = {"pid": stranger.pid, "host": socket.gethostname(), "command": "pgra build-index",
                "started": time.time() - 3600}  # taken an hour ago by a process that has since died
        if recorded == "start time":
            info["pid_start"] = "ticks:1"  # the dead writer's start; the stranger started later
        (out / LOCK_FILE).write_text(json.dumps(info))
        assert _build(corpus_txt, out) == 0
        err = capsys.readouterr().err
        assert "taking over the lock" in err and f"pid {stranger.pid} now belongs to another process" in err
    finally:
        stranger.kill()
        stranger.wait()
    assert (out / "manifest.json").exists() and not (out / LOCK_FILE).exists()


def test_a_lock_records_its_writers_start_and_a_live_writer_keeps_it(tmp_path, corpus_txt, capsys):
    from pgra.lock import _start_token

    out = tmp_path / "idx"
    with _held(out, "pgra build-index") as holder:
        info = json.loads((out / LOCK_FILE).read_text())
        assert info["pid"] == holder.pid and info["pid_start"] == _start_token(holder.pid)
        assert _build(corpus_txt, out) == 2  # its own start time matches: alive and busy
        assert "is being written by" in capsys.readouterr().err
