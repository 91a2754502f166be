"""One writer per output folder: ``<out>/.pgra-lock`` names it; a second refuses (docs/failure-and-recovery.md)."""

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

from ..core.errors import InputError, PgraError, finite_number, shorten

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
# the heartbeat timeout of output locks taken inside a claim (pgra.experiment.claims.beating_outputs), inherited
STALE_ENV = "PGRA_LOCK_STALE_AFTER_S"


class OutputBusyError(PgraError):
    """Another live process is writing the output folder."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    return True


def _start_token(pid: int) -> str | None:
    """An identity of process ``pid``'s start (Linux: field 22 of ``/proc/<pid>/stat``; else psutil's)."""
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
    """Whether the live process with the lock's pid started otherwise than (or after) the lock's writer."""
    pid, recorded = info["pid"], info.get("pid_start")
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


# what a lock file's fields may hold: (field, required, check, what it must be); other fields are kept unread
_FIELDS: tuple[tuple[str, bool, Callable[[object], bool], str], ...] = (
    ("pid", True, lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= PID_MAX,
     f"a process id (an integer 1 .. {PID_MAX})"),
    ("host", True, lambda v: isinstance(v, str) and len(v) <= 1024, "a host name"),
    ("command", False, lambda v: isinstance(v, str), "a string"),
    ("started", False, lambda v: finite_number(v) and 0 <= v <= MAX_TIME,
     "a time (seconds since 1970, finite)"),
    ("pid_start", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("job", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("stale_after", False, lambda v: finite_number(v) and 0 < v <= MAX_STALE_AFTER,
     "a number of seconds > 0"),
)


def validate(data: bytes) -> tuple[dict | None, str]:
    """The one check of a lock file's bytes: ``(info, "")``, else ``(None, why)`` (``why`` empty: an empty file)."""
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
        if name not in info and required:
            return None, f"field '{name}' is missing"
        if name in info and not ok(info[name]):
            return None, f"field '{name}' is {shorten(info[name], 80)}, not {what}"
    return info, ""


def describe_holder(info: dict) -> str:
    """Who holds a lock: ``process <pid> on host <host>, job ... (`command`, started ...)``."""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    job = f", job {info['job']}" if info.get("job") else ""
    return (f"process {info.get('pid')} on host {info.get('host')}{job} (`{info.get('command', '?')}`, started "
            f"{started})")


def _temp_name(path: Path) -> Path:
    """A unique name beside ``path``, ``<name>.<pid>.<8 hex>.new`` (not ``.tmp``, which ownership.claimed drops)."""
    return path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")


def fs_now(folder: Path) -> float:
    """Now, on ``folder``'s file system clock: a probe file's mtime (this host's clock where it cannot write)."""
    probe = _temp_name(folder / LOCK_FILE)  # (unique: removing it when it could not be made harms nothing)
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
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
        """Seconds since it was written or last beat (:func:`fs_now`; negative: touched into the future)."""
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
    """The lock file at ``path``, opened (``writable`` where allowed: NFS flocks need it) and read; None if none."""
    nonblock = getattr(os, "O_NONBLOCK", 0)  # a FIFO in its place is reported, not waited on
    try:
        try:  # writable: NFS grants an exclusive flock only to a writer
            fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | nonblock)
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


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[_Seen | None]:
    """:func:`_open` for the block, closed after it; None when there is none or it cannot be read."""
    try:
        seen = _open(path)
    except OSError:
        seen = None
    with contextlib.nullcontext() if seen is None else contextlib.closing(seen):
        yield seen


def _settled(path: Path) -> _Seen | None:
    """:func:`_open`, re-reading a fresh empty or unreadable lock for up to :data:`SETTLE_S`."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        seen = _open(path)
        if seen is None or seen.info is not None or seen.age >= GRACE_S or time.monotonic() >= deadline:
            return seen
        seen.close()
        time.sleep(0.02)


def _create(path: Path, data: bytes) -> tuple[int, int] | None:
    """Create ``path`` holding ``data`` atomically (a temp file hard-linked): its (device, inode); None if taken."""
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
    """Remove ``path`` if it still is the very file ``seen`` read, with the same bytes (under its flock)."""
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
    return OutputBusyError(f"{label} is being written by {describe_holder(info)}; {hint}, or choose another output "
                           "folder")


class _Beating(OutputBusyError):
    """Another host's lock whose heartbeat is younger than its timeout: ``stale_in`` seconds before it is stale."""

    def __init__(self, busy: OutputBusyError, stale_in: float) -> None:
        super().__init__(str(busy))
        self.stale_in = stale_in


def _ahead(age: float) -> str:
    return (f"{-age:.0f} s in the future of the file system's clock (no heartbeat sets that: touched by hand or by "
            "a host whose clock is wrong; taken as foreign)")


