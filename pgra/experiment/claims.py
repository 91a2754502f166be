"""Claims: how the jobs that share one experiment folder split its work (docs/beyond-one-machine.md, "Many jobs,
one experiment").

A job runs a stage or a cell only while it holds that item's claim: the lock file ``.<name>.claim`` beside the
item's folder (:func:`pgra.storage.lock.hold_lock`, with a heartbeat), taken over once its holder is dead. The
output locks taken under a claim beat with it (:func:`beating_outputs`). An invalid claim file holds only its own
item. Each job registers the settings that enter the keys (``.job-<id>.claim``: :func:`shared_folder`), and a job
whose settings differ from a live job's is refused, naming the first differing setting. :func:`is_claimed` only
looks.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core.errors import InputError, shorten
from ..storage.lock import STALE_ENV, OutputBusyError, describe_holder, hold_lock, holder, job_id

CLAIM_SUFFIX = ".claim"
WORKER_ENV = "PGRA_WORKER"  # which worker of a launch this process is (recorded in the cells it runs)
CHILD_MODULE = "pgra.experiment.child"  # what a grid's worker and cell processes run (python -m)
JOB_PREFIX = ".job-"  # a running job's registration in the experiment folder: .job-<id>.claim
_MISSING = "(not set)"


def claim_path(target: Path) -> Path:
    """The claim of the folder ``target``: ``<parent>/.<name>.claim``."""
    return target.parent / f".{target.name}{CLAIM_SUFFIX}"


def try_claim(target: Path, label: str, stale_after: float | None) -> contextlib.ExitStack | None:
    """Claim ``target`` (a stage or cell folder, which need not exist): an open stack holding the claim (close it
    to release), or None when a live job holds it. While it is held, the output locks this process (and the
    processes it starts) takes beat, and another host's dead one is taken over (:func:`beating_outputs`)."""
    path = claim_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(hold_lock(path, "pgra experiment", label=f"{label} (claim {path})",
                                      stale_after=stale_after))
    except OutputBusyError:
        return None
    if stale_after is not None:
        stack.enter_context(beating_outputs(stale_after))
    return stack


@contextlib.contextmanager
def beating_outputs(stale_after: float) -> Iterator[None]:
    """For the block (and its child processes, through :data:`pgra.storage.lock.STALE_ENV`): output locks beat,
    and another host's whose heartbeat is older than ``stale_after`` is taken over (its job died)."""
    before = os.environ.get(STALE_ENV)
    os.environ[STALE_ENV] = repr(float(stale_after))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STALE_ENV, None)
        else:
            os.environ[STALE_ENV] = before


def is_claimed(target: Path, label: str, stale_after: float | None) -> bool:
    """Whether a live job (not this process) holds ``target``'s claim, judged as :func:`try_claim` judges it but
    without taking it: jobs that finish together and look at each other's claims never see a claim taken just to
    look (a probe file may be created and removed beside it to read the file system's clock)."""
    return holder(claim_path(target), stale_after) is not None


def worker_identity() -> dict[str, Any]:
    """Who runs this process: host, pid, Slurm job (when there is one) and worker name (when launched as one)."""
    me: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    if job_id():
        me["job"] = job_id()
    if os.environ.get(WORKER_ENV):
        me["worker"] = os.environ[WORKER_ENV]
    return me


# ----- the jobs sharing a folder agree on its settings -----
def _first_difference(mine: Any, theirs: Any, prefix: str = "") -> str | None:
    """The dotted name of the first setting where ``mine`` and ``theirs`` differ (in name order); None if equal."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in sorted(set(mine) | set(theirs), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in mine or key not in theirs:
                return name
            found = _first_difference(mine[key], theirs[key], name)
            if found is not None:
                return found
        return None
    return None if mine == theirs else (prefix or "settings")


def _value(settings: Any, name: str) -> Any:
    for part in name.split("."):
        if not isinstance(settings, dict) or part not in settings:
            return _MISSING
        settings = settings[part]
    return settings


def check_settings(out: Path, settings: dict[str, Any], stale_after: float | None) -> None:
    """Refuse (an :class:`~pgra.core.errors.InputError` naming the first differing setting) when a live job registered
    in the experiment folder ``out`` runs other ``settings``; read-only but for removing dead jobs' registrations.
    A registration that holds no settings mapping is judged only as a lock (it is pgra's file edited by hand)."""
    mine = json.loads(json.dumps(settings, default=str))
    try:
        entries = sorted(Path(out).glob(f"{JOB_PREFIX}*{CLAIM_SUFFIX}"))
    except OSError:
        return
    for path in entries:
        info = holder(path, stale_after, remove_stale=True)
        if not info or not isinstance(info.get("settings"), dict):
            continue
        name = _first_difference(mine, info["settings"])
        if name is None:
            continue
        theirs, here = _value(info["settings"], name), _value(mine, name)
        raise InputError(f"{out} is being run by another job with other settings ({describe_holder(info)}; its "
                         f"registration {path}): {name} is {shorten(theirs, 100)} there, {shorten(here, 100)} here. "
                         "Jobs sharing an experiment folder must run the same settings (each would rerun the "
                         "other's cells as stale): wait for it to finish, or give this run another out",
                         field=name)


@contextlib.contextmanager
def shared_folder(out: Path, settings: dict[str, Any], stale_after: float | None) -> Iterator[None]:
    """Register this job in the experiment folder ``out`` for the block, with the ``settings`` that enter its
    stages' and cells' keys: refused first (nothing written) when a live job there runs other settings, and again
    after registering (of two jobs started together with other settings, neither runs). A folder this job cannot
    write (read-only) is only checked."""
    check_settings(out, settings, stale_after)
    path = Path(out) / f"{JOB_PREFIX}{secrets.token_hex(6)}{CLAIM_SUFFIX}"
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):  # a read-only shared folder: nothing to register
            path.parent.mkdir(parents=True, exist_ok=True)  # (as a claim makes the folder it lies in)
            stack.enter_context(hold_lock(path, "pgra experiment", label=f"{out} (job {path})",
                                          stale_after=stale_after, extra={"settings": settings}))
        check_settings(out, settings, stale_after)
        yield


__all__ = ["CLAIM_SUFFIX", "JOB_PREFIX", "WORKER_ENV", "check_settings", "claim_path", "is_claimed", "shared_folder",
           "try_claim", "worker_identity"]
