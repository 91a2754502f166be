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
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..artifacts import (
    MANIFEST,
    check_disjoint,
    path_under,
    read_json_object,
    sha256_file,
)
from ..config import check_config
from ..errors import InputError
from ..methods import MethodInputs, get_method
from ..rerank.base import DEFAULT, reranker_class
from ..rerank.config import RerankConfig
from ..retrieval.retrieve import RetrieveConfig
from .cell import check_stale_cell, run_cell
from .cell import say as _say
from .config import JOB_FIELDS, RUNTIME_FIELDS, ExperimentConfig, cell_settings
from .estimate import plan_costs
from .layout import (
    STAGE_KEY_FILE,
    CellPlan,
    cell_folder,
    cell_status,
    defining,
    key_of,
    reranked_stage,
)
from .reuse import finished_with, reuse_or_run

FULL_SEARCH = "full_search"  # pgra_full's stage: each input's top d of the whole corpus (pgra.rerank.corpus_pass)


class Experiment:
    """The grid described by an :class:`ExperimentConfig`: plan it, run it."""

    def __init__(self, cfg: ExperimentConfig, candidates_from: Experiment | None = None,
                 report_writer: Callable[[Path, str], None] | None = None) -> None:
        """``candidates_from``: another experiment whose candidates folders this one reads (an analysis's variant
        of the grid shares the first stage of the experiment it varies). ``report_writer(out, reference)``: what the
        job that finishes the grid last calls to write the report (the command's; the experiment layer never
        imports the evaluation layer above it)."""
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
        from ..choices import task_names
        from ..methods import METHODS

        unknown = [t for t in cfg.task_overrides if t not in cfg.tasks and t not in task_names()]
        if unknown:
            raise InputError(f"task_overrides names unknown tasks: {unknown} (tasks: {', '.join(task_names())})",
                             field="task_overrides")
        unknown = [m for m in cfg.method_overrides if m not in METHODS]
        if unknown:
            raise InputError(f"method_overrides names unknown methods: {unknown} (methods: {', '.join(METHODS)})",
                             field="method_overrides")
        _check_reranker_choice(cfg)
        if not cfg.index.out:
            raise InputError("no index folder given (index.out)", field="index.out")
        from ..tasks import get_task

        self.cfg = cfg
        self.out = Path(cfg.out)
        self.tasks = {t: get_task(t) for t in cfg.tasks}  # a task YAML is read once (its name checked: a folder)
        _check_task_names(self.tasks)
        from ..tasks import task_paths

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

    def retrieve_config(self, task: str) -> RetrieveConfig:
        s = cell_settings(self.cfg, task)
        # the index this config builds may run its encoder's code (this run's own config says so): so may retrieval
        trust = s.retrieve.trust_remote_code or s.index.trusts_remote_code()
        return replace(s.retrieve, task=task, index=s.index.out, out=str(self.stage_dir(task, "candidates")),
                       data_dir=s.data_dir, show_progress=s.show_progress, trust_remote_code=trust)

    def rerank_config(self, task: str, reranker: str = DEFAULT) -> RerankConfig:
        """The rerank stage of ``task`` with ``reranker`` (its folder ``reranked`` or ``reranked-<name>``)."""
        s = cell_settings(self.cfg, task)
        return replace(s.rerank, candidates=str(self.stage_dir(task, "candidates")),
                       out=str(self.stage_dir(task, reranked_stage(reranker))), task="", index=s.index.out,
                       show_progress=s.show_progress, reranker=reranker)

    def full_search_config(self, task: str) -> RerankConfig:
        """The rerank section's settings for ``pgra_full``'s search of the whole corpus (its own folder)."""
        return replace(self.rerank_config(task), out=str(self.stage_dir(task, FULL_SEARCH)))

    def task_content(self, task: str) -> dict[str, Any]:
        """What of ``task`` changes results (its spec and data files' checksums), read once per experiment."""
        if task not in self._contents:
            from ..tasks import task_content

            self._contents[task] = task_content(self.tasks[task], cell_settings(self.cfg, task).data_dir)
        return self._contents[task]

    def _index_key(self) -> str:
        manifest = Path(self.cfg.index.out) / MANIFEST
        return read_json_object(manifest).get("build_key", "unbuilt") if manifest.exists() else "unbuilt"

    def stage_keys(self, task: str) -> dict[str, str]:
        retrieve = self.retrieve_config(task)
        settings = defining(retrieve, ("out", "trust_remote_code", "exclude_ids"))
        if retrieve.exclude_ids:  # by content (a key without it, when unset, stays what it was before the option)
            path = Path(retrieve.exclude_ids)
            settings["exclude_ids"] = sha256_file(path) if path.is_file() else f"missing: {path}"
        # the task's content: its labels, label words, templates, metric and data files (every later stage and cell
        # reads them through the candidates, so their keys change with it)
        candidates = key_of({"retrieve": settings, "index": self._index_key(), "task": self.task_content(task)})
        keys = {"candidates": candidates}
        for name in dict.fromkeys([DEFAULT, *self.rerankers_needed()]):  # the prompt-guided key as it always was
            keys[reranked_stage(name)] = key_of({"rerank": reranker_class(name).key_settings(
                self.rerank_config(task, name)), "candidates": candidates})
        # pgra_full's search of the whole corpus: the prompt-guided reranker's settings but k, over the same
        # candidates' queries
        guided = {k: v for k, v in reranker_class(DEFAULT).key_settings(self.rerank_config(task)).items() if k != "k"}
        keys[FULL_SEARCH] = key_of({"full_search": guided, "candidates": candidates})
        return keys

    def stage_done(self, task: str, stage: str) -> bool:
        return finished_with(self.stage_dir(task, stage), STAGE_KEY_FILE, self.stage_keys(task)[stage])

    @property
    def needs_reranking(self) -> bool:
        """Whether a method of the grid reads a reranked folder (then every task builds the ones they read)."""
        return any(get_method(m).data == "reranked" for m in self.cfg.methods)

    def rerankers_needed(self) -> list[str]:
        """The rerankers whose top-d a method of the grid reads, in method order (each its own stage)."""
        return list(dict.fromkeys(get_method(m).reranker for m in self.cfg.methods
                                  if get_method(m).data == "reranked"))

    def reranked_stages(self) -> list[str]:
        """The reranked stages the grid builds (``reranked`` for the prompt-guided one, ``reranked-<name>``)."""
        return [reranked_stage(r) for r in self.rerankers_needed()]

    def stages_needed(self) -> list[str]:
        """The stages every task builds: ``candidates``, each reranked stage a method reads, and ``full_search``
        when a method reads it."""
        full = [FULL_SEARCH] if any(get_method(m).data == FULL_SEARCH for m in self.cfg.methods) else []
        return ["candidates", *self.reranked_stages(), *full]

    def build_stage(self, task: str, stage: str, ctx) -> None:
        """Run one stage of ``task`` (every rank of ``ctx`` together), recording its cost and key
        (:func:`~pgra.experiment.reuse.reuse_or_run`: reused when it finished with the same key)."""
        from ..rerank.full_search import full_search
        from ..rerank.reranker import rerank
        from ..retrieval.retrieve import retrieve

        if stage == "candidates":
            run, cfg = retrieve, self.retrieve_config(task)
        elif stage == FULL_SEARCH:
            run, cfg = full_search, self.full_search_config(task)
        else:
            run, cfg = rerank, self.rerank_config(task, {reranked_stage(r): r for r in self.rerankers_needed()}[stage])
        _say(ctx, f"[{self._task_name(task)}] {stage}: running")
        reuse_or_run(self.stage_dir(task, stage), STAGE_KEY_FILE, self.stage_keys(task)[stage],
                     lambda: run(cfg, ctx), ctx)

    # ----- cells -----
    def method(self, task: str, method: str):
        settings = cell_settings(self.cfg, task, method)
        cls = get_method(method)
        # a method that reads a reranked folder gets its reranker's; the others (as before) the prompt-guided one's
        reranker = cls.reranker if cls.data == "reranked" else DEFAULT
        built = cls.data == "reranked" or DEFAULT in self.rerankers_needed()
        inputs = MethodInputs(self.tasks[task], self.stage_dir(task, "candidates"),
                              self.stage_dir(task, reranked_stage(reranker)) if built else None, settings,
                              full_search=self.stage_dir(task, FULL_SEARCH) if FULL_SEARCH in self.stages_needed()
                              else None)
        return cls(inputs)

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
                upstream = keys[reranked_stage(method.reranker) if method.needs_reranking else method.data]
                independent = not method.depends_on_seed()
                for seed in self._seeds(method):
                    directory = self.cell_dir(task, name, seed)
                    key = key_of({"method": name, "seed": seed, "settings": method.settings(), "upstream": upstream})
                    cells.append(CellPlan(task, name, seed, directory, key, cell_status(directory, key), independent))
        return cells

    def run(self, ctx=None) -> list[CellPlan]:
        """Run this job's share of the grid (claiming stages and cells, so that other jobs over the same folder
        share it: :mod:`pgra.experiment.workers`); returns the cells it saw fail (also listed on stderr). The job
        that finishes last writes the report with ``report_writer`` when one is given (the command's). Refused (an
        InputError naming the setting, nothing written) while a live job runs the folder with other settings
        (:meth:`sharing`)."""
        from ..distributed import init_distributed
        from .workers import GridRun

        ctx = ctx or init_distributed()
        if self.cfg.dry_run:
            if ctx.is_main:
                print(self.describe())
            return []
        with self.sharing(ctx):
            self.check_ownership()
            return GridRun(self, ctx).run()

    def shared_settings(self) -> dict[str, Any]:
        """The settings every job sharing this experiment's folder must agree on: all that enter a stage's or a
        cell's key (less the cosmetic ones, how the grid is run and what each job may choose:
        :data:`~pgra.experiment.config.JOB_FIELDS`)."""
        from ..config import recorded_settings

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
        from ..distributed import main_computes
        from ..errors import PgraError
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


