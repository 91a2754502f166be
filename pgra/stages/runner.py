"""The one runner of every stage, built-in and plug-in: it opens the stage's folder (its manifest removed: unfinished
until the runner writes one), writes its splits one by one (a killed run resumes: each finished split is recorded
in ``.splits_done.json`` under the stage's key, and a rerun with the same key keeps a recorded split whose file is
unchanged), meters each split's LM work, and writes the manifest last: the kind, the task, the stage's own fields,
its inputs' records, its config and the checksums of its files.

A built-in stage (``pgra retrieve``, ``pgra rerank``, ``full_search``) drives a :class:`StageRun` from its body; a
stage that implements :meth:`pgra.stages.Stage.build` is run whole by :func:`run_stage` (the default
:meth:`pgra.stages.Stage.run`), which also opens the folders it reads (:meth:`pgra.stages.Stage.open`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..artifacts import MANIFEST, file_record, read_json, sha256_text, write_json, write_manifest
from ..causal_lm import LMCost
from ..config import to_dict
from ..interchange import write_records
from ..provenance import folder_fingerprint, relative_path

SPLITS_DONE = ".splits_done.json"


def input_record(folder: Path, out: Path, **more: Any) -> dict[str, Any]:
    """An input folder's block in a stage's manifest: where it is, absolute and relative to ``out``, and its
    fingerprint (what replays and the provenance checks read), with ``more``."""
    return {"path": str(folder.resolve()), "relative": relative_path(folder, out),
            "fingerprint": folder_fingerprint(folder), **more}


class StageRun:
    """One stage folder being built: opened (:meth:`begin`), written split by split (:meth:`split`, resumable when
    ``key`` is given: what defines the splits' contents), metered (``cost``: the LM work of its splits) and finished
    by its manifest (:meth:`finish`)."""

    def __init__(self, out: str | Path, key: Any = None) -> None:
        self.out, self.counts, self.cost, self.tally = Path(out), {}, LMCost(), {}
        self.key = None if key is None else sha256_text(json.dumps(key, sort_keys=True, default=str))[:20]
        self._done: dict[str, Any] = {"key": self.key, "splits": {}}

    def begin(self) -> StageRun:
        """Open the folder: made, its manifest removed, and the splits a killed run with this key finished read."""
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / MANIFEST).unlink(missing_ok=True)
        if self.key is not None:
            self._done = _splits_done(self.out, self.key)
        return self

    def split(self, name: str, make: Callable[[], Iterable[dict[str, Any]]],
              meter: Callable[[], LMCost] | None = None,
              tally: Callable[[list[dict[str, Any]]], dict[str, int]] | None = None) -> int:
        """Write ``<name>.jsonl`` from ``make()`` (atomically), or keep it when a killed run with this key finished
        it; ``meter``: the stage's LM work so far (its split's share is recorded), ``tally``: counts of the split's
        records summed over the splits (:attr:`tally`). Returns its record count."""
        path = self.out / f"{name}.jsonl"
        kept = _kept(self._done["splits"].get(name), path) if self.key is not None else None
        if kept is None:
            before = meter() if meter else LMCost()
            records = list(make())
            spent = meter() if meter else LMCost()
            kept = {"count": write_records(path, records), "tally": tally(records) if tally else {},
                    "cost": LMCost(spent.calls - before.calls, spent.tokens - before.tokens).as_dict()}
            if self.key is not None:
                self._done["splits"][name] = {"file": file_record(path), **kept}
                write_json(self.out / SPLITS_DONE, self._done)
        self.counts[name] = kept["count"]
        self.cost += LMCost.from_dict(kept["cost"])
        for k, v in kept["tally"].items():
            self.tally[k] = self.tally.get(k, 0) + v
        return kept["count"]

    def finish(self, kind: str, task: Any, fields: Mapping[str, Any], inputs: Mapping[str, Any] | None = None,
               config: Any = None, files: Sequence[str] = (), splits: Sequence[str] | None = None,
               after: Mapping[str, Any] | None = None) -> Path:
        """Write the manifest, last: ``kind``, the ``task``, the stage's ``fields``, its ``inputs``' records, its
        ``config`` and the checksums of its split files (``splits``, default those written) and ``files``, then
        ``after``; returns the folder."""
        names = [f"{s}.jsonl" for s in (self.counts if splits is None else splits)] + list(files)
        write_manifest(self.out, {
            "kind": kind, "task": task if isinstance(task, dict) else to_dict(task), **fields, **(inputs or {}),
            "config": config if isinstance(config, dict) else to_dict(config),
            "files": {n: file_record(self.out / n) for n in names}, **(after or {})})
        return self.out


def run_stage(stage: Any, config: Any, ctx: Any = None) -> Path:
    """Build a stage that implements :meth:`~pgra.stages.Stage.build` into ``config.out``: the folders it reads
    (``config.<name>`` for each name in its ``reads``) opened and checked by their own stages, its folder opened,
    its splits written by ``build`` (resumed under its config), its manifest written with the task of its first
    input. Rank 0 works; the other ranks of ``ctx`` return at once (the grid meets them after the stage)."""
    from ..distributed import init_distributed
    from . import get_stage

    ctx = ctx or init_distributed()
    out = Path(config.out)
    if not ctx.is_main:
        return out
    folders = {name: Path(getattr(config, name)) for name in stage.reads}
    opened = {name: get_stage(name).open(folder) for name, folder in folders.items()}
    run = StageRun(out, key={"config": to_dict(config), "inputs": {n: folder_fingerprint(f) for n, f in
                                                                    folders.items()}}).begin()
    fields = stage.build(config, opened, run)
    task = next((m["task"] for m in opened.values() if "task" in m), None)
    return run.finish(stage.kind, task, {**fields, "counts": run.counts},
                      {name: input_record(folder, out) for name, folder in folders.items()}, config)


def _splits_done(out: Path, key: str) -> dict[str, Any]:
    """The splits a killed run of this stage (the same ``key``) finished, or none."""
    path = out / SPLITS_DONE
    try:
        done = read_json(path) if path.is_file() else {}
    except (OSError, ValueError):
        done = {}
    if not isinstance(done, dict) or done.get("key") != key or not isinstance(done.get("splits"), dict):
        return {"key": key, "splits": {}}
    return done


def _kept(record: Any, path: Path) -> dict[str, Any] | None:
    """A split's record in ``.splits_done.json`` when it is whole and its file is the one it recorded (a record
    edited by hand into anything else counts as no record: the split is written again)."""
    try:
        if path.is_file() and file_record(path) == record["file"]:
            return {"count": int(record["count"]), "cost": dict(record["cost"]),
                    "tally": {str(k): int(v) for k, v in dict(record.get("tally") or {}).items()}}
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    return None


__all__ = ["SPLITS_DONE", "StageRun", "input_record", "run_stage"]
