"""The analyses that need only results (``reads="results"``), run on bundles alone or merged (``pgra report ...
--analyses``): :class:`ResultsRuns` gives them the view an experiment gives."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.config import from_dict, to_dict
from ..core.errors import InputError
from ..evaluation.bundle import ANALYSIS_DIR, cell_ident, is_bundle
from ..evaluation.cells import drop_superseded
from ..evaluation.merge import merged_cells, out_is_source
from ..evaluation.report import check_report_files
from ..results.predictions import cell_task
from ..storage.artifacts import MANIFEST, read_json_object
from ..storage.ownership import check_folders, claim_folder
from .base import ANALYSES, Analysis
from .config import analysis_config
from .inputs import ExperimentRuns
from .run import write_analyses


@dataclass
class ResultsGrid:
    """The merged cells' grid: tasks and methods in their configs' order, seeds, and the ``analysis`` section."""

    tasks: list[str]
    methods: list[str]
    seeds: list[int]
    analysis: Any


def results_analyses() -> list[str]:
    """The registered analyses that run on results alone (bundles, alone or merged), in their order."""
    return [name for name in ANALYSES.names() if ANALYSES[name].reads == "results"]


def chosen_analyses(names: Sequence[str]) -> list[Analysis]:
    """The analyses ``names`` in registration order; an unknown one, or one needing an experiment, is refused."""
    for name in names:
        ANALYSES.part(name, field="analyses")  # an unknown name: the registry's error, listing the known ones
    need = [n for n in ANALYSES.names() if n in names and ANALYSES[n].reads != "results"]
    if need:
        raise InputError(f"{', '.join(need)} need{'s' if len(need) == 1 else ''} the experiment folder (its stages' "
                         "data, its models or runs of their own), which a bundle does not hold: "
                         "run `pgra analyze --config CONFIG` where the experiment ran; on results alone: "
                         f"{', '.join(results_analyses())}", field="analyses")
    return [ANALYSES[n] for n in ANALYSES.names() if n in names]


@dataclass
class ResultsRuns(ExperimentRuns):
    """Cells merged from experiment folders and bundles, seen as the analyses see an experiment (no stage data)."""

    cells: dict[tuple[str, str, int], Any] = field(default_factory=dict, repr=False)
    sources: list[Path] = field(default_factory=list)
    folder: Path = Path(".")
    grid: ResultsGrid | None = None
    _specs: dict[str, Any] = field(default_factory=dict, repr=False)  # task -> its TaskSpec, parsed once

    @classmethod
    def merged(cls, sources: Sequence[str | Path], out: str | Path, analyses: Sequence[str],
               split: str = "test") -> ResultsRuns:
        """The cells of ``sources`` merged (as ``pgra report`` merges them), analysed into ``<out>/analysis/``."""
        found, _ = merged_cells(sources, split)
        found, _ = drop_superseded(found)  # as the report: a seed-independent method's one run, never its copies
        cells = {(c.task, c.method, c.seed): c for c in found}
        tasks, methods = _ordered(found, "tasks"), _ordered(found, "methods")
        section = _recorded_options(found, list(analyses), split)
        grid = ResultsGrid(tasks, methods, sorted({c.seed for c in found}), section)
        return cls(experiment=_NO_EXPERIMENT, split=split, cells=cells,  # type: ignore[arg-type]
                   sources=[Path(s) for s in sources], folder=Path(out), grid=grid)

    @property
    def cfg(self) -> ResultsGrid:
        assert self.grid is not None
        return self.grid

    @property
    def root(self) -> Path:
        return self.folder

    @property
    def reads_model_folders(self) -> bool:
        return False  # results alone: a work record prices itself (its ``parameters``) or not at all

    def task_spec(self, task: str):
        """The task's spec as its cells recorded it (the registry's where a cell predates that record)."""
        if task not in self._specs:
            record = next(c.record for (t, _, _), c in self.cells.items() if t == task)
            self._specs[task] = cell_task(record, str(record.get("task")))
        return self._specs[task]

    def n_passages(self, task: str, method: str) -> int:
        """The evidence sentences the method's reader read: the most any of its predictions names."""
        return max((len(line.get("evidence") or []) for (t, m, _), c in self.cells.items()
                    if (t, m) == (task, method) for line in c.predictions), default=0)

    def cell(self, task: str, method: str, seed: int) -> Path | None:
        found = self.cells.get((task, method, seed))
        return found.path.parent if found is not None else None

    def finished_seeds(self, task: str, method: str) -> list[int]:
        return sorted(s for (t, m, s) in self.cells if (t, m) == (task, method))

    def cell_idents(self) -> list[str]:
        return sorted(cell_ident(c.record) for c in self.cells.values())

    def missing_cell(self, task: str, method: str, seed: int) -> str:
        return f"the cell {task}/{method}/seed-{seed}, which none of {', '.join(map(str, self.sources))} holds"

    def predictions(self, task: str, method: str, seed: int) -> list[dict[str, Any]]:
        self.require_cell(task, method, seed, f"the analysis of {method}")
        return self.cells[(task, method, seed)].predictions

    def stage_dir(self, task: str, stage: str) -> Path:
        """The first source holding the stage's records (a bundle keeps its key, cost and manifest)."""
        for source in self.sources:
            if (source / task / stage).is_dir():
                return source / task / stage
        return self.sources[0] / task / stage

    def stage_records(self, task: str, stage: str, split: str | None = None) -> dict[str, dict[str, Any]]:
        raise InputError(f"the records of stage {task}/{stage} are the stage's data, which a bundle does not keep: "
                         "this analysis needs the experiment folder (`pgra analyze --config CONFIG`)", field="analyses")

    def reranked_stages(self) -> list[str]:
        return []

    def seed_independent(self, task: str, method: str) -> bool:
        return any(c.seed_independent for (t, m, _), c in self.cells.items() if (t, m) == (task, method))

    def settings(self, task: str, method: str | None = None):
        raise InputError("an experiment's settings are read from its config, which results alone do not give: this "
                         "analysis needs the experiment folder (`pgra analyze --config CONFIG`)", field="analyses")


