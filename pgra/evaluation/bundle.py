"""A results bundle (``pgra bundle EXPERIMENT --out DIR``): the cells' records and predictions, the stages' key,
cost and manifest, and the analyses' tables, where an experiment keeps them (``pgra report BUNDLE`` reads it as
one), with a manifest of every file's size and SHA-256. A bundle someone sends is checked in one place
(:func:`verify_bundle`).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import IncompleteArtifactError, InputError, shorten, whole_number
from ..experiment.layout import CELL_GLOB, STAGE_COST_FILE, STAGE_KEY_FILE
from ..results.predictions import cell_task, checked_cell_results, read_cell
from ..runtime.environment import cells_environment, environment_record
from ..storage.artifacts import (
    MANIFEST,
    atomic_dir,
    describe_path,
    file_record,
    own_file_name,
    read_json_object,
    read_manifest,
    refuse_link,
    verify_file,
    write_json,
)
from ..storage.ownership import RECORD, claim_folder, read_record
from .cells import REPORT_FILES

KIND = "bundle"
ANALYSIS_DIR = "analysis"  # where pgra analyze writes (pgra.analysis.inputs): its tables and figures are bundled
ANALYSIS_SUFFIXES = (".md", ".json", ".png")
BUNDLE_FORMAT = 1
STAGE_FILES = (STAGE_KEY_FILE, STAGE_COST_FILE, MANIFEST)  # what of a stage folder a bundle keeps


def is_bundle(folder: str | Path) -> bool:
    """Whether ``folder`` is a results bundle (its ``manifest.json`` says kind ``bundle``)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return False
    try:
        return read_json_object(path).get("kind") == KIND
    except InputError:
        return False


def verify_bundle(folder: str | Path) -> dict[str, Any]:
    """The bundle's manifest, after checking the bundle whole as untrusted input."""
    folder = Path(folder)
    found = _bundle_files(folder)  # first: the manifest's own checks look at the files it lists
    manifest = read_manifest(folder, KIND)
    _check_format(folder, manifest.get("format"))
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise InputError("lists no files (edited by hand?)", path=folder / MANIFEST, field="files")
    for name, record in files.items():
        if not isinstance(record, dict) or not isinstance(record.get("size"), int) or \
                not isinstance(record.get("sha256"), str):
            raise InputError(f"the record of {shorten(name)} is not {{size, sha256}} (edited by hand?)",
                             path=folder / MANIFEST, field=f"files.{shorten(name, 60)}")
        own_file_name(folder, name)  # inside the bundle (a relative path, no '..'), before it is looked for
        if name not in found:
            raise InputError(f"{folder / name}: file listed in the manifest is missing; the bundle no longer holds "
                             "what was bundled: bundle the experiment again", path=folder / MANIFEST,
                             field=f"files.{shorten(name, 60)}")
        try:
            verify_file(folder, name, record)
        except IncompleteArtifactError as e:
            raise InputError(f"{e}; the bundle no longer holds what was bundled: bundle the experiment again",
                             path=folder / MANIFEST, field=f"files.{shorten(name, 60)}") from e
    analysed = not any(str(name).startswith(f"{ANALYSIS_DIR}/") for name in files)  # report --analyses wrote it
    added = sorted(name for name in found if name not in files and "/" in name
                   and not (analysed and name.startswith(f"{ANALYSIS_DIR}/")))
    if added:  # a cell, predictions or a stage's records put into the bundle by hand would be read unchecked
        raise InputError(f"holds {', '.join(added[:5])}, which its manifest does not list (added by hand?): only "
                         "what was bundled is reported; bundle the experiment again", path=folder / MANIFEST,
                         field="files")
    return manifest


def _check_format(folder: Path, value: Any) -> None:
    """A bundle's ``format``: a whole number this pgra reads (a newer one is refused by name: upgrade pgra)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"must be a whole number from 1, got {shorten(value)} (edited by hand?)",
                         path=folder / MANIFEST, field="format")
    if value > BUNDLE_FORMAT:
        raise InputError(f"the bundle is of format {value}, written by a newer pgra; this pgra reads bundles of "
                         f"format {BUNDLE_FORMAT} and older: upgrade pgra to report it", path=folder / MANIFEST,
                         field="format")


def _bundle_files(folder: Path) -> set[str]:
    """Every file in the bundle (relative POSIX paths); a link or a FIFO is refused by name."""
    found: set[str] = set()
    for top, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            path = Path(top, name)
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                what = "a symbolic link" if path.is_symlink() else describe_path(path)
                raise InputError(f"{what} in a bundle, which holds only files and folders (a link would lead reads "
                                 "and writes out of it); nothing was read or written: remove it, or bundle the "
                                 "experiment again", path=path)
            if name in names:
                found.add(path.relative_to(folder).as_posix())
    return found


def check_plan_records(cfg: Any) -> None:
    """Verify every results bundle among the config's ``plan_records`` before anything is priced from them."""
    from ..experiment.estimate import record_sources

    for folder in record_sources(cfg):
        if is_bundle(folder):
            verify_bundle(folder)


