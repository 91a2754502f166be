"""What the analyses read from a finished experiment: its cells, their predictions and the stage folders."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..data.interchange import read_records
from ..evaluation.bundle import ANALYSIS_DIR, cell_idents
from ..experiment import CELL_FILE, Experiment, cell_settings
from ..methods import get_method
from ..results.predictions import checked_cell_metric, read_predictions
from .config import as_analyze_config


@dataclass
class ExperimentRuns:
    """A finished (or partly finished) experiment seen by the analyses; ``split`` is the split they read."""

    experiment: Experiment
    split: str = "test"
    _records: dict[tuple[str, str], dict[str, dict[str, Any]]] = field(default_factory=dict, repr=False)
    _cfg: Any = field(default=None, repr=False)

    @property
    def cfg(self):
        """The experiment's config with its ``analysis`` section typed (:func:`~pgra.analysis.config.as_analyze_config`)."""
        if self._cfg is None:
            self._cfg = as_analyze_config(self.experiment.cfg)
        return self._cfg

    @property
    def root(self) -> Path:
        """The folder the analyses describe: the experiment's (a merged report's for :class:`ResultsRuns`)."""
        return self.experiment.out

    @property
    def out(self) -> Path:
        """``<experiment>/analysis``: where tables, figures and the analyses' own runs go."""
        return self.root / ANALYSIS_DIR

    @property
    def reads_model_folders(self) -> bool:
        """Whether the analyses may read the models' folders here (parameter counts); not on results alone."""
        return True

    def cell_idents(self) -> list[str]:
        """The finished cells the analyses read, recorded with their tables (a bundle leaves out stale ones)."""
        return cell_idents(self.root)

    def stage_dir(self, task: str, stage: str) -> Path:
        """The folder of a task's stage (``candidates``, ``reranked``, ...)."""
        return self.experiment.stage_dir(task, stage)

    def reranked_stages(self) -> list[str]:
        """The reranked stages whose records the analyses can read (``reranked``, ``reranked-<name>``)."""
        return self.experiment.reranked_stages()

    def seed_independent(self, task: str, method: str) -> bool:
        """Whether the method runs once per task (its seed changes nothing)."""
        return not self.experiment.method(task, method).depends_on_seed()

    def task_name(self, task: str) -> str:
        return self.task_spec(task).name

    def task_spec(self, task: str):
        return self.experiment.tasks[task]

    def methods(self, evidence: str | None = None) -> list[str]:
        """The experiment's methods (those whose evidence names ``evidence``: corpus | training | none)."""
        return [m for m in self.cfg.methods if evidence is None or get_method(m).evidence == evidence]

    def n_passages(self, task: str, method: str) -> int:
        """The evidence sentences (d) the method's reader reads for ``task``."""
        return self.experiment.method(task, method).n_passages()

    def cell(self, task: str, method: str, seed: int) -> Path | None:
        """The folder of a finished cell, or None."""
        directory = self.experiment.cell_dir(task, method, seed)
        return directory if (directory / CELL_FILE).exists() else None

    def finished_seeds(self, task: str, method: str) -> list[int]:
        """The method's planned seeds with a finished cell (a seed-independent method: only the first seed)."""
        return [s for s in self.experiment.seeds(task, method) if self.cell(task, method, s) is not None]

    def require_cell(self, task: str, method: str, seed: int, why: str) -> Path:
        if (directory := self.cell(task, method, seed)) is None:
            raise InputError(f"{why} needs {self.missing_cell(task, method, seed)}", field="methods")
        return directory

    def missing_cell(self, task: str, method: str, seed: int) -> str:
        """What to say of a cell the analyses need but the experiment has not finished."""
        return (f"the finished cell {self.experiment.cell_dir(task, method, seed)}: run `pgra experiment` with "
                f"method {method} and seed {seed} first")

    def predictions(self, task: str, method: str, seed: int) -> list[dict[str, Any]]:
        """The cell's predictions on the analysed split."""
        directory = self.require_cell(task, method, seed, f"the analysis of {method}")
        return read_predictions(directory / f"predictions_{self.split}.jsonl", self.task_spec(task))

    def metric_values(self, task: str, method: str) -> list[float]:
        """The method's metric on the analysed split, one value per finished seed."""
        return [checked_cell_metric(self.cell(task, method, s) / CELL_FILE, self.split, self.task_spec(task))
                for s in self.finished_seeds(task, method)]

    def records(self, task: str, folder: Path, split: str | None = None) -> dict[str, dict[str, Any]]:
        """A stage folder's records of a split by input id (read once)."""
        split = split or self.split
        key = (str(folder), split)
        if key not in self._records:
            path = folder / f"{split}.jsonl"
            self._records[key] = {str(r["id"]): r for r in read_records(path, labels=self.task_spec(task).labels)}
        return self._records[key]

    def stage_records(self, task: str, stage: str, split: str | None = None) -> dict[str, dict[str, Any]]:
        """Records of the experiment's ``candidates`` or ``reranked`` folder."""
        folder = self.stage_dir(task, stage)
        if not (folder / f"{split or self.split}.jsonl").exists():
            raise InputError(f"{folder} has no {split or self.split}.jsonl: run `pgra experiment` first", path=folder)
        return self.records(task, folder, split)

    def other_rerankers(self) -> list[tuple[str, str, str]]:
        """``(reranker, stage, method)`` of each reranked stage besides the prompt-guided one, in method order."""
        out: dict[str, tuple[str, str, str]] = {}
        for m in self.cfg.methods:  # from the methods alone: results without their experiment (a bundle) ask too
            cls = get_method(m)
            reranker = cls.reads_reranker()
            if reranker and cls.data != "reranked" and cls.data not in out:
                out[cls.data] = (reranker, cls.data, m)
        return list(out.values())

    def settings(self, task: str, method: str | None = None):
        """The experiment's settings for a task (and method), overrides merged."""
        return cell_settings(self.cfg, task, method)


__all__ = ["ANALYSIS_DIR", "ExperimentRuns"]
