"""One writer per output folder: a lock file naming the process that writes it.

``pgra build-index / retrieve / rerank / train / icl / experiment / train-simcse`` and the same stage functions
called from Python (:func:`locks_output`) hold ``<out>/.pgra-lock`` (JSON: pid, host,
command, start time) while they run. A second process on the same folder (a job resubmitted on a cluster
while the first still runs) refuses, naming the folder and the other process, instead of interleaving writes.
A lock left by a process that died on this host is taken over; a lock from another host is never guessed
dead (delete the file once that job is gone).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import PgraError

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
def output_lock(directory: str | Path, command: str = "") -> Iterator[Path]:
    """Hold ``directory``'s lock for the block (creating the folder); raise :class:`OutputBusyError` if a live
    process holds it. Re-entrant within one process."""
    directory = Path(directory)
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command or " ".join(sys.argv[:3]),
          "started": time.time()}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            info = _read(path)
            if info is None:
                continue  # released meanwhile: try again
            if info.get("pid") == me["pid"] and info.get("host") == me["host"]:
                yield path  # this process already holds it (a stage run inside another)
                return
            same_host = info.get("host") == me["host"]
            if info and not (same_host and isinstance(info.get("pid"), int) and not _alive(info["pid"])):
                hint = "wait for it to finish" if same_host else \
                    f"wait for it to finish, or delete {path} if that job is gone"
                raise OutputBusyError(f"{directory} is being written by {_describe(info)}; {hint}, or choose "
                                      "another output folder") from None
            print(f"{directory}: taking over the lock of {_describe(info) if info else 'a dead process'}, "
                  "which is no longer running", file=sys.stderr)
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        try:
            yield path
        finally:
            if (_read(path) or {}).get("pid") == me["pid"]:
                path.unlink(missing_ok=True)
            if created:  # a run refused before writing anything leaves no empty folder behind
                with contextlib.suppress(OSError):
                    directory.rmdir()
        return
    raise OutputBusyError(f"{directory}: could not take the lock {path} (other processes keep taking it)")


def is_main_launch() -> bool:
    """True unless this is a non-zero rank of torchrun / accelerate launch (only rank 0 holds the lock)."""
    return os.environ.get("RANK", "0") == "0"


def locks_output(field: str = "out") -> Callable:
    """Decorate a stage function ``fn(cfg, ...)`` to hold the lock of ``cfg.<field>`` while it runs (rank 0
    only; re-entrant, so the CLI's lock and the function's are one)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            cfg = args[0] if args else kwargs.get("cfg")
            out = getattr(cfg, field, "")
            if not out or not is_main_launch():
                return fn(*args, **kwargs)
            with output_lock(out, f"{fn.__module__}.{fn.__name__}"):
                return fn(*args, **kwargs)
        return run
    return wrap
