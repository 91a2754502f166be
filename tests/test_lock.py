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
from pgra.storage.lock import LOCK_FILE, OutputBusyError


@contextlib.contextmanager
def _held(out, command):
    """Another live process holding ``out``'s lock for the block (killed after it, leaving a stale lock)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from pgra.storage.lock import output_lock\n"
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
    from pgra.icl.config import ICLConfig
    from pgra.icl.run import run_icl
    from pgra.reader.config import TrainConfig
    from pgra.reader.train import train
    from pgra.rerank.config import RerankConfig
    from pgra.rerank.stages import rerank
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.index import IndexConfig, build_index
    from pgra.retrieval.retrieve import RetrieveConfig
    from pgra.simcse.config import SimCSEConfig
    from pgra.simcse.train import train_simcse

    return [(build_index, IndexConfig), (retrieve, RetrieveConfig), (rerank, RerankConfig), (train, TrainConfig),
            (run_icl, ICLConfig), (train_simcse, SimCSEConfig)]  # (run_experiment: jobs share a grid, claims)


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
    from pgra.storage.lock import _start_token

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
    from pgra.storage.lock import _start_token

    out = tmp_path / "idx"
    with _held(out, "pgra build-index") as holder:
        info = json.loads((out / LOCK_FILE).read_text())
        assert info["pid"] == holder.pid and info["pid_start"] == _start_token(holder.pid)
        assert _build(corpus_txt, out) == 2  # its own start time matches: alive and busy
        assert "is being written by" in capsys.readouterr().err


def _quick_settle(monkeypatch):
    monkeypatch.setattr("pgra.storage.lock.SETTLE_S", 0.1, raising=False)  # (raising=False: runs against older lock.py)


@pytest.mark.parametrize("content", ["", '{"pid": 12'])
def test_a_fresh_empty_or_cut_off_lock_is_not_deleted(content, tmp_path, monkeypatch):
    """An empty lock may be one another process is writing this very moment (an older pgra creates it, then
    writes it): while it is fresh it is kept and the run refused, naming it."""
    from pgra.storage.lock import output_lock

    _quick_settle(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text(content)
    refused = pytest.raises(OutputBusyError, match=f"its lock {out / LOCK_FILE} is (empty|unreadable)")
    with refused, output_lock(out, "job B"):
        pass
    assert (out / LOCK_FILE).read_text() == content


def test_an_old_empty_lock_is_taken_over(tmp_path, monkeypatch, capsys):
    from pgra.storage.lock import output_lock

    _quick_settle(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text("")
    old = time.time() - 3600  # its writer died an hour ago, between creating and writing it
    os.utime(out / LOCK_FILE, (old, old))
    with output_lock(out, "job B"):
        assert json.loads((out / LOCK_FILE).read_text())["command"] == "job B"
    assert "taking over an empty lock file written 60 min ago" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def _live_lock(proc, command):
    from pgra.storage.lock import _start_token

    return {"pid": proc.pid, "host": socket.gethostname(), "command": command, "started": time.time(),
            "pid_start": _start_token(proc.pid)}


def test_an_empty_lock_written_while_waiting_is_judged_by_its_content(tmp_path, monkeypatch):
    import threading

    from pgra.storage.lock import output_lock

    monkeypatch.setattr("pgra.storage.lock.SETTLE_S", 5.0, raising=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text("")
    stranger = _live_stranger()
    try:
        writer = threading.Timer(0.2, (out / LOCK_FILE).write_text, [json.dumps(_live_lock(stranger, "job A"))])
        writer.start()
        refused = pytest.raises(OutputBusyError, match=f"is being written by process {stranger.pid} .*job A")
        with refused, output_lock(out, "job B"):
            pass
        writer.join()
    finally:
        stranger.kill()
        stranger.wait()


def test_a_takeover_leaves_alone_a_lock_a_live_process_wrote_after_the_stale_one_was_read(tmp_path, monkeypatch):
    """Two processes find the same dead process's lock; one takes it over and holds the folder before the other
    acts on what it read: the other must not delete the live lock (it refuses, naming its holder)."""
    import pgra.storage.lock as lock

    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "command": "job A",
                                             "started": time.time() - 60}))
    stranger = _live_stranger()
    live = json.dumps(_live_lock(stranger, "job C"))
    real_alive = lock._alive

    def alive(pid):  # this process has read the stale lock and is judging it: meanwhile another one takes over
        if pid == dead.pid and (out / LOCK_FILE).read_text() != live:
            (out / LOCK_FILE).unlink()
            (out / LOCK_FILE).write_text(live)
        return real_alive(pid)

    monkeypatch.setattr(lock, "_alive", alive)
    try:
        refused = pytest.raises(OutputBusyError, match=f"is being written by process {stranger.pid} .*job C")
        with refused, lock.output_lock(out, "job B"):
            pass
        assert (out / LOCK_FILE).read_text() == live
    finally:
        stranger.kill()
        stranger.wait()


def test_any_lock_file_path_can_be_held(tmp_path):
    """The lower-level lock (for locks other than an output folder's): re-entrant, refused to another process,
    removed after the block."""
    from pgra.storage.lock import hold_lock

    path = tmp_path / "cell.lock"
    with hold_lock(path, "job A"), hold_lock(path, "job A again"):
        other = subprocess.run([sys.executable, "-c", "from pgra.storage.lock import hold_lock\n"
                                f"with hold_lock({str(path)!r}, 'job B', label='cell 3'): pass"],
                               capture_output=True, text=True)
        assert other.returncode != 0
        assert f"OutputBusyError: cell 3 is being written by process {os.getpid()}" in other.stderr
        assert "job A" in other.stderr and "again" not in other.stderr
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("link", ["retried on NFS", "not supported"])
def test_the_lock_is_taken_where_link_misbehaves(link, tmp_path, monkeypatch):
    """NFS may retry a ``link`` whose first try succeeded and report that the name exists (the temp file's link
    count says it is ours); a filesystem without hard links falls back to exclusive create-then-write."""
    import errno

    import pgra.storage.lock as lock

    real_link = os.link

    def bad_link(src, dst):
        if link == "retried on NFS":
            real_link(src, dst)
            raise FileExistsError(errno.EEXIST, "File exists", str(dst))
        raise PermissionError(errno.EPERM, "Operation not permitted", str(dst))

    monkeypatch.setattr(lock.os, "link", bad_link)
    out = tmp_path / "out"
    with lock.output_lock(out, "job A"):
        assert json.loads((out / LOCK_FILE).read_text())["command"] == "job A"
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    assert not out.exists()


# ----- lock files written or edited by hand (issue 53): checked in one place, never a crash -----
_ME = socket.gethostname()
INVALID_LOCKS = [  # (content, the field named)
    (json.dumps({"pid": 10**30, "host": _ME, "command": "x", "started": 1.0}), "field 'pid'"),  # was OverflowError
    (json.dumps({"pid": 0, "host": _ME, "started": 1.0}), "field 'pid'"),  # a process group, never "alive"
    (json.dumps({"pid": -1, "host": _ME, "started": 1.0}), "field 'pid'"),
    (json.dumps({"pid": 1.5, "host": _ME}), "field 'pid'"),
    (json.dumps({"pid": 4242, "host": "node-17", "started": "yesterday"}), "field 'started'"),  # was TypeError
    ('{"pid": 4242, "host": "node-17", "started": Infinity}', "field 'started'"),  # was OverflowError
    (json.dumps({"pid": 4242, "host": "node-17", "started": 1e300}), "field 'started'"),
    (json.dumps({"pid": 4242, "host": ["node-17"]}), "field 'host'"),
    (json.dumps({"pid": 4242, "host": "node-17", "command": {"a": 1}}), "field 'command'"),
    (json.dumps({"pid": 4242, "host": "node-17", "stale_after": -5}), "field 'stale_after'"),
    ("[" * 3000, "not JSON"),  # was RecursionError
    ('{"pid": 1, "host": "h", "pad": "' + "x" * (2 << 20) + '"}', "larger than"),
]


@pytest.mark.parametrize(("content", "named"), INVALID_LOCKS, ids=[f"{i}-{n.split()[-1]}" for i, (_, n) in
                                                                  enumerate(INVALID_LOCKS)])
def test_an_invalid_lock_is_refused_naming_its_field_then_taken_over(content, named, tmp_path, monkeypatch, capsys):
    """A fresh invalid lock: OutputBusyError naming the file and the field, telling to delete it (nothing changed);
    once older than GRACE_S it is taken over, saying why."""
    from pgra.storage.lock import output_lock

    _quick_settle(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_text(content)
    with pytest.raises(OutputBusyError) as refused, output_lock(out, "job B"):
        pass
    assert str(out / LOCK_FILE) in str(refused.value) and named in str(refused.value)
    assert "delete it if no process writes there" in str(refused.value)
    assert (out / LOCK_FILE).read_text() == content
    old = time.time() - 3600
    os.utime(out / LOCK_FILE, (old, old))
    with output_lock(out, "job B"):
        assert json.loads((out / LOCK_FILE).read_text())["command"] == "job B"
    assert "taking over an" in capsys.readouterr().err


def test_the_cli_names_an_invalid_lock_in_one_error_line(tmp_path, corpus_txt):

    out = tmp_path / "idx"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": 10**30, "host": _ME, "started": time.time()}))
    proc = subprocess.run([sys.executable, "-c", "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))",
                           "build-index", "--corpus", str(corpus_txt), "--out", str(out), "--retriever", "bm25"],
                          capture_output=True, text=True, timeout=300)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(out / LOCK_FILE) in lines[0] and "field 'pid'" in lines[0]


def test_validate_accepts_what_pgra_writes_and_keeps_unknown_fields():
    from pgra.storage.lock import _me, validate

    me = _me("pgra train", stale_after=600.0, extra={"settings": {"a": [1]}})
    info, problem = validate(json.dumps(me).encode())
    assert problem == "" and info == me
    assert validate(b"") == (None, "")
    assert validate(b'{"pid": 12') == (None, "not JSON")


# ----- another host's dead lock under a claim (issue 49 item 1) -----
def _forge(path, host="node-17", age=3600.0, **more):
    path.write_text(json.dumps({"pid": 4242, "host": host, "command": "pgra experiment", "started": time.time() - age,
                                **more}))
    os.utime(path, (time.time() - age, time.time() - age))


def test_under_a_claim_another_hosts_dead_output_lock_is_taken_over(tmp_path, capsys):
    """A dead job's cell: its claim and the reader's `.pgra-lock` inside the cell both from another host, their
    heartbeat long stopped. The job that takes the claim over takes the lock over too (it raised OutputBusyError)."""
    from pgra.experiment.claims import claim_path, try_claim
    from pgra.storage.lock import STALE_ENV, output_lock

    cell = tmp_path / "exp" / "sky" / "fid" / "seed-1"
    cell.mkdir(parents=True)
    _forge(claim_path(cell))
    _forge(cell / LOCK_FILE)
    claim = try_claim(cell, "sky/fid/seed-1", stale_after=60)
    assert claim is not None
    with claim, output_lock(cell, "pgra train"):
        info = json.loads((cell / LOCK_FILE).read_text())
        assert info["pid"] == os.getpid() and info["stale_after"] == 60  # it beats like the claim
    err = capsys.readouterr().err
    assert "taking over the lock of process 4242 on host node-17" in err and "heartbeat stopped" in err
    assert not (cell / LOCK_FILE).exists() and STALE_ENV not in os.environ


def test_under_a_claim_another_hosts_live_output_lock_is_kept(tmp_path, monkeypatch):
    """A lock whose heartbeat is fresh is a live job's, claim or not; outside a claim another host's lock is never
    guessed dead (a command run by hand)."""
    import pgra.storage.lock as lock
    from pgra.experiment.claims import try_claim
    from pgra.storage.lock import output_lock

    cell = tmp_path / "exp" / "sky" / "fid" / "seed-1"
    cell.mkdir(parents=True)
    _forge(cell / LOCK_FILE, age=5)  # a command run by hand on another host: it does not beat
    monkeypatch.setattr(lock, "_wait_stale", lambda *a: pytest.fail("waited for a lock that does not beat"))
    with try_claim(cell, "cell", stale_after=60), pytest.raises(OutputBusyError, match="host node-17"), \
            output_lock(cell, "pgra train"):
        pass
    _forge(cell / LOCK_FILE, age=5, stale_after=60.0)  # a job's, beating
    waits = []
    monkeypatch.setattr(lock, "_wait_stale", lambda label, seen, stale_in: waits.append(stale_in) or
                        os.utime(cell / LOCK_FILE))  # it beats while it is waited for
    with try_claim(cell, "cell", stale_after=60), pytest.raises(OutputBusyError, match="host node-17"), \
            output_lock(cell, "pgra train"):
        pass
    assert len(waits) == 1 and 50 < waits[0] <= 55  # waited for once (issue 68 item 1), then refused
    _forge(cell / LOCK_FILE, age=3600)
    with pytest.raises(OutputBusyError, match="host node-17"), output_lock(cell, "pgra train"):
        pass


def test_a_forged_lock_recording_a_huge_timeout_is_refused_not_waited_for(tmp_path, monkeypatch):
    """A lock from another host may record any timeout (up to 1e9 s): a job under a claim waits for it no longer
    than its own timeout, so one forged lock cannot put it to sleep for decades."""
    import pgra.storage.lock as lock
    from pgra.experiment.claims import try_claim
    from pgra.storage.lock import output_lock

    cell = tmp_path / "exp" / "sky" / "fid" / "seed-1"
    cell.mkdir(parents=True)
    _forge(cell / LOCK_FILE, age=5, stale_after=1e9)
    monkeypatch.setattr(lock, "_wait_stale", lambda *a: pytest.fail("waited for a forged lock"))
    with try_claim(cell, "cell", stale_after=60), pytest.raises(OutputBusyError, match="host node-17"), \
            output_lock(cell, "pgra train"):
        pass


def test_a_lock_that_records_its_heartbeat_is_judged_by_it(tmp_path):
    """A lock records the heartbeat timeout its holder beats by; a reader judges it by the longer of its own and
    the lock's, so a reader with a shorter timeout never takes over a lock beating slower than that."""
    from pgra.experiment.claims import claim_path, is_claimed

    cell = tmp_path / "c"
    _forge(claim_path(cell), age=300, stale_after=600.0)
    assert is_claimed(cell, "c", stale_after=60)  # 300 s old, but it beats every 150 s: alive
    _forge(claim_path(cell), age=900, stale_after=600.0)
    assert not is_claimed(cell, "c", stale_after=60)
    assert not is_claimed(cell, "c", stale_after=None)  # recorded: judged by it even without the caller's


# ----- a waiting job's takeover (issue 68 item 1) -----
DEAD_JOB = """
import socket, sys, time
socket.gethostname = lambda: "node-17"  # the dead job ran on another host
from pathlib import Path
from pgra.experiment.claims import try_claim
from pgra.storage.lock import output_lock

cell = Path(sys.argv[1])
with try_claim(cell, "cell", stale_after=float(sys.argv[2])):
    with output_lock(cell, "pgra train"):  # a cell's reader, beating on a thread of its own
        print("ready", flush=True)
        time.sleep(600)
"""


def test_a_job_that_takes_over_a_claim_takes_over_its_output_lock_beaten_later(tmp_path, capsys):
    """A job on another host dies holding a cell's claim and its output lock, the lock's last heartbeat later than
    the claim's (they beat on separate threads). The job polling for the claim takes it once it is stale_after old,
    when the lock is still younger than that: it waits for the lock to go stale and takes it over (it failed the
    cell with OutputBusyError)."""
    from pgra.experiment.claims import claim_path, try_claim
    from pgra.storage.lock import output_lock

    stale = 2.0
    cell = tmp_path / "exp" / "t" / "fid" / "seed-1"
    job = subprocess.Popen([sys.executable, "-c", DEAD_JOB, str(cell), str(stale)], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert job.stdout.readline().strip() == "ready"
    finally:
        job.kill()
        job.wait()
    now = time.time()
    os.utime(claim_path(cell), (now - 1.0, now - 1.0))  # the claim beat last a second before the lock did
    os.utime(cell / LOCK_FILE, (now, now))
    deadline = time.monotonic() + 30
    while (claim := try_claim(cell, "cell", stale_after=stale)) is None:  # a job polling for the claim
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with claim, output_lock(cell, "pgra train"):
        assert json.loads((cell / LOCK_FILE).read_text())["pid"] == os.getpid()
    err = capsys.readouterr().err
    assert "waiting" in err and "taking over the lock of process" in err and "host node-17" in err


# ----- one clock: the file system's (issue 68 item 5, issue 67 H10) -----
@pytest.mark.parametrize("skew", [3600.0, -3600.0])
def test_a_skewed_local_clock_judges_locks_on_the_file_system_s_clock(skew, tmp_path, monkeypatch):
    """This host's clock an hour ahead took another host's live lock for dead (two writers in one cell); an hour
    behind, it never took a dead one over. Ages are read against a probe touched in the lock's folder."""
    from pgra.storage.lock import holder

    live, dead = tmp_path / "live", tmp_path / "dead"
    _forge(live, age=5)
    _forge(dead, age=120)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew)
    assert holder(live, stale_after=60)["host"] == "node-17"
    assert holder(dead, stale_after=60) is None


def test_a_claim_from_the_future_is_taken_over_and_said(tmp_path, capsys):
    """A forged claim touched a year ahead was never stale (its age negative), so its cell never ran and the run
    exited 0. No heartbeat sets a time in the future: it is taken over, said in one line."""
    from pgra.experiment.claims import claim_path, is_claimed, try_claim

    cell = tmp_path / "exp" / "t" / "fid" / "seed-1"
    cell.parent.mkdir(parents=True)
    _forge(claim_path(cell), age=-365 * 86400.0, stale_after=600.0)
    assert not is_claimed(cell, "cell", stale_after=600)
    claim = try_claim(cell, "cell", stale_after=600)
    assert claim is not None
    claim.close()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "taking over the lock of process 4242 on host node-17" in err[0]
    assert "in the future of the file system's clock" in err[0]
    _forge(claim_path(cell), age=-30.0, stale_after=600.0)  # a heartbeat a little ahead: a live job's
    assert is_claimed(cell, "cell", stale_after=600)


@pytest.mark.parametrize("content", [b"", b"{not json"])
def test_an_empty_or_unreadable_lock_from_the_future_is_taken_over(content, tmp_path, monkeypatch, capsys):
    from pgra.storage.lock import output_lock

    _quick_settle(monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_FILE).write_bytes(content)
    then = time.time() + 86400
    os.utime(out / LOCK_FILE, (then, then))
    with output_lock(out, "pgra train"):
        pass
    assert "in the future" in capsys.readouterr().err