@dataclass(frozen=True)
class CellFilter:
    """Which finished cells a bundle takes: those of the given tasks (folder names), methods and seeds (empty: all)."""

    tasks: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

    def takes(self, task: str, method: str, seed: int) -> bool:
        return ((not self.tasks or task in self.tasks) and (not self.methods or method in self.methods)
                and (not self.seeds or seed in self.seeds))

    def record(self) -> dict[str, list[Any]]:
        """What the bundle's manifest says about the selection (the fields given)."""
        return {k: list(v) for k, v in (("tasks", self.tasks), ("methods", self.methods), ("seeds", self.seeds)) if v}


def _seed(folder: str) -> int:
    """The seed a ``seed-N`` folder names (ASCII digits), else -1 (a folder made by hand: ``seed-²``)."""
    n = whole_number(folder.removeprefix("seed-"))
    return -1 if n is None else n


def bundle_files(experiment: Path, only: CellFilter | None = None
                 ) -> tuple[list[Path], list[dict[str, Any]], str | None]:
    """The files a bundle copies (relative paths, predictions checked), the records of the cells ``only`` takes, and
    why ``pgra analyze``'s tables are left out (None: they come along, or there are none)."""
    files: list[Path] = []
    records: list[dict[str, Any]] = []
    task_dirs: set[Path] = set()
    only = only or CellFilter()
    for cell_json in sorted(experiment.glob(CELL_GLOB)):
        task, method, seed = cell_json.parent.relative_to(experiment).parts
        if not only.takes(task, method, _seed(seed)):
            continue
        record = read_cell(cell_json)  # a hand-edited split name (one outside the cell) refused
        checked_cell_results(cell_json, record, cell_task(record))
        records.append(record)
        rel = cell_json.parent.relative_to(experiment)
        files.append(rel / cell_json.name)
        files += [rel / f"predictions_{split}.jsonl" for split in record["results"]]
        task_dirs.add(rel.parts[0])
    for task in sorted(task_dirs):
        for stage in sorted(p for p in (experiment / task).iterdir() if (p / STAGE_KEY_FILE).is_file()):
            files += [Path(task, stage.name, name) for name in STAGE_FILES
                      if (stage / name).is_file() or (stage / name).is_symlink()]
    for rel in files:  # a link's target is not the experiment's file: it would be shared as one (a token as cost.json)
        if (experiment / rel).is_symlink() or not (experiment / rel).is_file():
            what = "a symbolic link" if (experiment / rel).is_symlink() else describe_path(experiment / rel)
            raise InputError(f"is {what}, not a file the experiment wrote: a bundle copies only the experiment's own "
                             "files; nothing was written: replace it with the file itself, or remove it",
                             path=experiment / rel)
    if only.record():  # the analyses describe the whole experiment: a piece of it is bundled without them
        return files, records, None
    stale = stale_analyses(experiment, {cell_ident(r) for r in records})  # every cell is taken: these are its cells
    return files + ([] if stale else analysis_files(experiment)), records, stale


def analysis_files(experiment: Path) -> list[Path]:
    """What ``pgra analyze`` wrote at the top of ``<experiment>/analysis/`` that ``analysis.json`` names."""
    folder = experiment / ANALYSIS_DIR
    if not (folder / "analysis.json").is_file() or folder.is_symlink():
        return []
    figures = read_json_object(folder / "analysis.json").get("figures")
    drawn = {str(f.get("file")) for f in figures if isinstance(f, dict)} if isinstance(figures, list) else set()
    return [Path(ANALYSIS_DIR, p.name) for p in sorted(folder.iterdir())
            if p.is_file() and not p.is_symlink() and p.suffix in ANALYSIS_SUFFIXES and not p.name.startswith(".")
            and (p.suffix != ".png" or p.name in drawn)]  # a figure no table of analysis.json drew is not theirs


def cell_ident(record: dict[str, Any]) -> str:
    """A finished cell as the analyses record what they read: ``task/method/seed-N:key``."""
    return f"{record.get('task')}/{record.get('method')}/seed-{record.get('seed')}:{record.get('key')}"


