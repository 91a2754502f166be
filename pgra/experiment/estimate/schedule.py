"""One :class:`Estimate` per stage or cell, and their wall-clock on the workers (:meth:`Plan.wallclock`): the
stages one after another, each sharded over the workers (or GPUs), then the cells side by side, costliest first
(:func:`plan_wallclock`), or under ``parallel: ddp`` one after another, their training split among the GPUs."""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...runtime.cost import Priced
from ...runtime.sizes import format_seconds

if TYPE_CHECKING:
    from .disk import DiskPlan


@dataclass
class Estimate(Priced):
    """The expected cost of one stage or cell (:class:`~pgra.runtime.cost.Priced`: ``seconds``, None: unknown, on
    ``device``, where the number came from, ...), and its ``label``."""

    seconds: float | None  # type: ignore[assignment]
    label: str = ""

    @classmethod
    def at(cls, label: str, seconds: float | None, source: str, device: str = "cpu", **rest: Any) -> Estimate:
        """The estimate of ``label``."""
        return cls(seconds, source, device, label=label, **rest)

    @classmethod
    def of(cls, label: str, priced: Priced) -> Estimate:
        """A part's priced cost as the estimate of ``label``."""
        return cls(**{f.name: getattr(priced, f.name) for f in dataclasses.fields(Priced)}, label=label)

    def text(self) -> str:
        if self.seconds is None:
            return f"cost unknown ({self.source})"
        if self.source == "done":
            return "done: nothing to spend"
        return f"~{format_seconds(self.seconds)} {self.device} ({self.source})"


def lpt_order(costs: list[float]) -> list[int]:
    """The indices of ``costs``, costliest first (ties in their given order): the order a scheduler hands out
    jobs in."""
    return sorted(range(len(costs)), key=lambda i: -costs[i])


def lpt_assign(costs: list[float], workers: int) -> list[int]:
    """The worker (0..workers-1) each job runs on: jobs costliest first, each to the worker that frees first
    (the lowest-numbered among equals). Workers beyond the jobs' count never get one: only as many are kept as
    there are jobs (a billion workers cost no memory)."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    loads = [(0.0, w) for w in range(min(workers, len(costs)))]
    assigned = [0] * len(costs)
    for i in lpt_order(costs):
        load, w = heapq.heappop(loads)
        assigned[i] = w
        heapq.heappush(loads, (load + costs[i], w))
    return assigned


def plan_wallclock(costs: list[float], workers: int) -> float:
    """Wall-clock of ``costs`` (seconds of independent jobs) on ``workers`` workers under longest-processing-time
    greedy scheduling (costliest first, each to the least loaded worker): the largest worker's load."""
    loads = [0.0] * min(max(workers, 1), len(costs))
    for i, w in enumerate(lpt_assign(costs, workers)):
        loads[w] += costs[i]
    return max(loads) if costs else 0.0


