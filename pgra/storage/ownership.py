"""What pgra wrote in a folder: pgra deletes or replaces only what it can prove it wrote.

A claimed folder (:func:`claimed`) gets ``.pgra-owned.json`` naming the kind it was made for; a non-empty folder
without one is refused (but for :data:`EVIDENCE`), and so is another kind's (but for :data:`HOSTED`)."""

from __future__ import annotations

import contextlib
import fnmatch
import re
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import IncompleteArtifactError, InputError, shorten
from .artifacts import MANIFEST, describe_path, read_json, sha256_file, write_json

RECORD = ".pgra-owned.json"
LOCK_FILE = ".pgra-lock"  # pgra.storage.lock.LOCK_FILE (not imported: pgra.storage.lock imports this module)
# atomic_path's temporary file (``.<name>.<8 chars>.tmp``) and atomic_dir's temporary folder (``.<name>.<8 chars>``)
_TEMP = re.compile(r"\.[^/]+\.[a-z0-9_]{8}(\.tmp)?")
# a lock being created (``<lock>.<pid>.<8 hex>.new``): pgra's, never dropped (another job's lock on its way)
_LOCK_TEMP = re.compile(r"\.[^/]+\.\d+\.[0-9a-f]{8}\.new")
# a folder an older pgra made before it wrote the record: names (glob patterns, under the folder) only a pgra
# stage writes; a cell's or an experiment stage's marks count for every kind (a cell's run is a stage's output)
EVIDENCE: dict[str, tuple[str, ...]] = {
    "*": (".cell_key", "cell.json", ".stage_key"),
    "reader": ("train_log.jsonl", "checkpoints/step_*/trainer_state.json"),
    "simcse": (".simcse",),
    "index": (".build/plan.json",),
    "experiment": ("*/*/seed-*/.cell_key", "*/*/seed-*/cell.json", "*/candidates/.stage_key"),
    "analysis": ("analysis.json", "figures.json"),
}
MAX_NAMED = 5  # entries an error names before "and N more"
# the stages whose output a folder pgra made for another kind holds (a grid's cell: its method's run)
HOSTED: dict[str, tuple[str, ...]] = {"cell": ("reader", "icl")}
# a stage's own, more precise refusal of a folder it did not make, run before the general one (raises or returns)
PART_CHECKS: dict[str, Callable[[Path, Any], None]] = {}


def is_temp(name: str) -> bool:
    """Whether ``name`` is a temporary name of pgra's atomic writes."""
    return bool(_TEMP.fullmatch(name))


def _pgra_name(p: Path) -> bool:
    """The record, the lock, or a temporary file or folder of pgra's own naming."""
    return p.name in (RECORD, LOCK_FILE) or is_temp(p.name) or bool(_LOCK_TEMP.fullmatch(p.name))


def _empty_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink() and not any(p.iterdir())


def entries(folder: Path) -> list[Path]:
    """What ``folder`` holds that could be someone's: all but pgra's record, lock and temporary names, empty folders."""
    return sorted(p for p in folder.iterdir() if not _pgra_name(p) and not _empty_dir(p))


def _names(paths: Collection[Path]) -> str:
    shown = ", ".join(repr(p.name) for p in list(paths)[:MAX_NAMED])
    return shown + (f" and {len(paths) - MAX_NAMED} more" if len(paths) > MAX_NAMED else "")


def _json_or_none(path: Path) -> Any:
    """What the regular file (not a link) ``path`` holds as JSON; None when it is not there or unreadable."""
    if not path.is_file() or path.is_symlink():
        return None
    try:
        return read_json(path)
    except IncompleteArtifactError:
        return None


def read_record(folder: str | Path) -> dict[str, Any] | None:
    """The ownership record of ``folder`` (None when there is none, or it is unreadable: not proof)."""
    record = _json_or_none(Path(folder) / RECORD)
    return record if isinstance(record, dict) and record.get("pgra") == "owned" else None


def _write_record(folder: Path, record: dict[str, Any]) -> None:
    write_json(folder / RECORD, {"pgra": "owned", **record})


