"""What a finished run read, so that a later use finds it again and refuses it when it changed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..core.errors import StaleArtifactError
from .artifacts import MANIFEST, read_json_object

CELL_FILE = "cell.json"  # an experiment cell's completion mark (pgra.experiment.layout)


def folder_fingerprint(folder: str | Path) -> str:
    """A short hash of a finished folder's manifest file checksums (the whole manifest without any), or 'missing'."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return "missing"
    manifest = read_json_object(path)
    content = manifest.get("files") if isinstance(manifest.get("files"), dict) else manifest
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def relative_path(path: str | Path, base: str | Path) -> str:
    """``path`` relative to the folder ``base`` (both resolved), recorded next to the absolute path."""
    return os.path.relpath(Path(path).resolve(), Path(base).resolve())


def recorded_folder(base: str | Path, absolute: str | Path, relative: str | None = None) -> Path:
    """A folder a record in ``base`` names: by its relative path when it exists (a moved experiment), else absolute."""
    if relative:
        local = Path(os.path.normpath(Path(base) / relative))
        if local.exists():
            return local
    return Path(absolute)


def data_fields(folder: str | Path, run: str | Path) -> dict[str, str]:
    """The manifest fields of a run that read ``folder``: ``data``, ``data_relative``, ``data_fingerprint``."""
    return {"data": str(Path(folder).resolve()), "data_relative": relative_path(folder, run),
            "data_fingerprint": folder_fingerprint(folder)}


def run_data(run: str | Path, manifest: dict[str, Any] | None = None) -> Path | None:
    """The data folder a finished run read (its manifest's ``data``; relative to the run when there)."""
    run = Path(run)
    if manifest is None:
        if not (run / MANIFEST).is_file():
            return None
        manifest = read_json_object(run / MANIFEST)
    if not manifest.get("data"):
        return None
    return recorded_folder(run, manifest["data"], manifest.get("data_relative"))


def recorded_fingerprint(run: str | Path) -> str | None:
    """The fingerprint of the data folder the run read, as recorded; None for a run made before runs recorded one."""
    run = Path(run)
    for name, get in ((MANIFEST, lambda r: r.get("data_fingerprint")),
                      (CELL_FILE, lambda r: (r.get("data") or {}).get("fingerprint"))):
        if (run / name).is_file():
            found = get(read_json_object(run / name))
            if found:
                return str(found)
    return None


def check_unchanged(folder: str | Path, recorded: str | None, reader: str, hint: str) -> None:
    """Refuse ``folder`` when it no longer holds what ``reader`` read (a folder without a manifest: its reader's)."""
    if not recorded:
        return
    now = folder_fingerprint(folder)
    if now not in (recorded, "missing"):
        raise StaleArtifactError(
            f"{reader} read {folder} with fingerprint {recorded}; that folder now holds {now} (rebuilt since, e.g. by "
            f"a later experiment with another index or other task data in the same folder): {hint}")


def check_run_data(run: str | Path, folder: str | Path, hint: str) -> None:
    """Refuse the run's own data folder when it changed since the run read it (see :func:`check_unchanged`)."""
    check_unchanged(folder, recorded_fingerprint(run), str(run), hint)


def check_cell_data(cell: str | Path, record: dict[str, Any]) -> None:
    """Refuse a finished experiment cell (its folder and ``cell.json`` record) whose data folder, still there, now
    holds other data than the cell read: the folder's other cells (or a report of them) would mix two inputs."""
    data = record.get("data") if isinstance(record.get("data"), dict) else {}
    if not data.get("fingerprint") or not data.get("folder"):
        return  # a cell made before cells recorded it
    check_unchanged(recorded_folder(cell, data["folder"], data.get("relative")), str(data["fingerprint"]), str(cell),
                    "its results come from other inputs than the cells made since; re-run its experiment to redo it on "
                    "this folder, or keep experiments with another index or task data in another out")


__all__ = ["check_cell_data", "check_run_data", "check_unchanged", "data_fields", "folder_fingerprint",
           "recorded_fingerprint", "recorded_folder", "relative_path", "run_data"]
