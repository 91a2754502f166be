"""One writer per output folder: a second process refuses, naming the folder and the other process; a stale
lock of a dead process on this host is taken over."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

from pgra.cli import main
from pgra.lock import LOCK_FILE


def _build(corpus_txt, out):
    return main(["build-index", "--corpus", str(corpus_txt), "--out", str(out), "--retriever", "bm25",
                 "--no-show-progress"])


def test_a_second_writer_is_refused_while_the_first_runs(tmp_path, corpus_txt, capsys):
    out = tmp_path / "idx"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pgra.lock import output_lock\n"
         f"with output_lock({str(out)!r}, 'pgra build-index'):\n print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _build(corpus_txt, out) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert str(out) in lines[0] and f"process {holder.pid} on host {socket.gethostname()}" in lines[0]
        assert "pgra build-index" in lines[0]
        assert not (out / "manifest.json").exists()
    finally:
        holder.kill()
        holder.wait()
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