class _NoExperiment:
    """What :class:`ResultsRuns` has instead of an experiment: reaching for one is one error line."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and friends probe for optional hooks
            raise AttributeError(name)
        raise InputError(f"this analysis reads the experiment ({name}), which results alone do not give: mark it "
                         "reads=\"experiment\" and run it with `pgra analyze --config CONFIG`", field="analyses")


_NO_EXPERIMENT = _NoExperiment()


def _recorded_options(cells: list[Any], analyses: list[str], split: str) -> Any:
    """The ``analysis`` section the cells' runs recorded (all must agree), as this pgra reads it; else defaults."""
    section = analysis_config()
    factories = {f.name: f.default_factory for f in dataclasses.fields(section)}
    default = to_dict(section())
    chosen: dict[str, Any] = {}
    first: dict[str, Any] = {}
    for cell in cells:
        recorded = (cell.record.get("config") or {}).get("analysis")
        for name in analyses:
            if name not in default or not isinstance(recorded, dict) or name not in recorded:
                continue  # an analysis without options, or a run that did not record them
            value, blank = recorded[name], factories[name]()  # type: ignore[misc]
            if dataclasses.is_dataclass(blank):  # read as this pgra reads it: a field added since takes its default
                value = to_dict(from_dict(type(blank), value, source=f"{cell.path}: config.analysis.{name}"))
            if name in chosen and chosen[name] != value:
                raise InputError(f"the cells record other options of analysis {name}: {chosen[name]} in "
                                 f"{first[name].path.parent}, {value} in {cell.path.parent}; analyse them apart",
                                 field=f"analysis.{name}")
            chosen.setdefault(name, value)
            first.setdefault(name, cell)
    return from_dict(section, {**default, **chosen, "analyses": analyses, "split": split},
                     source="the cells' recorded analysis options")


def _ordered(cells: list[Any], name: str) -> list[str]:
    """The cells' tasks or methods (``name``) in the order their runs' configs list them, then any other."""
    have = {c.task if name == "tasks" else c.method for c in cells}
    configs = [(c.record.get("config") or {}).get(name) for c in cells]
    listed = [str(i) for items in configs if isinstance(items, list) for i in items if i in have]
    return list(dict.fromkeys(listed + sorted(have - set(listed))))


def _check_out(sources: Sequence[str | Path], out: str | Path) -> bool:
    """Whether ``out`` is the one source; refused: one of several, an experiment, a bundle holding analyses."""
    target = Path(out)
    if not out_is_source(sources, out):
        return False
    if not is_bundle(target):
        raise InputError(f"{target} is not a results bundle: an experiment folder's own analyses are `pgra analyze "
                         "--config CONFIG`'s (which reads its stages too); give --out DIR for the analyses of its "
                         "results alone", field="out")
    files = read_json_object(target / MANIFEST).get("files")  # checked whole when the bundle is read, next
    files = files if isinstance(files, dict) else {}
    if any(str(name).startswith(f"{ANALYSIS_DIR}/") for name in files):
        raise InputError(f"{target} holds the analyses its experiment's `pgra analyze` wrote ({ANALYSIS_DIR}/, "
                         "checksummed with the bundle): give --out DIR for the analyses of its results",
                         field="out")
    return True


def analyze_results(sources: Sequence[str | Path], out: str | Path, analyses: Sequence[str],
                    split: str = "test") -> ResultsRuns:
    """Run the results-only ``analyses`` on ``sources`` merged into ``<out>/analysis/``, as ``pgra analyze`` does."""
    chosen = chosen_analyses(analyses)
    own = _check_out(sources, out)
    runs = ResultsRuns.merged(sources, out, [a.name for a in chosen], split)  # a bundle is checked whole here
    check_folders(out, [ANALYSIS_DIR])  # a link (or a file) there would take the analyses' writes elsewhere
    if Path(out).exists():  # the report that will link the analyses could not be written: refuse before them
        check_report_files(out, "directory" if own else "out")
    results = {a.name: a.compute(runs, None) for a in chosen}
    if not own:
        claim_folder(out, "report")  # a merged report's folder, as pgra report claims it
    claim_folder(runs.out, "analysis")
    write_analyses(runs, results, {"sources": [str(s) for s in sources], "analyses": [a.name for a in chosen],
                                   "split": split}, keep_previous=False)
    return runs


__all__ = ["ResultsGrid", "ResultsRuns", "analyze_results", "chosen_analyses", "results_analyses"]
