"""One writer per folder under contention: 8 processes released together by a barrier race for one folder's
lock, 50 times over, with no lock present and with a dead process's lock present. Whoever takes the lock keeps
it until every other process has tried, so exactly one must win each round, and the entry/exit log (one
O_APPEND write per line) must never show two holders at once. Half the workers start up to 1 ms late, so that
some read the lock while others are between reading it and acting on it (a takeover that removes whichever lock
is there by then fails here most runs; the exact interleaving is tested in test_lock.py).

The race runs in a driver subprocess that imports only ``pgra.storage.lock`` (no torch) and forks its workers, so the
test's own process (threads of whatever earlier tests loaded) is never forked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKERS, TRIALS = 8, 50

DRIVER = textwrap.dedent('''
    import json, multiprocessing as mp, os, random, sys, time
    from pgra.storage.lock import LOCK_FILE, OutputBusyError, output_lock

    folder, log, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    workers, trials = int(sys.argv[4]), int(sys.argv[5])
    TIMEOUT = 60
    JITTER = 0.001  # seconds

    def note(line):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\\n").encode())
        finally:
            os.close(fd)

    def worker(i, start, tried, done):
        sys.stderr = open(os.devnull, "w")  # the takeover notices
        for t in range(trials):
            start.wait(TIMEOUT)
            if i % 2:  # half arrive a little later: while the first ones are between reading and acting
                time.sleep(random.random() * JITTER)
            try:
                with output_lock(folder, f"worker {i}"):
                    note(f"{t} enter {i}")
                    tried.wait(TIMEOUT)  # held until every other worker has tried
                    note(f"{t} exit {i}")
            except OutputBusyError:
                note(f"{t} refused {i}")
                tried.wait(TIMEOUT)
            except Exception as e:
                note(f"{t} error {i} {type(e).__name__}: {e}".replace("\\n", " "))
                tried.wait(TIMEOUT)
            done.wait(TIMEOUT)

    def dead_pid():
        p = mp.get_context("fork").Process(target=lambda: None)
        p.start()
        p.join()
        return p.pid

    ctx = mp.get_context("fork")
    start, tried, done = ctx.Barrier(workers + 1), ctx.Barrier(workers), ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=worker, args=(i, start, tried, done)) for i in range(workers)]
    for p in procs:
        p.start()
    os.makedirs(folder, exist_ok=True)
    dead = dead_pid()
    for t in range(trials):
        if scenario == "dead":
            while True:  # a pid no process has now
                try:
                    os.kill(dead, 0)
                except ProcessLookupError:
                    break
                dead = dead_pid()
            tmp = os.path.join(folder, "stale.tmp")
            with open(tmp, "w") as f:
                json.dump({"pid": dead, "host": os.uname().nodename, "command": "dead job",
                           "started": time.time() - 60}, f)
            os.replace(tmp, os.path.join(folder, LOCK_FILE))
        start.wait(TIMEOUT)
        done.wait(TIMEOUT)
        left = sorted(os.listdir(folder))
        if left:
            note(f"{t} left {left}")
    for p in procs:
        p.join(TIMEOUT)
    print("ok", [p.exitcode for p in procs])
''')


def _race(tmp_path: Path, scenario: str) -> list[str]:
    """Run the race; the log's lines (``<trial> enter|exit|refused|error|left ...``)."""
    folder, log = tmp_path / "out", tmp_path / "log.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(folder), str(log), scenario, str(WORKERS),
                           str(TRIALS)], capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == f"ok {[0] * WORKERS}", proc.stderr[-3000:]
    return log.read_text().splitlines()


def _check(lines: list[str]) -> None:
    errors = [x for x in lines if x.split()[1] in ("error", "left")]
    assert not errors, errors[:5]
    overlaps, holders, winners = [], set(), {t: [] for t in range(TRIALS)}
    for line in lines:
        t, what, who = line.split()[:3]
        if what == "enter":
            if holders:
                overlaps.append(f"trial {t}: worker {who} entered while {sorted(holders)} held the lock")
            holders.add(who)
            winners[int(t)].append(who)
        elif what == "exit":
            holders.discard(who)
    wrong = {t: w for t, w in winners.items() if len(w) != 1}
    assert not overlaps and not wrong, (f"{len(overlaps)} overlaps, e.g. {overlaps[:3]}; "
                                        f"{len(wrong)} of {TRIALS} trials without exactly one winner: "
                                        f"{dict(list(wrong.items())[:5])}")
    refused = sum(line.split()[1] == "refused" for line in lines)
    assert refused == TRIALS * (WORKERS - 1)


@pytest.mark.parametrize("scenario", ["no lock", "dead"])
def test_exactly_one_of_many_processes_started_together_takes_the_lock(scenario, tmp_path):
    _check(_race(tmp_path, scenario))
