"""The one runner of every stage: :func:`run_stage` locks a stage's folder and calls its
:meth:`~pgra.stages.Stage.build`, which writes through :class:`StageRun`: the folder opened, written split by split
(a killed run resumes), metered, and its manifest written last."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.config import to_dict
from ..core.errors import IncompleteArtifactError, InputError
from ..data.interchange import write_records
from ..lm.causal_lm import LMCost
from ..storage.artifacts import MANIFEST, file_record, read_json, sha256_text, write_json, write_manifest
from ..storage.provenance import folder_fingerprint, relative_path

SPLITS_DONE = ".splits_done.json"


def input_record(folder: Path, out: Path, **more: Any) -> dict[str, Any]:
    """An input folder's block in a stage's manifest: where it is, absolute and relative to ``out``, and its
    fingerprint (what replays and the provenance checks read), with ``more``."""
    return {"path": str(folder.resolve()), "relative": relative_path(folder, out),
            "fingerprint": folder_fingerprint(folder), **more}


class StageRun:
    """One stage folder being built by the processes of ``ctx``: opened (:meth:`begin`, resumable under a key),
    written split by split, metered (``cost``) and finished by its manifest, which records the ``task``, ``inputs``,
    ``config``, ``files`` and ``after`` that the runner or the stage's build set."""

    def __init__(self, out: str | Path, ctx: Any = None) -> None:
        self.out, self.ctx, self.counts, self.cost, self.key = Path(out), ctx, {}, LMCost(), None
        self._done: dict[str, Any] = {"key": None, "splits": {}}
        self.task = self.inputs = self.config = self.after = None
        self.files: Sequence[str] = ()

    def begin(self, key: Any = None) -> StageRun:
        """Open the folder: made, its manifest removed, and the splits a killed run with this ``key`` finished read
        (None: not resumed)."""
        self.key = None if key is None else sha256_text(json.dumps(key, sort_keys=True, default=str))[:20]
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / MANIFEST).unlink(missing_ok=True)
        self._done = _splits_done(self.out, self.key) if self.key is not None else {"key": None, "splits": {}}
        return self

    def split(self, name: str, make: Callable[[], Iterable[dict[str, Any]]],
              meter: Callable[[], LMCost] | None = None) -> int:
        """Write ``<name>.jsonl`` from ``make()`` (atomically), or keep it when a killed run with this key finished
        it; ``meter``: the stage's LM work so far (its split's share is recorded). Returns its record count."""
        path = self.out / f"{name}.jsonl"
        kept = _kept(self._done["splits"].get(name), path) if self.key is not None else None
        if kept is None:
            before = meter() if meter else LMCost()
            records = list(make())
            spent = meter() if meter else LMCost()
            kept = {"count": write_records(path, records),
                    "cost": LMCost(spent.calls - before.calls, spent.tokens - before.tokens).as_dict()}
            if self.key is not None:
                self._done["splits"][name] = {"file": file_record(path), **kept}
                write_json(self.out / SPLITS_DONE, self._done)
        self.counts[name] = kept["count"]
        self.cost += LMCost.from_dict(kept["cost"])
        return kept["count"]

    def finish(self, kind: str, fields: Mapping[str, Any]) -> Path:
        """Write the manifest, last: ``kind``, the task, the stage's ``fields``, ``counts``, its inputs' records, its
        config, the checksums of its splits' and other files, then ``after``; returns the folder."""
        task, config = self.task, self.config
        names = [f"{s}.jsonl" for s in self.counts] + list(self.files)
        write_manifest(self.out, {
            "kind": kind, "task": task if isinstance(task, dict) else to_dict(task), **fields, "counts": self.counts,
            **(self.inputs or {}),
            "config": config if isinstance(config, dict) else to_dict(config),
            "files": {n: file_record(self.out / n) for n in names}, **(self.after or {})})
        return self.out


def run_stage(stage: Any, config: Any, ctx: Any = None) -> Path:
    """Build ``stage`` into ``config.out`` under the folder's lock (:func:`pgra.storage.lock.holding_output`) and
    write its manifest from what its :meth:`~pgra.stages.Stage.build` returns. An ``every_rank`` stage builds in every
    process; any other on rank 0 alone, from the folders it reads (:func:`_opened`), while the other ranks return at
    once (the grid meets them after the stage)."""
    from ..runtime.distributed import init_distributed
    from ..storage.lock import holding_output

    ctx = ctx or init_distributed()
    with holding_output(config, stage.kind, holder=f"the {stage.family} stage"):
        run = StageRun(getattr(config, "out", "") or ".", ctx)
        run.config = config  # what the manifest records (a build may record it otherwise)
        if not (stage.every_rank or ctx.is_main):
            return run.out
        fields = stage.build(config, {} if stage.every_rank else _opened(stage, config, run), run)
        return run.out if fields is None or not ctx.is_main else run.finish(stage.kind, fields)


def _opened(stage: Any, config: Any, run: StageRun) -> dict[str, dict[str, Any]]:
    """The folders ``stage`` reads, opened by their stages, recorded in ``run`` with the first one's task; the folder
    begun, resumed under the config and the inputs' fingerprints."""
    from . import get_stage

    folders = {name: Path(getattr(config, name)) for name in stage.reads}
    opened = {name: get_stage(name, "reads").open(folder) for name, folder in folders.items()}
    run.task = next((m["task"] for m in opened.values() if "task" in m), None)
    if run.task is None:  # refused before any work: its manifest names the task every later stage reads
        raise InputError(f"the {stage.family} stage reads no folder that records a task (reads: "
                         f"{', '.join(stage.reads) or 'none'}): a stage built by the runner reads the candidates or "
                         "a stage after them", field="reads")
    run.inputs = {name: input_record(folder, run.out) for name, folder in folders.items()}
    run.begin({"config": to_dict(config), "inputs": {n: folder_fingerprint(f) for n, f in folders.items()}})
    return opened


def _splits_done(out: Path, key: str) -> dict[str, Any]:
    """The splits a killed run of this stage (the same ``key``) finished, or none."""
    try:
        done = read_json(out / SPLITS_DONE)
    except (OSError, IncompleteArtifactError):
        done = {}
    ok = isinstance(done, dict) and done.get("key") == key and isinstance(done.get("splits"), dict)
    return done if ok else {"key": key, "splits": {}}


def _kept(record: Any, path: Path) -> dict[str, Any] | None:
    """A split's record in ``.splits_done.json`` when it is whole and its file is the one it recorded (a record
    edited by hand into anything else counts as no record: the split is written again)."""
    try:
        if path.is_file() and file_record(path) == record["file"]:
            return {"count": int(record["count"]), "cost": dict(record["cost"])}
    except (KeyError, TypeError, ValueError):
        pass
    return None


__all__ = ["SPLITS_DONE", "StageRun", "input_record", "run_stage"]