@dataclass
class Plan:
    """The estimates of a grid and its wall-clock on ``workers`` processes, ``cells_per_gpu`` of them sharing each
    GPU (the config's ``cells_per_gpu``: ``workers`` is then GPUs x that); ``note``: which fits priced it and why."""

    stages: list[Estimate]
    cells: list[Estimate]
    workers: int
    cells_per_gpu: int = 1
    note: str = ""
    disk: DiskPlan | None = None  # what the grid holds on disk (plan_disk)
    command_s: float = 0.0  # the command's own seconds besides its stages and cells (imports, checks, the report)
    # the workers are separate one-process jobs (--launcher local | slurm): a stage is built by the one job that
    # claims it, not sharded; the tasks' stages run side by side
    separate_jobs: bool = False
    # parallel: ddp: the cells run one after another, each by all the workers (a reader's split among them)
    ddp: bool = False

    @property
    def known(self) -> list[Estimate]:
        return [e for e in self.stages + self.cells if e.seconds is not None]

    def hours(self, device: str) -> float:
        return sum(e.seconds for e in self.known if e.device == device) / 3600  # type: ignore[misc]

    def shared_seconds(self, e: Estimate) -> float:
        """A cell's seconds when ``cells_per_gpu`` cells share its GPU. Not measured (no bench run shared a GPU): the
        planner's assumption is that the device runs one cell's work at a time while the others' host work (the
        loop's collation and loss reads, loads, checkpoint writes, the process start) overlaps it, so a cell takes
        the longer of its own time and ``cells_per_gpu`` x its device time (all of its time where that is
        unknown: no gain)."""
        seconds = e.seconds or 0.0
        if self.cells_per_gpu <= 1:
            return seconds
        device = seconds if e.device_s is None else e.device_s
        return max(seconds, self.cells_per_gpu * device)

    @property
    def gpus(self) -> int:
        """The devices under the workers: ``workers`` over ``cells_per_gpu`` (at least 1)."""
        return max(self.workers // max(self.cells_per_gpu, 1), 1)

    def wallclock(self) -> tuple[float, float]:
        """(stages, cells) seconds on the workers: stages one after another, each sharded over the GPUs (with
        ``separate_jobs``: each task's stages one after another in the job that claims them, the tasks side by side
        on the GPUs); cells side by side, one per worker (``cells_per_gpu`` sharing a GPU), costliest first, or
        with ``ddp`` one after another, the seconds the ranks split (:attr:`Estimate.split_s`: a reader's steps)
        divided among the GPUs as a stage is, the rest whole."""
        if self.separate_jobs:
            chains: dict[str, float] = {}
            for e in self.stages:  # labels are "<task>/<stage>"
                task = e.label.rsplit("/", 1)[0]
                chains[task] = chains.get(task, 0.0) + (e.seconds or 0.0)
            stages = plan_wallclock(list(chains.values()), self.gpus)
        else:
            stages = sum(e.seconds or 0.0 for e in self.stages) / self.gpus
        if self.ddp:
            split = [min(max(e.split_s, 0.0), e.seconds or 0.0) for e in self.cells]
            return stages, sum((e.seconds or 0.0) - s + s / self.gpus for e, s in zip(self.cells, split, strict=True))
        return stages, plan_wallclock([self.shared_seconds(e) for e in self.cells], self.workers)

    def summary(self) -> list[str]:
        stages, cells = self.wallclock()
        unknown = len(self.stages) + len(self.cells) - len(self.known)
        per_gpu = f", {self.cells_per_gpu} per GPU on {self.gpus}" if self.cells_per_gpu > 1 else ""
        lines = [f"fits: {self.note}"] if self.note else []
        lines += [f"expected cost: {format_seconds(sum(e.seconds for e in self.known))} of work "  # type: ignore[misc]
                  f"({self.hours('gpu'):.2f} GPU h, {self.hours('cpu'):.2f} CPU h)"]
        written = sum(e.written_bytes for e in self.cells)
        if written:
            lines.append(f"disk writes: the cells' checkpoints and best/ saves write at most {written / 1e12:.2f} TB "
                         f"(at the measured sizes); done, they keep {sum(e.kept_bytes for e in self.cells) / 1e9:.0f} "
                         "GB (best/; checkpoints deleted unless reader.keep_resume_state)")
        if self.cells_per_gpu > 1 and not self.ddp:
            lines.append(f"{self.cells_per_gpu} cells per GPU (assumed, not measured: each cell at the longer of its "
                         f"own time and {self.cells_per_gpu} x its device time)")
        own = f" + the command's own {format_seconds(self.command_s)}" if self.command_s else ""
        how = (f"each task's built by one job, the tasks side by side{', one a GPU' if self.cells_per_gpu > 1 else ''}"
               if self.separate_jobs else
               "each sharded over the GPUs, one rank a GPU" if self.cells_per_gpu > 1 else
               "each sharded over the workers")
        side = ("one after another (DDP): a reader's training split among the workers, the rest whole" if self.ddp else
                f"side by side{per_gpu}, costliest first")
        lines.append(f"wall-clock on {self.workers} worker(s): stages {format_seconds(stages)} ({how}) + cells {format_seconds(cells)} ({side}){own} = "
                     f"{format_seconds(stages + cells + self.command_s)}")
        if unknown:
            lines.append(f"  {unknown} stage(s)/cell(s) without an estimate, not counted")
        if self.disk is not None:
            lines += self.disk.lines()
        return lines

