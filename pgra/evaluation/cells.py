"""The finished cells a report reads from one experiment folder or bundle, each checked against its own files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..experiment.layout import CELL_GLOB
from ..results.predictions import cell_task, checked_cell_results, inputs_fingerprint, read_cell
from ..storage.provenance import check_cell_data

# what a report writes beside the cells it reads (an experiment folder's, a bundle's or a merged report's)
REPORT_FILES = ("results.json", "results.md", "results.html", "results_data.js")


@dataclass
class CellResult:
    """One finished cell: its record, the metric value per split and its predictions on the reported split."""

    path: Path
    record: dict[str, Any]
    predictions: list[dict[str, Any]]

    @property
    def task(self) -> str:
        return self.record["task"]

    @property
    def method(self) -> str:
        return self.record["method"]

    @property
    def seed(self) -> int:
        return int(self.record["seed"])

    @property
    def seed_independent(self) -> bool:
        """The method's one run of the task (cells written before the flag existed: False)."""
        return bool(self.record.get("seed_independent", False))


def source_cells(directory: str | Path, split: str = "test", bundle: bool = False) -> list[CellResult]:
    """Every finished cell under ``directory`` with its predictions on ``split``, checked against its record."""
    directory = Path(directory)
    if not (paths := sorted(directory.glob(CELL_GLOB))):
        raise InputError(f"no finished cells ({CELL_GLOB}) under {directory}: run `pgra experiment` first",
                         path=directory)
    cells = []
    for path in paths:
        record = read_cell(path)  # a hand-edited cell.json (a string seed, a list): one error line naming it
        if split not in record["results"]:
            raise InputError(f"cell has no '{split}' results", path=path, field="results")
        results, lines = checked_cell_results(path, record, cell_task(record, str(path)))
        if not bundle:
            check_cell_data(path.parent, record)  # its data folder was not rebuilt since (by a later experiment)
        cells.append(CellResult(path, {**record, "results": results}, lines[split]))
    return cells


def drop_superseded(cells: list[CellResult]) -> tuple[list[CellResult], list[CellResult]]:
    """The cells kept and those left out: a seed-independent method's other seeds are older runs' copies."""
    keep: dict[tuple[str, str], CellResult] = {}
    for c in sorted(cells, key=lambda c: c.seed):
        if c.seed_independent:
            keep.setdefault((c.task, c.method), c)
    kept = [c for c in cells if (c.task, c.method) not in keep or keep[(c.task, c.method)] is c]
    return kept, [c for c in cells if c not in kept]


def check_shared_inputs(cells: list[CellResult], split: str) -> None:
    first: dict[str, tuple[str, CellResult]] = {}
    for cell in cells:
        fp = inputs_fingerprint(cell.predictions)
        if cell.task not in first:
            first[cell.task] = (fp, cell)
        elif first[cell.task][0] != fp:
            other = first[cell.task][1]
            raise InputError(
                f"{cell.path.parent} and {other.path.parent} evaluated different {split} inputs of task "
                f"{cell.task} ({len(cell.predictions)} vs {len(other.predictions)} inputs, or other ids, texts or "
                "labels); results on different inputs are never compared: re-run them on the same data",
                path=cell.path.parent / f"predictions_{split}.jsonl")


__all__ = ["REPORT_FILES", "CellResult", "check_shared_inputs", "drop_superseded", "source_cells"]