def _own_manifest(folder: Path, kind: str) -> bool:
    """A finished artifact of ``kind`` is there (its ``manifest.json``, of that kind, pgra wrote)."""
    manifest = _json_or_none(folder / MANIFEST)
    return isinstance(manifest, dict) and manifest.get("kind") == kind


def made_by_pgra(folder: str | Path, kind: str) -> bool:
    """Whether pgra can prove it made ``folder``: its record, the stage's finished artifact, or :data:`EVIDENCE`."""
    folder = Path(folder)
    return read_record(folder) is not None or _own_manifest(folder, kind) or \
        any(any(folder.glob(pattern)) for pattern in EVIDENCE["*"] + EVIDENCE.get(kind, ()))


def drop_temp(folder: Path) -> None:
    """Remove leftover temporary files of pgra's naming at ``folder``'s top; call only under the folder's lock."""
    import shutil

    for p in folder.iterdir():
        if is_temp(p.name) and not p.is_symlink():
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def hosts(owner: str, kind: str) -> bool:
    """Whether a folder pgra made for ``owner`` may take output of ``kind`` (its own, or a run it hosts)."""
    return owner == kind or kind in HOSTED.get(owner, ())


def check_kind(folder: Path, record: dict[str, Any], kind: str, field: str = "out") -> None:
    """Refuse to write ``kind`` into a folder pgra made for another kind (its files would be lost)."""
    owner = record.get("kind")
    if isinstance(owner, str) and owner and not hosts(owner, kind):
        raise InputError(f"{folder} is pgra's {shorten(owner, 40)} folder ({RECORD}), not a {kind} one; writing "
                         "there would replace its files: nothing was changed, choose another output folder",
                         field=field)


def claim_folder(folder: str | Path, kind: str, field: str = "out", cfg: Any = None) -> bool:
    """Refuse to write into ``folder`` unless it is new, empty or pgra's (:func:`made_by_pgra`; ``cfg``: for its
    :data:`PART_CHECKS`); record pgra's ownership and drop leftover temporary files. True: a new record."""
    folder = Path(folder)
    if not (folder.exists() or folder.is_symlink()):
        folder.mkdir(parents=True)
    if not folder.is_dir():
        raise InputError(f"{folder} is {describe_path(folder)}, not a folder: choose another output folder",
                         field=field)
    record = read_record(folder)
    if record is not None:
        check_kind(folder, record, kind, field)
        drop_temp(folder)
        return False
    held = entries(folder)
    ours = made_by_pgra(folder, kind)
    if held and not ours:
        if kind in PART_CHECKS:
            PART_CHECKS[kind](folder, cfg)
        raise InputError(f"{folder} holds {_names(held)}, which pgra did not write (it writes only into a new or "
                         f"empty folder, or one it made: {RECORD}); nothing was changed: move them away or choose "
                         "another output folder", field=field)
    if ours:  # temporary names in a folder pgra cannot prove it made are left alone
        drop_temp(folder)
    _write_record(folder, {"kind": kind})
    return True


@contextlib.contextmanager
def claimed(folder: str | Path, kind: str, field: str = "out", cfg: Any = None) -> Iterator[None]:
    """:func:`claim_folder` for the block; a block that writes nothing leaves no record (nor folder) behind."""
    folder = Path(folder)
    existed = folder.exists() or folder.is_symlink()
    new = claim_folder(folder, kind, field, cfg)
    try:
        yield
    finally:
        if new and folder.is_dir() and not entries(folder):
            (folder / RECORD).unlink(missing_ok=True)
            if not existed:  # the folder this block made for nothing
                with contextlib.suppress(OSError):
                    folder.rmdir()


def check_folders(folder: str | Path, names: Collection[str], field: str = "out") -> None:
    """Refuse now, naming it, any of ``names`` in ``folder`` that is not a real folder: pgra replaces it later."""
    for name in names:
        path = Path(folder) / name
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            what = "a symbolic link" if path.is_symlink() else describe_path(path)
            raise InputError(f"{path} is {what}, not a folder pgra wrote; pgra would replace it: nothing was "
                             "changed, move it away or choose another output folder", field=field)


