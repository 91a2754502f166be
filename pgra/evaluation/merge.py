"""One report from experiments run apart: the cells of several experiment folders and results bundles, merged.

:func:`merged_cells` refuses with one error line what cannot be one table (one cell twice with other predictions
or key, settings or stages of one task that differ, other inputs); the same cell twice alike counts once."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.errors import InputError, shorten
from ..experiment.config import JOB_FIELDS, METHOD_OVERRIDABLE, RUNTIME_FIELDS
from ..experiment.layout import STAGE_KEY_FILE
from ..storage.artifacts import MANIFEST, read_json_object, read_utf8
from .bundle import is_bundle, verify_bundle
from .cells import CellResult, check_shared_inputs, source_cells

# what may differ between merged cells of one task: how each job chose and ran its share, and where files lie
LOCATION_FIELDS = ("out", "data_dir")


def _comparable(config: Any, method_sections: bool) -> dict[str, Any]:
    """A cell's recorded config as merged cells must share it (see the module's docstring)."""
    config = config if isinstance(config, dict) else {}
    skip = set(JOB_FIELDS) | set(RUNTIME_FIELDS) | set(LOCATION_FIELDS)
    if not method_sections:
        skip |= set(METHOD_OVERRIDABLE)
    return {k: _without_locations(v) for k, v in config.items() if k not in skip}


def _without_locations(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_locations(v) for k, v in value.items() if k not in LOCATION_FIELDS}
    return value


def first_difference(a: Any, b: Any, prefix: str = "") -> tuple[str, Any, Any] | None:
    """The first dotted key (sorted) where JSON values ``a`` and ``b`` differ, with both values; None if equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = first_difference(a.get(key, _MISSING), b.get(key, _MISSING), f"{prefix}{key}.")
            if found:
                return found
        return None
    if json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str):
        return None
    return prefix.rstrip("."), a, b


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


_MISSING = _Missing()


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, _Missing) else shorten(value, 60)


def _label(cell: CellResult) -> str:
    return f"{cell.task}/{cell.method}/seed-{cell.seed}"


def _refuse_setting(what: str, diff: tuple[str, Any, Any], a: CellResult, b: CellResult) -> InputError:
    key, va, vb = diff
    return InputError(f"{what}: setting '{key}' is {_shown(va)} in {a.path.parent} but {_shown(vb)} in "
                      f"{b.path.parent}; results made with other settings are never merged into one table: re-run "
                      "one of them with the other's settings", field=key)


def _check_same_run(kept: CellResult, other: CellResult) -> None:
    """Refuse ``other`` (``kept``'s task, method and seed, from elsewhere) unless the same predictions and key."""
    def lines(c: CellResult) -> str:
        return json.dumps(c.predictions, sort_keys=True, ensure_ascii=False)

    if lines(kept) != lines(other):
        raise InputError(f"cell {_label(kept)} is in {kept.path.parent} and in {other.path.parent} with different "
                         "predictions: two runs of one cell cannot both be reported; keep one (remove the other "
                         "source, or re-bundle it without that cell)", path=other.path)
    if kept.record.get("key") != other.record.get("key"):
        diff = first_difference(kept.record.get("settings"), other.record.get("settings")) or \
            first_difference(_comparable(kept.record.get("config"), True),
                             _comparable(other.record.get("config"), True)) or \
            ("key", kept.record.get("key"), other.record.get("key"))
        raise _refuse_setting(f"cell {_label(kept)} is in two sources with the same predictions but another key",
                              diff, kept, other)


def _check_settings(cells: list[CellResult]) -> None:
    """Refuse cells of one task from different sources whose settings must agree but differ (see the module)."""
    first_of_task: dict[str, CellResult] = {}
    first_of_method: dict[tuple[str, str], CellResult] = {}
    for cell in cells:
        for group, key, method_sections in ((first_of_task, cell.task, False),
                                            (first_of_method, (cell.task, cell.method), True)):
            ref = group.setdefault(key, cell)  # type: ignore[arg-type]
            if ref is cell or ref.path.parents[3] == cell.path.parents[3]:  # <source>/<task>/<method>/seed-<n>
                continue
            what = f"{_label(cell)} and {_label(ref)} cannot be merged"
            if method_sections:
                diff = first_difference(ref.record.get("settings"), cell.record.get("settings"), "settings.")
                if diff:
                    raise _refuse_setting(what, diff, ref, cell)
            diff = first_difference(_comparable(ref.record.get("config"), method_sections),
                                    _comparable(cell.record.get("config"), method_sections))
            if diff:
                raise _refuse_setting(what, diff, ref, cell)
            if not method_sections:  # methods read different stages (FiD the candidates, PGRA its reranked top-d)
                continue
            fp = [((c.record.get("data") or {}).get("fingerprint")) for c in (ref, cell)]
            if all(fp) and fp[0] != fp[1]:
                raise InputError(f"{what}: they read other data of task {cell.task} (data fingerprint {fp[0]} in "
                                 f"{ref.path.parent}, {fp[1]} in {cell.path.parent}); re-run one on the other's data",
                                 path=cell.path)


