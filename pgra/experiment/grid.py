"""``pgra experiment``: the grid of tasks x methods x seeds, planned and run cell by cell (resumable).

A method whose predictions the seed cannot change under its settings (``Method.depends_on_seed``: the kNN vote,
in-context learning with KATE ...) has one cell per task, at the first of ``seeds``, marked
``"seed_independent": true`` in its ``cell.json``; the report shows its one value as deterministic and pairs it
with every seed of the method it is compared with.

The index (``index.out``) and the reranker's embedding cache (``rerank.cache_dir``) are shared across tasks
and experiments. A stage or cell is reused when it finished with the same settings and the same inputs
(its key, :mod:`pgra.experiment.layout`); a killed cell resumes (readers from their last checkpoint). A failing
cell is reported and the grid goes on; the run exits non-zero listing the failures.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.config import check_config
from ..core.errors import InputError
from ..core.registry import plug_in_key
from ..methods import METHODS, MethodInputs, get_method, get_stage
from ..stages import Stage, StageRequest
from ..storage.artifacts import MANIFEST, check_disjoint, path_under, read_json_object, safe_name
from ..tasks import get_task, task_content, task_names, task_paths
from .cell import check_stale_cell, run_cell
from .cell import say as _say
from .config import JOB_FIELDS, RUNTIME_FIELDS, ExperimentConfig, cell_settings
from .estimate import plan_costs
from .layout import (
    STAGE_KEY_FILE,
    CellPlan,
    cell_folder,
    cell_status,
    key_of,
)
from .reuse import finished_with, reuse_or_run

RERANKED, FULL_SEARCH = "reranked", "full_search"  # the prompt-guided reranker's stage; pgra_full's (the whole corpus)


class Experiment:
    """The grid described by an :class:`ExperimentConfig`: plan it, run it."""

    def __init__(self, cfg: ExperimentConfig, candidates_from: Experiment | None = None,
                 report_writer: Callable[[Path, str], None] | None = None) -> None:
        """``candidates_from``: another experiment whose candidates folders this one reads (an analysis's variant
        of the grid shares the first stage of the experiment it varies). ``report_writer(out, reference)``: what the
        job that finishes the grid last calls to write the report (the command's; the experiment layer never
        imports the evaluation layer above it)."""
        _check_grid(cfg)
        self._stages: dict[str, Stage] = {}
        self.cfg = cfg
        _check_stage_names(self.stages_needed(), cfg.methods)  # an unknown stage or a folder a method also names
        if not cfg.index.out:
            raise InputError("no index folder given (index.out)", field="index.out")
        self.out = Path(cfg.out)
        self.tasks = {t: get_task(t) for t in cfg.tasks}  # a task YAML is read once (its name checked: a folder)
        _check_task_names(self.tasks)
        data_dirs = {t: cell_settings(cfg, t).data_dir for t in cfg.tasks}
        check_disjoint({"out": cfg.out}, {"tasks": [p for t, spec in self.tasks.items()
                                                    for p in task_paths(spec, data_dirs[t])]})
        self.candidates_from = candidates_from
        self.report_writer = report_writer
        self._contents: dict[str, dict[str, Any]] = {}

    # ----- stages shared by the cells of a task -----
    def _task_name(self, task: str) -> str:
        return self.tasks[task].name

    def stage_dir(self, task: str, stage: str) -> Path:
        if stage == "candidates" and self.candidates_from is not None:
            return self.candidates_from.stage_dir(task, stage)
        return path_under(self.out, self._task_name(task), stage)

    def cell_dir(self, task: str, method: str, seed: int) -> Path:
        """``<out>/<task>/<method>/seed-<n>``."""
        return cell_folder(self.out, self._task_name(task), method, seed)

    def stage(self, name: str) -> Stage:
        """The stage whose folder is ``name`` (:func:`pgra.stages.get_stage`)."""
        if name not in self._stages:
            self._stages[name] = get_stage(name, "methods")
        return self._stages[name]

    def request(self, task: str, name: str, keys: dict[str, str] | None = None) -> StageRequest:
        """What the stage ``name`` of ``task`` is given: the task's settings, its folder, the folders of the stages
        it reads and, from ``keys`` (the task's stage keys so far), theirs."""
        stage, keys = self.stage(name), keys or {}
        return StageRequest(task=task, settings=cell_settings(self.cfg, task), folder=self.stage_dir(task, name),
                            inputs={r: self.stage_dir(task, r) for r in stage.reads},
                            keys={r: keys[r] for r in ("index", *stage.reads) if r in keys},
                            content=lambda: self.task_content(task))

    def stage_config(self, task: str, name: str) -> Any:
        """The config the stage ``name`` of ``task`` runs with."""
        return self.stage(name).config(self.request(task, name))

    def retrieve_config(self, task: str) -> Any:
        return self.stage_config(task, "candidates")

    def rerank_config(self, task: str, stage: str = RERANKED) -> Any:
        """The config of the reranked stage ``stage`` of ``task`` (``reranked``: the prompt-guided reranker's)."""
        return self.stage_config(task, stage)

    def task_content(self, task: str) -> dict[str, Any]:
        """What of ``task`` changes results (its spec and data files' checksums), read once per experiment."""
        if task not in self._contents:
            self._contents[task] = task_content(self.tasks[task], cell_settings(self.cfg, task).data_dir)
        return self._contents[task]

    def _index_key(self) -> str:
        manifest = Path(self.cfg.index.out) / MANIFEST
        return read_json_object(manifest).get("build_key", "unbuilt") if manifest.exists() else "unbuilt"

    def stage_keys(self, task: str) -> dict[str, str]:
        """The key of every stage of ``task`` the grid builds, and of ``reranked`` and ``full_search`` whether built
        or not (an analysis reads them), each from its settings and the keys of what it reads (``index``: the
        index's build key)."""
        keys = {"index": self._index_key()}
        for name in self._closure(["candidates", RERANKED, *self.stages_needed(), FULL_SEARCH]):
            stage = self.stage(name)
            request = self.request(task, name, keys)
            keys[name] = key_of({**stage.key_record(request, stage.config(request)), **plug_in_key(stage)})
        del keys["index"]
        return keys

    def stage_done(self, task: str, stage: str) -> bool:
        return finished_with(self.stage_dir(task, stage), STAGE_KEY_FILE, self.stage_keys(task)[stage])

    def method_stages(self) -> list[str]:
        """The stage each of the grid's methods reads (:attr:`pgra.methods.Method.data`), in method order."""
        return list(dict.fromkeys(get_method(m).data for m in self.cfg.methods))

    def reranked_stages(self) -> list[str]:
        """The reranked stages the grid builds (``reranked`` for the prompt-guided one, ``reranked-<name>``): those
        of a reranker."""
        return [s for s in self.stages_needed() if getattr(self.stage(s), "reranker", None)]

    def _closure(self, names: list[str]) -> list[str]:
        """``names`` and every stage they read, each after what it reads, in first-needed order."""
        order: list[str] = []

        def add(name: str, path: tuple[str, ...] = ()) -> None:
            if name in order:
                return
            if name in path:
                raise InputError(f"the stages {' -> '.join((*path, name))} read each other", field="methods")
            for read in self.stage(name).reads:
                add(read, (*path, name))
            order.append(name)

        for name in names:
            add(name)
        return order

    def stages_needed(self) -> list[str]:
        """The stages every task builds, derived from the methods: ``candidates``, the stage each method reads
        (a reranker's ``reranked``/``reranked-<name>``, ``full_search``, a plug-in's) and every stage those read,
        each after what it reads. ``full_search`` comes after the reranked stages (the prompt-guided one runs the
        corpus pass it then reads, as the estimates assume)."""
        return self._closure(["candidates", *sorted(self.method_stages(), key=lambda name: name == FULL_SEARCH)])

    def build_stage(self, task: str, stage: str, ctx) -> None:
        """Run one stage of ``task`` (every rank of ``ctx`` together: one per GPU works, the ranks sharing its GPU
        wait, :func:`pgra.runtime.distributed.stage_context`), recording its cost and key
        (:func:`~pgra.experiment.reuse.reuse_or_run`: reused when it finished with the same key)."""
        from ..runtime.distributed import stage_context

        part = self.stage(stage)
        keys = self.stage_keys(task)
        cfg = part.config(self.request(task, stage, keys))
        _say(ctx, f"[{self._task_name(task)}] {stage}: running")
        work = stage_context(ctx)
        if work is not None:
            reuse_or_run(self.stage_dir(task, stage), STAGE_KEY_FILE, keys[stage], lambda: part.run(cfg, work), work)
        if work is not ctx:
            ctx.barrier()

    # ----- cells -----
    def method(self, task: str, method: str):
        settings = cell_settings(self.cfg, task, method)
        cls = get_method(method)
        folders = {name: self.stage_dir(task, name) for name in self.stages_needed()}
        return cls(MethodInputs(self.tasks[task], folders["candidates"], settings, folders))

    def seeds(self, task: str, method: str) -> list[int]:
        """The seeds ``method`` runs at on ``task``: every seed of the grid, or only the first when the seed cannot
        change its predictions (further seeds would copy the same run)."""
        return self._seeds(self.method(task, method))

    def _seeds(self, method) -> list[int]:
        return list(self.cfg.seeds) if method.depends_on_seed() else list(self.cfg.seeds[:1])

    def plan(self, tasks: list[str] | None = None) -> list[CellPlan]:
        """Every cell of the grid (or of ``tasks``) with its key and status (done, resume, stale or todo). A
        seed-independent method has one cell per task, at the first seed; its cells at other seeds (left by an
        older run) are not planned, nor touched."""
        cells = []
        for task in tasks or self.cfg.tasks:
            keys = self.stage_keys(task)
            for name in self.cfg.methods:
                method = self.method(task, name)
                upstream = keys[method.data]
                independent = not method.depends_on_seed()
                for seed in self._seeds(method):
                    directory = self.cell_dir(task, name, seed)
                    key = key_of({"method": name, "seed": seed, "settings": method.settings(), "upstream": upstream,
                                  **plug_in_key(method)})
                    cells.append(CellPlan(task, name, seed, directory, key, cell_status(directory, key), independent))
        return cells

    def run(self, ctx=None) -> list[CellPlan]:
        """Run this job's share of the grid (claiming stages and cells, so that other jobs over the same folder
        share it: :mod:`pgra.experiment.workers`); returns the cells it saw fail (also listed on stderr). The job
        that finishes last writes the report with ``report_writer`` when one is given (the command's). Refused (an
        InputError naming the setting, nothing written) while a live job runs the folder with other settings
        (:meth:`sharing`)."""
        from ..runtime.distributed import init_distributed

        ctx = ctx or init_distributed()
        if self.cfg.dry_run:
            if ctx.is_main:
                print(self.describe())
            return []
        return run_grids([self], ctx)

    def shared_settings(self) -> dict[str, Any]:
        """The settings every job sharing this experiment's folder must agree on: all that enter a stage's or a
        cell's key (less the cosmetic ones, how the grid is run and what each job may choose:
        :data:`~pgra.experiment.config.JOB_FIELDS`)."""
        from ..core.config import recorded_settings

        return {k: v for k, v in recorded_settings(self.cfg, cosmetic=False).items()
                if k not in RUNTIME_FIELDS and k not in JOB_FIELDS}

    def check_sharing(self) -> None:
        """Refuse (an InputError naming the setting) when a live job on this folder runs other settings
        (:func:`~pgra.experiment.claims.check_settings`); writes nothing."""
        from .claims import check_settings

        check_settings(self.out, self.shared_settings(), self.cfg.claim_stale_after_s)

    @contextlib.contextmanager
    def sharing(self, ctx) -> Iterator[None]:
        """This job registered in its folder for the block (the main process of a launch registers for all its
        ranks, and all of them refuse together: :func:`~pgra.experiment.claims.shared_folder`)."""
        from ..core.errors import PgraError
        from ..runtime.distributed import main_computes
        from .claims import shared_folder

        with contextlib.ExitStack() as stack:
            def register() -> str:
                try:
                    stack.enter_context(shared_folder(self.out, self.shared_settings(),
                                                      self.cfg.claim_stale_after_s))
                except PgraError as e:
                    if ctx.world_size == 1:
                        raise
                    return str(e)
                return ""

            refused = main_computes(ctx, register)
            if refused:
                raise InputError(refused)
            yield

    def check_ownership(self) -> None:
        """Before anything runs: refuse (an InputError naming the files, nothing changed) a stale cell whose folder
        holds files pgra did not write. (The command checks the report files it will replace:
        :func:`pgra.cli.experiment.run_and_report`.)"""
        for cell in self.plan():
            if cell.status == "stale":
                check_stale_cell(cell)

    def run_cell(self, cell: CellPlan, ctx) -> dict[str, Any]:
        """Fit the cell's method, predict dev and test, and write ``cell.json`` (the cell's completion mark)."""
        return run_cell(cell, lambda: self.method(cell.task, cell.method), ctx, self.cfg.log_with)

    def describe(self, workers: int | None = None) -> str:
        """The plan as text: stages and cells with their status and expected cost (:mod:`.estimate`: where each
        number came from), and the wall-clock on ``workers`` (default: the process count)."""
        lines = [f"experiment {self.out}: {len(self.cfg.tasks)} task(s) x {len(self.cfg.methods)} method(s) x "
                 f"{len(self.cfg.seeds)} seed(s)"]
        index_done = (Path(self.cfg.index.out) / MANIFEST).exists()
        lines.append(f"  index {self.cfg.index.out}: {'built (checked when run)' if index_done else 'to build'}")
        cells = self.plan()
        costs = plan_costs(self, cells, workers)
        cost = {e.label: e for e in costs.stages + costs.cells}
        for task in self.cfg.tasks:
            stages = self.stages_needed()
            lines.append(f"  {task}: " + ", ".join(f"{s} {'done' if self.stage_done(task, s) else 'to run'}"
                                                   for s in stages))
            for s in stages:
                lines.append(f"    {s:<24} {cost[f'{self._task_name(task)}/{s}'].text()}")
            for c in (c for c in cells if c.task == task):
                once = "  (seed-independent: one run)" if c.seed_independent else ""
                lines.append(f"    {c.method:<14} seed {c.seed:<4} {c.status:<7} {c.directory}{once}")
                lines.append(f"      {cost[c.label].text()}")
        counts = {s: sum(c.status == s for c in cells) for s in ("done", "resume", "stale", "todo")}
        lines.append("cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        return "\n".join(lines + costs.summary())


def run_grids(experiments: list[Experiment], ctx=None) -> list[CellPlan]:
    """Run several grids as one job, as :meth:`Experiment.run` runs one: each grid's index and stages in turn, then
    all their cells as one pool (:func:`~pgra.experiment.workers.run_pooled`: under ``parallel: cells`` every rank
    claims from all the grids, so grids of one cell each, such as an analysis's variants, run side by side). Every
    grid registers in its folder and is checked before anything runs (refused with an InputError as
    :meth:`Experiment.run` refuses); returns the cells this job saw fail, those of every grid."""
    from ..runtime.distributed import init_distributed
    from .workers import GridRun, run_pooled

    ctx = ctx or init_distributed()
    with contextlib.ExitStack() as stack:
        for exp in experiments:
            stack.enter_context(exp.sharing(ctx))
        for exp in experiments:
            exp.check_ownership()
        return run_pooled([GridRun(exp, ctx) for exp in experiments])


def _check_grid(cfg: ExperimentConfig) -> None:
    """The grid's own fields: a folder, tasks, methods and seeds, the overrides' names, the rerankers' choice."""
    check_config(cfg)
    if not cfg.out:
        raise InputError("no experiment folder given (--out)", field="out")
    for name in ("tasks", "methods", "seeds"):
        if not getattr(cfg, name):
            raise InputError(f"no {name} given", field=name)
    for m in cfg.methods:
        get_method(m)
    # overrides of known tasks or methods outside the grid are unused (a base config for eight tasks run on
    # one); a name that is neither is a typo
    unknown = [t for t in cfg.task_overrides if t not in cfg.tasks and t not in task_names()]
    if unknown:
        raise InputError(f"task_overrides names unknown tasks: {unknown} (tasks: {', '.join(task_names())})",
                         field="task_overrides")
    unknown = [m for m in cfg.method_overrides if m not in METHODS]
    if unknown:
        raise InputError(f"method_overrides names unknown methods: {unknown} (methods: {', '.join(METHODS)})",
                         field="method_overrides")
    _check_reranker_choice(cfg)


def _check_reranker_choice(cfg: ExperimentConfig) -> None:
    """A grid chooses its rerankers through its methods (``pgra``: the prompt-guided one's top d; ``fid_<r>``:
    reranker r's, each its own stage), so ``rerank.reranker`` (or a task's override of it) naming another reranker
    would be replaced unseen: refused, naming the method that reads that reranker."""
    for task in cfg.tasks:
        rerank = cell_settings(cfg, task).rerank  # (an unknown name was refused reading it, with the choices)
        chosen = rerank.reranker
        if chosen == next(f.default for f in dataclasses.fields(rerank) if f.name == "reranker"):
            continue
        readers = [name for name in METHODS.names() if METHODS[name].reads_reranker() == chosen]
        field = f"task_overrides.{task}.rerank.reranker" if (cfg.task_overrides.get(task) or {}).get(
            "rerank", {}).get("reranker") else "rerank.reranker"
        raise InputError(f"a grid's methods choose its rerankers (pgra reads the prompt-guided reranker's top d, "
                         f"{' / '.join(readers) or 'fid_' + chosen} reads {chosen}'s): remove rerank.reranker="
                         f"{chosen} and add that method to methods", field=field)


def _check_stage_names(stages: list[str], methods: list[str]) -> None:
    """A stage's name is its folder beside the methods' folders in every task: a name that cannot be a folder, or
    that a method of the grid also has, is refused (``index`` is the index's key among the stages' keys)."""
    for name in stages:
        safe_name(name, "methods", what="stage name")
        if name in methods or name == "index":
            raise InputError(f"the stage '{name}' would share its folder (or key) with "
                             f"{'the method of that name' if name in methods else 'the index'}: rename the stage",
                             field="methods")


def _check_task_names(tasks: dict[str, Any]) -> None:
    """Two tasks of a grid may not share a name: the name is the task's folder under ``out``."""
    seen: dict[str, str] = {}
    for given, spec in tasks.items():
        if spec.name in seen:
            raise InputError(f"tasks '{seen[spec.name]}' and '{given}' are both named '{spec.name}' (a task's name is "
                             "its folder in the experiment): give one of them another name", field="tasks")
        seen[spec.name] = given


__all__ = ["Experiment", "run_grids"]