def cell_idents(experiment: Path) -> list[str]:
    """:func:`cell_ident` of every finished cell of ``experiment``, sorted."""
    return sorted(cell_ident(read_cell(p)) for p in experiment.glob(CELL_GLOB))


def stale_analyses(experiment: Path, current: set[str] | None = None) -> str | None:
    """Why the analyses in ``experiment`` do not describe its cells (``analysis.json``'s record), or None."""
    written = experiment / ANALYSIS_DIR / "analysis.json"
    if not written.is_file():
        return None
    try:
        recorded = read_json_object(written).get("cells")
    except InputError:
        return "its analysis.json is unreadable"
    if not isinstance(recorded, dict) or not recorded:
        return ("its analysis.json does not say which cells its tables read (written by an older pgra): run "
                "`pgra analyze` again to bundle them")
    current = set(cell_idents(experiment)) if current is None else current
    for name, read in recorded.items():
        read = set(read) if isinstance(read, list) else set()
        if read != current:
            other = sorted(current - read) or sorted(read - current)
            return (f"its {name} table read other cells than the folder holds ({other[0].split(':')[0]}): run "
                    "`pgra analyze` again to bundle them")
    return None


def _check_out(experiment: Path, out: Path) -> None:
    refuse_link(out, "out")  # before anything in it is looked at (or claimed): the link's target lies elsewhere
    exp, dest = experiment.resolve(), out.resolve()
    if dest == exp or dest in exp.parents or exp in dest.parents:
        raise InputError(f"the bundle's folder {out} and the experiment {experiment} overlap: choose a folder "
                         "outside the experiment", field="out")
    if not out.exists() or not any(out.iterdir()):
        return
    if read_record(out) is None or not is_bundle(out):
        claim_folder(out, KIND)  # refuses (naming what it holds) a folder pgra did not make as a bundle
    manifest = read_json_object(out / MANIFEST)
    if manifest.get("kind") != KIND:
        raise InputError(f"{out} is pgra's {manifest.get('kind')!r} folder, not a bundle: choose another --out",
                         field="out")
    known = set(manifest.get("files") or {}) | {MANIFEST, RECORD, *REPORT_FILES}
    # the analyses `pgra report BUNDLE --analyses` wrote into it: pgra's (their folder's record says so), replaced
    analysed = (read_record(out / ANALYSIS_DIR) or {}).get("kind") == ANALYSIS_DIR
    foreign = sorted(str(p.relative_to(out)) for p in out.rglob("*")
                     if p.is_file() and str(p.relative_to(out)) not in known
                     and not (analysed and p.relative_to(out).parts[0] == ANALYSIS_DIR))
    if foreign:
        raise InputError(f"{out} is a bundle, but it also holds {', '.join(foreign[:5])}, which pgra did not bundle; "
                         "nothing was changed: move them away or choose another --out", field="out")


def write_bundle(experiment: str | Path, out: str | Path, only: CellFilter | None = None) -> dict[str, Any]:
    """Copy ``experiment``'s results (those ``only`` takes) into the bundle ``out``; nothing written on refusal."""
    experiment, out = Path(experiment), Path(out)
    if not experiment.is_dir():
        raise InputError(f"no such experiment folder: {experiment}", field="experiment")
    files, records, stale = bundle_files(experiment, only)
    if not records:
        which = f" of {only.record()}" if only is not None and only.record() else ""
        raise InputError(f"no finished cells{which} ({CELL_GLOB}) under {experiment}: nothing to bundle",
                         path=experiment)
    _check_out(experiment, out)
    with atomic_dir(out) as tmp:
        claim_folder(tmp, KIND)
        listed: dict[str, dict[str, Any]] = {}
        for rel in files:
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(experiment / rel, dest)
            listed[rel.as_posix()] = file_record(dest)
        manifest = {"kind": KIND, "format": BUNDLE_FORMAT, "source": experiment.resolve().name,
                    "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "cells": len(records), **({"selection": only.record()} if only and only.record() else {}),
                    **({"analyses_left_out": stale} if stale else {}),
                    "environment": environment_record(),
                    "cells_environment": cells_environment(records), "files": listed}
        write_json(tmp / MANIFEST, manifest)
    return manifest


__all__ = ["BUNDLE_FORMAT", "KIND", "STAGE_FILES", "CellFilter", "analysis_files", "bundle_files", "cell_ident", "cell_idents", "check_plan_records", "is_bundle", "stale_analyses", "verify_bundle", "write_bundle"]
