"""One writer per output folder: a lock file naming the process that writes it.

``pgra build-index / retrieve / rerank / train / icl / experiment / train-simcse`` and the same stage functions
called from Python (:func:`locks_output`) hold ``<out>/.pgra-lock`` (JSON: pid, host,
command, start time) while they run. A second process on the same folder (a job resubmitted on a cluster
while the first still runs) refuses, naming the folder and the other process, instead of interleaving writes.
A lock left by a process that died on this host is taken over, and so is one whose pid now belongs to another
process (a reused pid: the lock records its writer's start time, and a process that started after the lock was
taken cannot be its writer); a lock from another host is never guessed dead (delete the file once that job is
gone).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import InputError, PgraError

LOCK_FILE = ".pgra-lock"


class OutputBusyError(PgraError):
    """Another live process is writing the output folder."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _start_token(pid: int) -> str | None:
    """An identity of process ``pid``'s start (Linux: its start time in clock ticks since boot, field 22 of
    ``/proc/<pid>/stat``; elsewhere psutil's create time when installed); None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return "ticks:" + data[data.rindex(b")") + 2:].split()[19].decode()
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return f"ctime:{psutil.Process(pid).create_time():.3f}"
    except Exception:  # psutil missing, no such process, access denied
        return None


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None when unknown."""
    token = _start_token(pid)
    if token is None:
        return None
    kind, _, value = token.partition(":")
    if kind == "ctime":
        return float(value)
    try:
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + int(value) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration):
        return None


def _reused_pid(info: dict) -> bool:
    """Whether the live process with the lock's pid is not the one that took the lock: its start differs from
    the one recorded, or (a lock without one) it started after the lock was taken."""
    pid = info["pid"]
    recorded = info.get("pid_start")
    if recorded:
        now = _start_token(pid)
        return now is not None and now.split(":")[0] == str(recorded).split(":")[0] and now != recorded
    started, taken = _start_time(pid), info.get("started")
    return started is not None and isinstance(taken, (int, float)) and started > taken + 2


def _describe(info: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    return (f"process {info.get('pid')} on host {info.get('host')} (`{info.get('command', '?')}`, started "
            f"{started})")


def _read(path: Path) -> dict | None:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # cut off while being written: its writer died at once
    return info if isinstance(info, dict) else {}


@contextlib.contextmanager
def output_lock(directory: str | Path, command: str = "", field: str = "out") -> Iterator[Path]:
    """Hold ``directory``'s lock for the block (creating the folder); raise :class:`OutputBusyError` if a live
    process holds it. Re-entrant within one process. ``field``: the option naming the folder (for errors)."""
    directory = Path(directory)
    if (directory.exists() or directory.is_symlink()) and not directory.is_dir():
        from .artifacts import describe_path

        raise InputError(f"{directory} is {describe_path(directory)}, not a folder: choose another output folder",
                         field=field)
    created = [p for p in (directory, *directory.parents) if not p.exists()]  # removed again if left empty
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command or " ".join(sys.argv[:3]),
          "started": time.time(), "pid_start": _start_token(os.getpid())}
    held = False  # this process already holds it (a stage run inside another)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            info = _read(path)
            if info is None:
                continue  # released meanwhile: try again
            if info.get("pid") == me["pid"] and info.get("host") == me["host"] and \
                    info.get("pid_start", me["pid_start"]) == me["pid_start"]:
                held = True  # (yielded outside this handler: an error of the block is not chained to it)
                break
            same_host = info.get("host") == me["host"]
            gone = same_host and isinstance(info.get("pid"), int) and \
                (not _alive(info["pid"]) or _reused_pid(info))
            if info and not gone:
                hint = "wait for it to finish" if same_host else \
                    f"wait for it to finish, or delete {path} if that job is gone"
                raise OutputBusyError(f"{directory} is being written by {_describe(info)}; {hint}, or choose "
                                      "another output folder") from None
            why = "which is no longer running" if not info or not _alive(info["pid"]) else \
                f"which is no longer running (pid {info['pid']} now belongs to another process)"
            print(f"{directory}: taking over the lock of {_describe(info) if info else 'a dead process'}, {why}",
                  file=sys.stderr)
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        try:
            yield path
        finally:
            if (_read(path) or {}).get("pid") == me["pid"]:
                path.unlink(missing_ok=True)
            for folder in created:  # a run refused before writing anything leaves no empty folders behind
                try:
                    folder.rmdir()
                except OSError:
                    break
        return
    if held:
        yield path
        return
    raise OutputBusyError(f"{directory}: could not take the lock {path} (other processes keep taking it)")


def is_main_launch() -> bool:
    """True unless this is a non-zero rank of torchrun / accelerate launch (only rank 0 holds the lock)."""
    return os.environ.get("RANK", "0") == "0"


def locks_output(field: str = "out", kind: str | None = None) -> Callable:
    """Decorate a stage function ``fn(cfg, ...)`` to hold the lock of ``cfg.<field>`` while it runs (rank 0
    only; re-entrant, so the CLI's lock and the function's are one). ``kind``: the manifest kind the stage
    writes; a folder holding another artifact (or a ``manifest.json`` pgra did not write) is refused before
    anything in it is touched (:func:`pgra.artifacts.claim_output`), and so is a non-empty folder pgra did not make
    (:func:`pgra.ownership.claimed`)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            cfg = args[0] if args else kwargs.get("cfg")
            out = getattr(cfg, field, "")
            if not out or not is_main_launch():
                return fn(*args, **kwargs)
            if dataclasses.is_dataclass(cfg):  # options, paths and overlaps, before the lock creates anything
                from .config import check_config

                check_config(cfg)
            with output_lock(out, f"{fn.__module__}.{fn.__name__}", field=field):
                from .ownership import claimed

                if kind:
                    from .artifacts import claim_output

                    claim_output(out, kind, field)
                with claimed(out, kind or "output", field, cfg):  # pgra writes only into a folder it made
                    return fn(*args, **kwargs)
        return run
    return wrap
