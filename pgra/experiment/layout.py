"""Where an experiment keeps its files, and the keys that decide whether a stage or a cell is reused.

Layout of ``out``::

    <out>/<task>/candidates/            first-stage top-k of every split (shared by all methods and seeds)
    <out>/<task>/reranked/              the prompt-guided reranker's top-d (built when a method reads it)
    <out>/<task>/reranked-<reranker>/   another reranker's top-d (``fid_upr`` reads ``reranked-query_likelihood``)
    <out>/<task>/full_search/           the whole corpus's top-d under the prompt-guided embedding (``pgra_full``)
    <out>/<task>/<stage>/               a plug-in stage's folder (:mod:`pgra.stages`), when a method reads it
    <out>/<task>/<method>/seed-<n>/     one cell: the method's run, predictions_{dev,test}.jsonl, cell.json

A stage folder holds ``.stage_key`` (its key: the settings plus the keys of what it reads) and ``cost.json``; a cell
holds ``.cell_key`` from its start and ``cell.json`` (its completion mark, with the key) when it finished.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..stages import defining, key_of
from ..storage.artifacts import path_under, read_json, safe_name, write_json
from ..storage.provenance import CELL_FILE

CELL_KEY_FILE = ".cell_key"
STAGE_KEY_FILE = ".stage_key"
STAGE_COST_FILE = "cost.json"  # what building the stage spent (pgra.runtime.cost.metered), with its stage key
CELL_GLOB = f"*/*/seed-*/{CELL_FILE}"


@dataclass
class CellPlan:
    task: str
    method: str
    seed: int
    directory: Path
    key: str
    status: str  # done | resume | stale | todo
    seed_independent: bool = False  # the method's one cell of the task (at the grid's first seed)

    @property
    def label(self) -> str:
        """``<task>/<method>/seed-<n>`` (the task's name, also for a task given as a YAML file)."""
        return "/".join(self.directory.parts[-3:])


def cell_path(task: str, method: str, seed: int) -> Path:
    """``<task>/<method>/seed-<n>``, relative to the experiment folder: the one place a cell's folder is named
    (``task`` is the task's name; the task and the method become folder names, checked by
    :func:`pgra.storage.artifacts.safe_name`)."""
    return Path(safe_name(task, "tasks", what="task name"), safe_name(method, "methods", what="method name"),
                f"seed-{seed}")


def cell_folder(out: Path | str, task: str, method: str, seed: int) -> Path:
    """``<out>/<task>/<method>/seed-<n>`` (:func:`cell_path` under ``out``, proved to stay inside it)."""
    return path_under(out, *cell_path(task, method, seed).parts)


def finished_cells(out: Path) -> Iterator[Path]:
    """The ``cell.json`` of every finished cell under the experiment folder ``out``, in path order."""
    return iter(sorted(Path(out).glob(CELL_GLOB)))


def cell_status(directory: Path, key: str) -> str:
    """``done``, ``resume`` (started with this key), ``stale`` (another key, or files of unknown origin) or ``todo``."""
    cell = directory / CELL_FILE
    if cell.exists():
        record = read_json(cell)  # a cell.json that is no JSON object (edited by hand) is not this cell's
        return "done" if isinstance(record, dict) and record.get("key") == key else "stale"
    key_file = directory / CELL_KEY_FILE
    if key_file.exists():
        return "resume" if key_file.read_text().strip() == key else "stale"
    return "stale" if directory.exists() and any(directory.iterdir()) else "todo"


def mark_seed_independent(directory: Path) -> None:
    """Record ``seed_independent`` in a finished cell written before cells carried it (the report reads it)."""
    path = directory / CELL_FILE
    record = read_json(path)
    if "seed_independent" not in record:
        write_json(path, {**record, "seed_independent": True})


__all__ = ["CELL_FILE", "CELL_GLOB", "CELL_KEY_FILE", "CellPlan", "STAGE_COST_FILE", "STAGE_KEY_FILE", "cell_folder", "cell_path", "cell_status",
           "defining", "finished_cells", "key_of", "mark_seed_independent"]