def _check_stages(sources: list[Path], tasks: set[str]) -> None:
    """Refuse a stage of one task (``candidates``, a reranked top-d) built with different keys in two sources."""
    seen: dict[tuple[str, str], tuple[str, Path]] = {}
    for src in sources:
        for task in sorted(tasks):
            folder = src / task
            if not folder.is_dir():
                continue
            for stage in sorted(p for p in folder.iterdir() if (p / STAGE_KEY_FILE).is_file()):
                key = read_utf8(stage / STAGE_KEY_FILE, "stage key").strip()
                prior = seen.setdefault((task, stage.name), (key, stage))
                if prior[0] == key:
                    continue
                diff = _manifest_difference(prior[1], stage)
                said = f": setting '{diff[0]}' is {_shown(diff[1])} there but {_shown(diff[2])} here" if diff else ""
                raise InputError(f"stage {task}/{stage.name} was built with key {prior[0]} in {prior[1]} and {key} "
                                 f"here{said}; cells read from other stages are never merged into one table",
                                 path=stage / STAGE_KEY_FILE, field=diff[0] if diff else None)


def _manifest_difference(a: Path, b: Path) -> tuple[str, Any, Any] | None:
    if not ((a / MANIFEST).is_file() and (b / MANIFEST).is_file()):
        return None
    return first_difference(*(_without_locations(read_json_object(p / MANIFEST).get("config")) for p in (a, b)))


def merged_cells(sources: Sequence[str | Path], split: str = "test") -> tuple[list[CellResult], dict[str, Any]]:
    """The finished cells of every source as one list, checked as the module says, and what was merged."""
    if not sources:
        raise InputError("no experiment folder or bundle given", field="directory")
    paths = [Path(s) for s in sources]
    for i, path in enumerate(paths):
        if not path.is_dir():
            raise InputError(f"no such experiment folder or bundle: {path}", field="directory")
        if path.resolve() in {p.resolve() for p in paths[:i]}:
            raise InputError(f"{path} is given twice", field="directory")
    described, cells, duplicates = [], [], []
    kept: dict[tuple[str, str, int], CellResult] = {}
    for path in paths:
        if bundle := is_bundle(path):
            verify_bundle(path)
        found = source_cells(path, split, bundle=bundle)
        described.append({"path": str(path), "bundle": bundle, "cells": len(found)})
        for cell in found:
            ident = (cell.task, cell.method, cell.seed)
            if ident in kept:
                _check_same_run(kept[ident], cell)
                duplicates.append({"cell": _label(cell), "kept": str(kept[ident].path.parent),
                                   "also_in": str(cell.path.parent)})
                continue
            kept[ident] = cell
            cells.append(cell)
    if len(paths) > 1:
        _check_settings(cells)
        _check_stages(paths, {c.task for c in cells})
    check_shared_inputs(cells, split)
    return cells, {"sources": described, "duplicates": duplicates}


def out_is_source(sources: Sequence[str | Path], out: str | Path) -> bool:
    """Whether ``out`` is the report's one source; refused: one of several sources, or inside or around one."""
    dest = Path(out).resolve()
    for source in sources:
        src = Path(source).resolve()
        if src in dest.parents or dest in src.parents:
            raise InputError(f"--out {out} and the source {source} lie one inside the other: a report goes into a "
                             "folder of its own", field="out")
    among = any(dest == Path(s).resolve() for s in sources)
    if among and len(sources) > 1:
        raise InputError(f"--out {out} is one of the merged folders: a merged report goes into a folder of its own",
                         field="out")
    return among


__all__ = ["LOCATION_FIELDS", "first_difference", "merged_cells", "out_is_source"]