def check_replaceable(folder: str | Path, names: Collection[str], field: str = "out") -> None:
    """Refuse to replace any of ``names`` in ``folder`` not recorded as written by pgra with these very bytes."""
    folder = Path(folder)
    recorded = (read_record(folder) or {}).get("files")
    recorded = recorded if isinstance(recorded, dict) else {}  # a record of another shape records no file
    for name in names:
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        if not path.is_file() or path.is_symlink():
            raise InputError(f"{path} is {describe_path(path)}, not a file pgra wrote; nothing was changed: move it "
                             "away", field=field)
        if name not in recorded:
            raise InputError(f"{path} was not written by pgra (no record of it in {folder / RECORD}); pgra does not "
                             "replace it: nothing was changed, move it away or rename it", field=field)
        if sha256_file(path) != recorded[name]:
            raise InputError(f"{path} was changed after pgra wrote it (edited by hand?); pgra does not replace it: "
                             "nothing was changed, move it away or rename it to keep it", field=field)


def record_files(folder: str | Path, names: Collection[str], kind: str = "") -> None:
    """Record the checksums of ``names`` (just written by pgra in ``folder``) so a later run may replace them."""
    folder = Path(folder)
    record = read_record(folder) or {"kind": kind}
    files = dict(record["files"]) if isinstance(record.get("files"), dict) else {}
    files.update({name: sha256_file(folder / name) for name in names if (folder / name).is_file()})
    _write_record(folder, {**{k: v for k, v in record.items() if k != "pgra"}, "files": files})


def unknown_entries(folder: str | Path, patterns: Collection[str], files_only: bool = False) -> list[Path]:
    """The entries of ``folder`` not named like ``patterns`` (pgra's own names allowed; ``files_only``: no folders)."""
    return [p for p in sorted(Path(folder).iterdir()) if not _pgra_name(p) and (
        (files_only and (not p.is_file() or p.is_symlink())) or
        not any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns))]


def check_own_folder(folder: str | Path, patterns: Collection[str], what: str, field: str = "out") -> None:
    """Refuse a ``folder`` a stage would replace unless it holds only names like ``patterns`` (or pgra's temp)."""
    folder = Path(folder)
    if not (folder.exists() or folder.is_symlink()):
        return
    if not folder.is_dir() or folder.is_symlink():
        raise InputError(f"{folder} is {describe_path(folder)}, not {what}; nothing was changed: choose another "
                         "output folder", field=field)
    for p in unknown_entries(folder, patterns, files_only=True)[:1]:
        raise InputError(f"{folder} is not {what} (it holds {p.name!r}, which pgra did not write); it would be "
                         "replaced: nothing was changed, choose another output folder", field=field)


def check_only_own(folder: str | Path, kind: str, patterns: Collection[str], action: str,
                   field: str = "out") -> None:
    """Refuse to ``action`` ``folder`` unless pgra made it and it holds only names ``patterns`` allows."""
    folder = Path(folder)
    if not folder.is_dir() or folder.is_symlink():
        if folder.exists() or folder.is_symlink():
            what = "a symbolic link" if folder.is_symlink() else describe_path(folder)
            raise InputError(f"{folder} is {what}, not a folder pgra wrote; nothing was changed", field=field)
        return
    foreign = [p for p in unknown_entries(folder, patterns) if not _empty_dir(p)]
    if not foreign and not made_by_pgra(folder, kind):
        foreign = entries(folder)
    if foreign:
        raise InputError(f"{folder} holds {_names(foreign)}, which pgra did not write; pgra would {action}, so "
                         "nothing was changed: move them away (or delete the folder yourself) and run again",
                         field=field)


__all__ = ["EVIDENCE", "HOSTED", "PART_CHECKS", "RECORD", "check_folders", "check_kind", "check_only_own", "check_own_folder", "check_replaceable", "claim_folder",
           "claimed", "drop_temp", "entries", "hosts", "is_temp", "made_by_pgra", "read_record", "record_files",
           "unknown_entries"]
