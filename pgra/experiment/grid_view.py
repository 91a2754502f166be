"""What the cost estimates read of a grid, as a :class:`typing.Protocol`: :class:`GridView`.

:class:`~pgra.experiment.grid.Experiment` has it all. :mod:`.estimate` types its ``exp`` arguments with it, not with
the Experiment: the grid prices its own plan with the estimates (``describe``, and the jobs' cost order in
:mod:`.workers`), so the estimates import nothing of the grid back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from ..methods.base import Method
    from ..rerank.config import RerankConfig
    from ..retrieval.retrieve import RetrieveConfig
    from ..tasks.spec import TaskSpec
    from .config import ExperimentConfig
    from .layout import CellPlan


class GridView(Protocol):
    """A grid as the estimates read it (an :class:`~pgra.experiment.grid.Experiment`): its config, folder and tasks,
    its stages' folders, status and configs, its methods and its planned cells."""

    cfg: ExperimentConfig
    out: Path
    tasks: dict[str, TaskSpec]

    def stage_dir(self, task: str, stage: str) -> Path: ...

    def stage_done(self, task: str, stage: str) -> bool: ...

    def stages_needed(self) -> list[str]: ...

    def retrieve_config(self, task: str) -> RetrieveConfig: ...

    def rerank_config(self, task: str, reranker: str = ...) -> RerankConfig: ...

    def method(self, task: str, method: str) -> Method: ...

    def plan(self, tasks: list[str] | None = None) -> list[CellPlan]: ...


__all__ = ["GridView"]