def _judge(seen: _Seen, me: dict, path: Path, label: str, stale_after: float | None = None) -> str:
    """Why the lock ``seen`` is stale (said when taking it over); :class:`OutputBusyError` if its writer may live."""
    info = seen.info
    if info is None:
        what = "empty" if not seen.data.strip() else \
            "unreadable" if seen.problem.startswith(("not JSON", "not a JSON", "larger")) else "invalid"
        detail = f"{what} ({seen.problem})" if seen.problem else what
        if seen.age < -GRACE_S:
            return f"an {detail} lock file touched {_ahead(seen.age)}"
        if seen.age < GRACE_S:
            then = f"; delete it if no process writes there (one like it is taken over once {GRACE_S:.0f} s old)" \
                if what == "invalid" else (", perhaps by another process taking the lock this moment; try again in "
                                           "a minute, or delete it if no process writes there")
            raise OutputBusyError(f"{label}: its lock {path} is {detail}, written {seen.age:.0f} s ago{then}")
        why = "its writer died while writing it" if what != "invalid" else "no pgra process writes one like it"
        return f"an {detail} lock file written {seen.age / 60:.0f} min ago ({why})"
    if info["host"] != me["host"]:
        # dead after the longer of the caller's and the lock's heartbeat timeouts
        limit = max((t for t in (stale_after, info.get("stale_after")) if t is not None), default=None)
        if limit is None:
            raise _busy(label, info, path, same_host=False)
        if seen.age > limit:
            return f"the lock of {describe_holder(info)}, whose heartbeat stopped {seen.age:.0f} s ago"
        if seen.age < -limit:
            return f"the lock of {describe_holder(info)}, touched {_ahead(seen.age)}"
        if "stale_after" not in info:  # its holder does not beat: nothing to wait for
            raise _busy(label, info, path, same_host=False)
        raise _Beating(_busy(label, info, path, same_host=False), limit - max(seen.age, 0.0))
    alive = _alive(info["pid"])
    if alive and not _reused_pid(info):
        raise _busy(label, info, path, same_host=True)
    reused = f" (pid {info['pid']} now belongs to another process)" if alive else ""
    return f"the lock of {describe_holder(info)}, which is no longer running{reused}"


def _acquire(path: Path, me: dict, label: str, stale_after: float | None = None,
             wait: bool = False) -> tuple[tuple[int, int], bytes] | None:
    """Take the lock file ``path`` for ``me``: the created file's (device, inode) and bytes; None when this
    process holds it already. ``wait``: another host's beating lock is waited for once until it would be stale."""
    data, took_over, waited, attempts = json.dumps(me).encode("utf-8"), "", False, 0
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
        with contextlib.closing(seen):
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
    raise OutputBusyError(f"{label}: could not take the lock {path} (other processes keep taking it)")


def _wait_stale(label: str, seen: _Seen, stale_in: float) -> None:
    """Sleep until another host's lock would be stale: a dead job's may beat a quarter timeout after its claim."""
    print(f"{label}: its lock is held by {describe_holder(seen.info or {})}, whose heartbeat is "
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
    """Hold the lock file ``path`` for the block, re-entrant; :class:`OutputBusyError` if a live process holds it.
    ``stale_after``: another host's lock with an older heartbeat is taken over, and this one beats every quarter."""
    path = Path(path)
    mine = _acquire(path, _me(command, stale_after, extra), str(path.parent) if label is None else label,
                    stale_after, wait)
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
    """Who holds the lock file ``path``, judged as :func:`hold_lock` would: the live holder's content (``{}``: fresh
    but unreadable), or None (none, this process's own, or a dead holder's, removed with ``remove_stale``)."""
    path, me = Path(path), _me()
    try:
        seen = _open(path, writable=remove_stale)
    except OSError:
        return {}
    if seen is None:
        return None
    with contextlib.closing(seen):
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


def release_dead_writers(folder: str | Path) -> list[Path]:
    """Remove (and return) the locks under ``folder`` of this host's dead processes (a child killed by OOM)."""
    me, removed = _me(), []
    for path in sorted(Path(folder).rglob(LOCK_FILE)):
        with _reading(path) as seen:
            if seen is None or seen.info is None or seen.info["host"] != me["host"] or _is_mine(seen.info, me):
                continue
            with contextlib.suppress(OutputBusyError):
                _judge(seen, me, path, str(path))
                if _remove_if_unchanged(path, seen):
                    removed.append(path)
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


def _release(path: Path, ident: tuple[int, int], data: bytes) -> None:
    """Remove the lock this process created, if it is still there (and still its own)."""
    with _reading(path) as seen:
        st = os.fstat(seen.fd) if seen is not None else None
        if st is not None and (st.st_dev, st.st_ino) == ident and seen.data == data:
            _remove_if_unchanged(path, seen)


@contextlib.contextmanager
def output_lock(directory: str | Path, command: str = "", field: str = "out") -> Iterator[Path]:
    """Hold ``directory``'s lock for the block, creating the folder (beating and waiting inside a claim)."""
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
    """Hold the lock of ``cfg.<field>`` for the block (rank 0 only; re-entrant), refusing first a folder holding
    another artifact than ``kind`` or a non-empty one pgra did not make."""
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
