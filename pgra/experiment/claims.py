"""Claims: how the jobs that share one experiment folder split its work.

A job (a ``pgra experiment`` process, a rank of a cell-parallel launch, a Slurm array task) runs a stage or a
cell only while it holds that item's claim: the lock file ``.<name>.claim`` beside the item's folder
(:func:`pgra.lock.hold_lock`: created whole and atomically, naming host, pid and Slurm job). Another job skips
what a live job holds and comes back to it later; a claim whose holder is dead is taken over (same host: its pid
is gone; another host: its heartbeat, the lock's mtime touched every ``stale_after / 4`` s, is older than
``stale_after``), and the cell's own resume logic continues it from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

from ..lock import OutputBusyError, hold_lock, job_id

CLAIM_SUFFIX = ".claim"
WORKER_ENV = "PGRA_WORKER"  # which worker of a launch this process is (recorded in the cells it runs)
CHILD_MODULE = "pgra.experiment.child"  # what a grid's worker and cell processes run (python -m)


def claim_path(target: Path) -> Path:
    """The claim of the folder ``target``: ``<parent>/.<name>.claim``."""
    return target.parent / f".{target.name}{CLAIM_SUFFIX}"


def try_claim(target: Path, label: str, stale_after: float | None) -> contextlib.ExitStack | None:
    """Claim ``target`` (a stage or cell folder, which need not exist): an open stack holding the claim (close it
    to release), or None when a live job holds it."""
    path = claim_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(hold_lock(path, "pgra experiment", label=f"{label} (claim {path})",
                                      stale_after=stale_after))
    except OutputBusyError:
        return None
    return stack


def is_claimed(target: Path, label: str, stale_after: float | None) -> bool:
    """Whether a live job holds ``target``'s claim (a dead holder's claim is taken over and released)."""
    stack = try_claim(target, label, stale_after)
    if stack is None:
        return True
    stack.close()
    return False


def worker_identity() -> dict[str, Any]:
    """Who runs this process: host, pid, Slurm job (when there is one) and worker name (when launched as one)."""
    me: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    if job_id():
        me["job"] = job_id()
    if os.environ.get(WORKER_ENV):
        me["worker"] = os.environ[WORKER_ENV]
    return me


__all__ = ["CLAIM_SUFFIX", "WORKER_ENV", "claim_path", "is_claimed", "try_claim", "worker_identity"]