def _check_reranker_choice(cfg: ExperimentConfig) -> None:
    """A grid chooses its rerankers through its methods (``pgra``: the prompt-guided one's top d; ``fid_<r>``:
    reranker r's, each its own stage), so ``rerank.reranker`` (or a task's override of it) naming another reranker
    would be replaced unseen: refused, naming the method that reads that reranker."""
    from ..methods import METHODS

    for task in cfg.tasks:
        chosen = cell_settings(cfg, task).rerank.reranker
        if chosen == DEFAULT:
            continue
        reranker_class(chosen, "rerank.reranker")  # an unknown name: the registry's error, with the choices
        readers = [name for name in METHODS.names()
                   if getattr(METHODS[name], "data", None) == "reranked" and METHODS[name].reranker == chosen]
        field = f"task_overrides.{task}.rerank.reranker" if (cfg.task_overrides.get(task) or {}).get(
            "rerank", {}).get("reranker") else "rerank.reranker"
        raise InputError(f"a grid's methods choose its rerankers (pgra reads the prompt-guided reranker's top d, "
                         f"{' / '.join(readers) or 'fid_' + chosen} reads {chosen}'s): remove rerank.reranker="
                         f"{chosen} and add that method to methods", field=field)


def _check_task_names(tasks: dict[str, Any]) -> None:
    """Two tasks of a grid may not share a name: the name is the task's folder under ``out``."""
    seen: dict[str, str] = {}
    for given, spec in tasks.items():
        if spec.name in seen:
            raise InputError(f"tasks '{seen[spec.name]}' and '{given}' are both named '{spec.name}' (a task's name is "
                             "its folder in the experiment): give one of them another name", field="tasks")
        seen[spec.name] = given


__all__ = ["Experiment"]
