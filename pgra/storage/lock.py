"""One writer per output folder: a lock file naming the process that writes it.

``pgra build-index / retrieve / rerank / train / icl / experiment / train-simcse`` and the same stage functions
called from Python (:func:`locks_output`) hold ``<out>/.pgra-lock`` (JSON: pid, host, command, start time) while
they run. A second process on the same folder (a job resubmitted on a cluster while the first still runs) refuses,
naming the folder and the other process, instead of interleaving writes. A lock left by a process that died on this
host is taken over, and so is one whose pid now belongs to another process (a reused pid: the lock records its
writer's start time, and a process that started after the lock was taken cannot be its writer); a lock from another
host without a heartbeat is never guessed dead (delete the file once that job is gone). :func:`hold_lock` does the
same for any lock file path; given ``stale_after``, it also touches the lock every ``stale_after / 4`` seconds (a
heartbeat, recorded in the lock) and takes over another host's lock whose heartbeat is older than ``stale_after``
(or than the timeout that lock records, if longer) (the claims of ``pgra experiment`` jobs sharing one folder,
:mod:`pgra.experiment.claims`). The output locks a job takes under a claim (a cell's reader, a stage) beat the same
way (:func:`beating_outputs`), so once a dead job's claim is taken over from another host, its output lock there is
too (waited for until it is stale where it beat after the claim did: they beat on separate threads). A parent
whose child process died alone releases the locks it left (:func:`release_dead_writers`). A lock records the Slurm
job (``SLURM_JOB_ID``, ``_ARRAY_TASK_ID``) when there is one. :func:`holder` judges a lock without taking it.

Every lock file is checked when read, in one place (:func:`validate`: at most :data:`MAX_LOCK_BYTES`, a JSON
object, a pid within 1 .. 2^31-1, a host and command that are strings, a finite start time ...). An empty,
unreadable or invalid one (written or edited by hand) is refused while younger than :data:`GRACE_S`, naming the
file (and the field), and taken over, saying so, once older.

How it stays one writer when many processes start at once:

- **Creation is atomic with its content.** The lock is written whole to a unique temp file beside it, then
  hard-linked to the lock's name (``link`` fails if the name exists, on local filesystems and NFS alike), so no
  reader ever sees an empty or half-written lock from this protocol. On NFS a retried ``link`` whose first try
  succeeded reports "exists": the temp file's link count (2) tells that case apart. Where hard links are not
  supported, the lock falls back to ``O_CREAT | O_EXCL`` and then writing (readers cope: next point).
- **An empty or unreadable lock is not taken for dead.** It may be a lock still being written (an older pgra,
  or the fallback above): a reader waits up to :data:`SETTLE_S` for it to be written, then refuses while it is
  younger than :data:`GRACE_S`; only an older one is stale (its writer died while writing it).
- **Ages are read on one clock.** A lock's age is its mtime (set by the file system: on NFS, by the server's
  clock, heartbeats included) against the mtime of a probe file touched in the same folder (:func:`fs_now`), never
  against this host's clock, so a host whose clock is skewed judges a lock as the others do. A lock touched
  further into the future than it would be stale in the past was not set by a heartbeat: it is taken over, saying
  so (a forged claim touched a year ahead would otherwise hold its cell forever).
- **A takeover removes exactly the stale lock it judged.** The reader keeps the lock file it read open (so its
  inode cannot be reused), judges it stale, takes an exclusive ``flock`` on that open file, and removes the name
  only if the name still refers to that same file, holding the same bytes. Every removal (takeover or release)
  happens under the ``flock`` of the file removed, and creation never replaces an existing name, so between the
  check and the removal nobody else can remove or replace it. A lock written meanwhile by a live process (after
  another process took the stale one over) is left alone: the reader tries again, finds it, and refuses. After
  removing a stale lock, the taker competes for the free name like everyone else (and says it took over only if
  it wins). On NFS ``flock`` is emulated with byte-range locks, which need the file open for writing (so it is
  opened read-write when allowed); where no ``flock`` works at all, the same check runs unguarded (a narrow race
  remains there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import math
import os
import secrets
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import InputError, PgraError, shorten

try:
    import fcntl
except ImportError:  # not POSIX: takeovers run unguarded
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".pgra-lock"
GRACE_S = 60.0  # an empty or unreadable lock file older than this was left by a writer that died writing it
SETTLE_S = 1.0  # how long a reader waits for an empty or unreadable lock file to be written before judging it
_ATTEMPTS = 10  # create / judge / take-over rounds before giving up (a round is lost only to another process)
MAX_LOCK_BYTES = 1 << 20  # a lock file larger than this is not pgra's (only its first bytes are read)
PID_MAX = 2**31 - 1  # pids are C ints; 0 and negative ones name process groups (never a lock's writer)
MAX_TIME = 32503680000.0  # 3000-01-01: a lock's start time past this is not a clock's
MAX_STALE_AFTER = 10.0**9  # seconds: a heartbeat timeout past this is not one
# the heartbeat timeout of the output locks taken inside a claim (pgra.experiment.claims), inherited by the child
# processes of a cell: with it an output lock beats like a claim, and another host's lock whose heartbeat is older
# than it is taken over (its job died: the claim guarding the folder was taken over first)
STALE_ENV = "PGRA_LOCK_STALE_AFTER_S"


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


def job_id() -> str:
    """The Slurm job of this process (``<job>`` or ``<array job>_<task>``); empty outside Slurm."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID", "")
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
    return f"{job}_{task}" if job and task else job


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# what a lock file's fields may hold: (field, required, check, what it must be); other fields are kept unread
_FIELDS: tuple[tuple[str, bool, Callable[[object], bool], str], ...] = (
    ("pid", True, lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= PID_MAX,
     f"a process id (an integer 1 .. {PID_MAX})"),
    ("host", True, lambda v: isinstance(v, str) and len(v) <= 1024, "a host name"),
    ("command", False, lambda v: isinstance(v, str), "a string"),
    ("started", False, lambda v: _number(v) and math.isfinite(v) and 0 <= v <= MAX_TIME,
     "a time (seconds since 1970, finite)"),
    ("pid_start", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("job", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("stale_after", False, lambda v: _number(v) and math.isfinite(v) and 0 < v <= MAX_STALE_AFTER,
     "a number of seconds > 0"),
)


def validate(data: bytes) -> tuple[dict | None, str]:
    """The one check of a lock file's bytes (an output lock, a claim): ``(info, "")`` for a lock pgra could have
    written, else ``(None, why)`` (``why`` empty for an empty file; else naming the field and its value)."""
    if not data.strip():
        return None, ""
    if len(data) > MAX_LOCK_BYTES:
        return None, f"larger than {MAX_LOCK_BYTES} bytes"
    try:
        info = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # (UnicodeDecodeError included; RecursionError: nested too deeply)
        return None, "not JSON"
    if not isinstance(info, dict):
        return None, "not a JSON object"
    for name, required, ok, what in _FIELDS:
        if name not in info:
            if required:
                return None, f"field '{name}' is missing"
            continue
        if not ok(info[name]):
            return None, f"field '{name}' is {shorten(info[name], 80)}, not {what}"
    return info, ""


def describe_holder(info: dict) -> str:
    """Who holds a lock, from its validated ``info``: ``process <pid> on host <host>, job ... (`command`, started
    ...)``."""
    return _describe(info)


def _describe(info: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    job = f", job {info['job']}" if info.get("job") else ""
    return (f"process {info.get('pid')} on host {info.get('host')}{job} (`{info.get('command', '?')}`, started "
            f"{started})")


def _temp_name(path: Path) -> Path:
    """A unique name beside ``path`` (``<name>.<pid>.<8 hex>.new``: pgra.storage.ownership knows it as pgra's)."""
    # not the ``.tmp`` of atomic writes: pgra.storage.ownership drops those from a folder it claims, and another job may
    # claim this folder while this file waits to be linked
    return path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")


def fs_now(folder: Path) -> float:
    """Now, on the clock of the file system holding ``folder``: the mtime of a probe file created there and touched
    as a heartbeat touches a lock (NFS sets both by the server's clock), then removed. A lock's age is judged on
    this clock, so a host whose own clock is skewed judges it as every other host does. This host's clock where
    the folder cannot be written (a read-only shared folder)."""
    probe = _temp_name(folder / LOCK_FILE)
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except OSError:
        return time.time()
    try:
        os.close(fd)
        os.utime(probe)
        return os.stat(probe).st_mtime
    except OSError:
        return time.time()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)


@dataclasses.dataclass
class _Seen:
    """A lock file as read, kept open while it is judged (so that its inode cannot be reused meanwhile)."""

    fd: int
    data: bytes  # (its first MAX_LOCK_BYTES + 1 bytes)
    info: dict | None  # None: empty, or not a lock pgra could have written (:func:`validate`)
    mtime: float  # when it was written or last beat (the file system's clock)
    path: Path
    problem: str = ""  # why ``info`` is None (empty for an empty file)

    @functools.cached_property
    def age(self) -> float:
        """Seconds since it was written or last beat, on the file system's clock (:func:`fs_now`); negative for a
        file touched into the future. Read only where a judgement needs it (a probe file is written)."""
        return fs_now(self.path.parent) - self.mtime

    def close(self) -> None:
        os.close(self.fd)


def _read_fd(fd: int, limit: int = MAX_LOCK_BYTES + 1) -> bytes:
    """The first ``limit`` bytes of the file ``fd`` (all of a lock pgra wrote)."""
    chunks, offset = [], 0
    while offset < limit and (chunk := os.pread(fd, min(1 << 16, limit - offset), offset)):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _open(path: Path, writable: bool = True) -> _Seen | None:
    """The lock file at ``path``, opened and read (``writable``: opened for writing where allowed, to remove it
    under its flock); None when there is none."""
    nonblock = getattr(os, "O_NONBLOCK", 0)  # a FIFO in its place is reported, not waited on
    try:
        try:
            if not writable:
                raise PermissionError
            fd = os.open(path, os.O_RDWR | nonblock)  # writable: NFS grants an exclusive flock only to a writer
        except PermissionError:  # another user's lock
            fd = os.open(path, os.O_RDONLY | nonblock)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = _read_fd(fd)
    except OSError:
        os.close(fd)
        raise
    info, problem = validate(data)
    return _Seen(fd, data, info, st.st_mtime, path, problem)


def _settled(path: Path) -> _Seen | None:
    """:func:`_open`, re-reading an empty or unreadable lock for up to :data:`SETTLE_S` while it is younger than
    :data:`GRACE_S` (its writer may be writing it)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        seen = _open(path)
        if seen is None or seen.info is not None or seen.age >= GRACE_S or time.monotonic() >= deadline:
            return seen
        seen.close()
        time.sleep(0.02)


def _create(path: Path, data: bytes) -> tuple[int, int] | None:
    """Create ``path`` holding ``data``, atomically: written whole to a unique temp file that is then hard-linked
    to ``path``. The new file's (device, inode); None when ``path`` exists."""
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    try:
        try:
            _write_fd(fd, data)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            if os.stat(tmp).st_nlink < 2:  # 2: NFS retried a link that had succeeded, and the retry found it
                return None
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK):
                raise
            return _create_in_place(path, data)  # no hard links on this filesystem
        st = os.stat(tmp)
        return st.st_dev, st.st_ino
    finally:
        tmp.unlink(missing_ok=True)


def _create_in_place(path: Path, data: bytes) -> tuple[int, int] | None:
    """:func:`_create` without hard links: exclusive create, then write (readers may see it empty meanwhile)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except FileExistsError:
        return None
    try:
        _write_fd(fd, data)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return st.st_dev, st.st_ino


def _flock(fd: int) -> bool:
    """Take an exclusive flock on ``fd`` (waiting: removers hold it for microseconds); False where none works."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # no locking on this filesystem (or NFS and a read-only file)
        return False
    return True


def _remove_if_unchanged(path: Path, seen: _Seen) -> bool:
    """Remove ``path`` if it still is the very file ``seen`` read, with the same bytes; False when it is gone or
    another file has its name. Every removal runs under the removed file's flock (module docstring)."""
    guarded = _flock(seen.fd)
    try:
        try:
            now = os.stat(path)
        except FileNotFoundError:
            return False
        st = os.fstat(seen.fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or _read_fd(seen.fd) != seen.data:
            return False
        os.unlink(path)
        return True
    finally:
        if guarded:
            fcntl.flock(seen.fd, fcntl.LOCK_UN)


def _busy(label: str, info: dict, path: Path, same_host: bool) -> OutputBusyError:
    hint = "wait for it to finish" if same_host else f"wait for it to finish, or delete {path} if that job is gone"
    return OutputBusyError(f"{label} is being written by {_describe(info)}; {hint}, or choose another output "
                           "folder")


class _Beating(OutputBusyError):
    """Another host's lock whose heartbeat is younger than its timeout: ``stale_in`` seconds before it is stale."""

    def __init__(self, busy: OutputBusyError, stale_in: float) -> None:
        super().__init__(str(busy))
        self.stale_in = stale_in


def _ahead(age: float) -> str:
    """Where a lock file's mtime lies ``-age`` seconds in the future (said when it is taken over)."""
    return (f"{-age:.0f} s in the future of the file system's clock (no heartbeat sets that: touched by hand or by "
            "a host whose clock is wrong; taken as foreign)")


def _heartbeat_timeout(info: dict, stale_after: float | None) -> float | None:
    """After how long without a heartbeat another host's lock ``info`` is dead: the longer of the caller's
    ``stale_after`` and the one the lock records (its holder beats every quarter of it); None: never."""
    limits = [t for t in (stale_after, info.get("stale_after")) if t is not None]
    return max(limits) if limits else None


def _judge(seen: _Seen, me: dict, path: Path, label: str, stale_after: float | None = None) -> str:
    """Why the lock ``seen`` is stale (said when taking it over); raise :class:`OutputBusyError` when its writer
    may be alive: a live process on this host, a process on another host (any, or with a heartbeat timeout, the
    caller's ``stale_after`` or the lock's own, one whose heartbeat is younger than that), or a fresh empty,
    unreadable or invalid lock (:func:`validate`; once :data:`GRACE_S` old it is stale: no pgra process writes
    one, and a lock being created is never seen half-written). Ages are on the file system's clock
    (:func:`fs_now`); a lock touched further into the future than it would be stale in the past (another host's
    with a heartbeat timeout; an empty or invalid one by :data:`GRACE_S`) is foreign: no heartbeat sets that."""
    info = seen.info
    if info is None:
        what = "empty" if not seen.data.strip() else \
            "unreadable" if seen.problem.startswith(("not JSON", "not a JSON", "larger")) else "invalid"
        detail = f"{what} ({seen.problem})" if seen.problem else what
        if seen.age < -GRACE_S:
            return f"an {detail} lock file touched {_ahead(seen.age)}"
        if seen.age < GRACE_S and what == "invalid":
            raise OutputBusyError(f"{label}: its lock {path} is {detail}, written {seen.age:.0f} s ago; delete it "
                                  f"if no process writes there (one like it is taken over once {GRACE_S:.0f} s old)")
        if seen.age < GRACE_S:
            raise OutputBusyError(f"{label}: its lock {path} is {detail}, written {seen.age:.0f} s ago, perhaps "
                                  "by another process taking the lock this moment; try again in a minute, or "
                                  "delete it if no process writes there")
        why = "its writer died while writing it" if what != "invalid" else "no pgra process writes one like it"
        return f"an {detail} lock file written {seen.age / 60:.0f} min ago ({why})"
    if info["host"] != me["host"]:
        limit = _heartbeat_timeout(info, stale_after)
        if limit is None:
            raise _busy(label, info, path, same_host=False)
        if seen.age > limit:
            return f"the lock of {_describe(info)}, whose heartbeat stopped {seen.age:.0f} s ago"
        if seen.age < -limit:
            return f"the lock of {_describe(info)}, touched {_ahead(seen.age)}"
        if "stale_after" not in info:  # its holder does not beat: nothing to wait for
            raise _busy(label, info, path, same_host=False)
        raise _Beating(_busy(label, info, path, same_host=False), limit - max(seen.age, 0.0))
    pid = info["pid"]
    alive = _alive(pid)
    if alive and not _reused_pid(info):
        raise _busy(label, info, path, same_host=True)
    why = f"which is no longer running (pid {pid} now belongs to another process)" if alive else \
        "which is no longer running"
    return f"the lock of {_describe(info)}, {why}"


def _acquire(path: Path, me: dict, label: str, stale_after: float | None = None,
             wait: bool = False) -> tuple[tuple[int, int], bytes] | None:
    """Take the lock file ``path`` for ``me``: the created file's (device, inode) and bytes; None when this
    process holds it already. ``wait``: another host's lock that beats (it records its timeout), its heartbeat
    younger than that, is waited for, once, until it would be stale (:func:`_wait_stale`), before it is refused."""
    data = json.dumps(me).encode("utf-8")
    took_over = ""
    waited = False
    attempts = 0
    while attempts < _ATTEMPTS:
        attempts += 1
        ident = _create(path, data)
        if ident is not None:
            if took_over:
                print(f"{label}: taking over {took_over}", file=sys.stderr)
            return ident, data
        try:
            seen = _settled(path)
        except OSError as e:
            raise OutputBusyError(f"{label}: cannot read its lock {path} ({e.strerror or e}); delete it if no "
                                  "process writes there") from None
        if seen is None:
            continue  # released meanwhile: try again
        try:
            if _is_mine(seen.info, me):
                return None
            try:
                reason = _judge(seen, me, path, label, stale_after)
            except _Beating as busy:  # waited for once, never longer than this caller's own timeout (a forged lock
                if not wait or waited or stale_after is None or busy.stale_in > stale_after:  # may record 1e9 s)
                    raise
                waited = True
                attempts -= 1
                _wait_stale(label, seen, busy.stale_in)
                continue
            if _remove_if_unchanged(path, seen):
                took_over = reason
        finally:
            seen.close()
    raise OutputBusyError(f"{label}: could not take the lock {path} (other processes keep taking it)")


def _wait_stale(label: str, seen: _Seen, stale_in: float) -> None:
    """Wait ``stale_in`` seconds (and a little more) for another host's lock to be stale: under a claim taken over
    from a dead job, the job's output lock beat on a thread of its own and may have beaten up to a quarter of the
    timeout after its claim did (said in one line). A live holder beats meanwhile and is refused after it."""
    print(f"{label}: its lock is held by {_describe(seen.info or {})}, whose heartbeat is "
          f"{max(seen.age, 0.0):.0f} s old; waiting {stale_in:.0f} s to see whether it stopped (the claim on this "
          "folder was free: its job died, or it writes here without a claim)", file=sys.stderr, flush=True)
    time.sleep(stale_in + min(1.0, stale_in / 4 + 0.1))


def _is_mine(info: dict | None, me: dict) -> bool:
    """Whether the lock ``info`` is this process's own (re-entrance)."""
    return info is not None and info["pid"] == me["pid"] and info["host"] == me["host"] and \
        info.get("pid_start", me["pid_start"]) == me["pid_start"]


def _me(command: str = "", stale_after: float | None = None, extra: dict | None = None) -> dict:
    """This process's lock content."""
    me = {**(extra or {}), "pid": os.getpid(), "host": socket.gethostname(),
          "command": command or " ".join(sys.argv[:3]), "started": time.time(), "pid_start": _start_token(os.getpid())}
    if job_id():
        me["job"] = job_id()
    if stale_after is not None:
        me["stale_after"] = stale_after  # readers on other hosts judge its heartbeat by it
    return me


@contextlib.contextmanager
def hold_lock(path: str | Path, command: str = "", label: str | None = None,
              stale_after: float | None = None, extra: dict | None = None, wait: bool = False) -> Iterator[Path]:
    """Hold the lock file ``path`` (its folder must exist) for the block; raise :class:`OutputBusyError` if a live
    process holds it. Re-entrant within one process. ``label``: what the lock guards, in messages (its folder).
    ``stale_after``: seconds after which another host's lock without a heartbeat is taken over; this lock's own
    heartbeat (its mtime touched every ``stale_after / 4`` s) runs while it is held, and the lock records it.
    ``extra``: more fields the lock file holds (JSON values). ``wait``: another host's lock still beating is
    waited for, once, until it would be stale, before it is refused (an output lock under a claim)."""
    path = Path(path)
    label = str(path.parent) if label is None else label
    me = _me(command, stale_after, extra)
    mine = _acquire(path, me, label, stale_after, wait)
    if mine is None:  # this process holds it already (a stage run inside another)
        yield path
        return
    stop = threading.Event()
    beat = None
    if stale_after is not None:
        beat = threading.Thread(target=_heartbeat, args=(path, mine[0], stale_after / 4, stop), daemon=True)
        beat.start()
    try:
        yield path
    finally:
        stop.set()
        if beat is not None:
            beat.join()
        _release(path, *mine)


def _heartbeat(path: Path, ident: tuple[int, int], every: float, stop: threading.Event) -> None:
    """Touch the lock ``path`` every ``every`` seconds while it is still this process's file (until ``stop``)."""
    while not stop.wait(every):
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == ident:
                os.utime(path)


def holder(path: str | Path, stale_after: float | None = None, remove_stale: bool = False) -> dict | None:
    """Who holds the lock file ``path``, judged as :func:`hold_lock` judges it but without taking it: the live
    holder's lock content (``{}`` for a fresh empty, unreadable or invalid one, or one that cannot be read), or
    None when there is none, it is this process's own, or its holder is dead. No lock is written or removed unless
    ``remove_stale`` (then a dead holder's lock is removed, as a takeover would); judging a lock by its age creates
    and removes a probe file beside it (:func:`fs_now`: the file system's clock)."""
    path = Path(path)
    me = _me()
    try:
        seen = _open(path, writable=remove_stale)
    except OSError:
        return {}
    if seen is None:
        return None
    try:
        if _is_mine(seen.info, me):
            return None
        try:
            _judge(seen, me, path, str(path), stale_after)
        except OutputBusyError:
            return seen.info or {}
        if remove_stale:
            with contextlib.suppress(OSError):
                _remove_if_unchanged(path, seen)
        return None
    finally:
        seen.close()


def release_dead_writers(folder: str | Path) -> list[Path]:
    """Remove the output locks under ``folder`` left by processes of this host that no longer run (judged as a
    takeover judges them): a cell's child process killed alone (the OOM killer) leaves its lock fresh, and another
    host would take it for a live job's until its heartbeat is ``stale_after`` old. The parent that saw the child
    die calls it. The locks removed."""
    me, removed = _me(), []
    for path in sorted(Path(folder).rglob(LOCK_FILE)):
        try:
            seen = _open(path)
        except OSError:
            continue
        if seen is None:
            continue
        try:
            if seen.info is None or seen.info["host"] != me["host"] or _is_mine(seen.info, me):
                continue
            with contextlib.suppress(OutputBusyError):
                _judge(seen, me, path, str(path))
                if _remove_if_unchanged(path, seen):
                    removed.append(path)
        finally:
            seen.close()
    return removed


def inherited_stale_after() -> float | None:
    """The heartbeat timeout of output locks taken inside a claim (:data:`STALE_ENV`); None outside one."""
    value = os.environ.get(STALE_ENV, "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_STALE_AFTER):
        raise InputError(f"{STALE_ENV}={shorten(value)} is not a number of seconds > 0 (pgra sets it for the "
                         "stages and cells a job runs under its claim; unset it)", field=STALE_ENV)
    return seconds


@contextlib.contextmanager
def beating_outputs(stale_after: float) -> Iterator[None]:
    """For the block (and the child processes started in it): output locks beat every ``stale_after / 4`` s,
    and another host's output lock whose heartbeat is older than ``stale_after`` is taken over (the claim that
    guards these folders was taken over from a job that died, so its locks there are dead too)."""
    before = os.environ.get(STALE_ENV)
    os.environ[STALE_ENV] = repr(float(stale_after))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STALE_ENV, None)
        else:
            os.environ[STALE_ENV] = before


def _release(path: Path, ident: tuple[int, int], data: bytes) -> None:
    """Remove the lock this process created, if it is still there (and still its own)."""
    try:
        seen = _open(path)
    except OSError:
        return
    if seen is None:
        return
    try:
        st = os.fstat(seen.fd)
        if (st.st_dev, st.st_ino) == ident and seen.data == data:
            _remove_if_unchanged(path, seen)
    finally:
        seen.close()


@contextlib.contextmanager
def output_lock(directory: str | Path, command: str = "", field: str = "out") -> Iterator[Path]:
    """Hold ``directory``'s lock for the block (creating the folder); raise :class:`OutputBusyError` if a live
    process holds it. Re-entrant within one process. ``field``: the option naming the folder (for errors). Inside
    a claim (:func:`beating_outputs`) the lock beats, and another host's lock whose heartbeat stopped longer ago
    than the claim's timeout is taken over; one whose heartbeat is younger than that is waited for until it would
    be stale (its job's claim was taken over, and the claim may have beaten before the lock last did), and refused
    only if it beat meanwhile."""
    directory = Path(directory)
    if (directory.exists() or directory.is_symlink()) and not directory.is_dir():
        from .artifacts import describe_path

        raise InputError(f"{directory} is {describe_path(directory)}, not a folder: choose another output folder",
                         field=field)
    stale = inherited_stale_after()  # inside a claim: this lock beats, and a dead job's on another host is taken
    created = [p for p in (directory, *directory.parents) if not p.exists()]  # removed again if left empty
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with hold_lock(directory / LOCK_FILE, command, label=str(directory), stale_after=stale,
                       wait=stale is not None) as path:
            yield path
    finally:
        for folder in created:  # a run refused before writing anything leaves no empty folders behind
            try:
                folder.rmdir()
            except OSError:
                break


def is_main_launch() -> bool:
    """True unless this is a non-zero rank of torchrun / accelerate launch (only rank 0 holds the lock)."""
    return os.environ.get("RANK", "0") == "0"


@contextlib.contextmanager
def holding_output(cfg: Any, kind: str | None = None, field: str = "out", holder: str = "") -> Iterator[None]:
    """Hold the lock of ``cfg.<field>`` for the block (rank 0 of a launch only; re-entrant; ``holder`` as the lock
    file names it). ``kind``: the manifest kind written there; a folder holding another artifact is refused before
    anything in it is touched (:func:`pgra.storage.artifacts.claim_output`), and so is a non-empty folder pgra did
    not make (:func:`pgra.storage.ownership.claimed`)."""
    out = getattr(cfg, field, "")
    if not out or not is_main_launch():
        yield
        return
    if dataclasses.is_dataclass(cfg):  # options, paths and overlaps, before the lock creates anything
        from ..core.config import check_config

        check_config(cfg)
    with output_lock(out, holder, field=field):
        from .ownership import claimed

        if kind:
            from .artifacts import claim_output

            claim_output(out, kind, field)
        with claimed(out, kind or "output", field, cfg):  # pgra writes only into a folder it made
            yield


def locks_output(field: str = "out", kind: str | None = None) -> Callable:
    """Run ``fn(cfg, ...)``, which writes ``cfg.<field>``, under :func:`holding_output` (a stage's: the runner's)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with holding_output(args[0] if args else kwargs.get("cfg"), kind, field, f"{fn.__module__}.{fn.__name__}"):
                return fn(*args, **kwargs)
        return run
    return wrap
