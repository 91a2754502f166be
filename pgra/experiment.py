"""``pgra experiment``: a grid of tasks x methods x seeds, resumable cell by cell.

Layout of ``out``::

    <out>/<task>/candidates/            first-stage top-k of every split (shared by all methods and seeds)
    <out>/<task>/reranked/              the reranker's top-d (built when a method reads it)
    <out>/<task>/<method>/seed-<n>/     one cell: the method's run, predictions_{dev,test}.jsonl, cell.json

A method whose predictions the seed cannot change under its settings (``Method.depends_on_seed``: the kNN vote,
in-context learning with KATE ...) has one cell per task, at the first of ``seeds``, marked
``"seed_independent": true`` in its ``cell.json``; the report shows its one value as deterministic and pairs it
with every seed of the method it is compared with.

The index (``index.out``) and the reranker's embedding cache (``rerank.cache_dir``) are shared across tasks
and experiments. A stage or cell is reused when it finished with the same settings and the same inputs
(its key: the settings plus the keys of the stages it reads); a killed cell resumes (readers from their last
checkpoint). A failing cell is reported and the grid goes on; the run exits non-zero listing the failures.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from . import choices
from .analysis.config import AnalysisConfig
from .artifacts import (
    MANIFEST,
    check_disjoint,
    library_versions,
    path_under,
    read_json,
    read_json_object,
    safe_name,
    sha256_file,
    source_commit,
    write_json,
    write_text,
)
from .config import check_config, from_dict, merge, option, to_dict
from .cost import merge_work, metered
from .errors import InputError
from .icl.config import ICLConfig
from .lock import locks_output
from .methods import KnnVoteConfig, LinearProbeConfig, MethodInputs, get_method
from .reader.config import TrainConfig
from .rerank.config import RerankConfig
from .retrieval.config import IndexConfig
from .retrieval.retrieve import RetrieveConfig
from .selection.base import settings_key

CELL_FILE = "cell.json"
STAGE_KEY_FILE = ".stage_key"
STAGE_COST_FILE = "cost.json"  # what building the stage spent (pgra.cost.metered), with its stage key
CELL_KEY_FILE = ".cell_key"
# what task_overrides / method_overrides may change (the index is shared by every task; methods share stages)
TASK_OVERRIDABLE = ("data_dir", "retrieve", "rerank", "reader", "knn_vote", "linear_probe", "icl")
METHOD_OVERRIDABLE = ("reader", "knn_vote", "icl")
# settings that never change a result
_COSMETIC = ("show_progress", "device", "log_with", "keep_checkpoints", "chunk_size")


@dataclass
class ExperimentConfig:
    """A grid of tasks x methods x seeds and the settings of every stage (YAML; ``key=value`` reaches all)."""

    out: str = option("", help="experiment folder: <out>/<task>/<method>/seed-<n>/")
    tasks: list[str] = option(default_factory=lambda: ["wiki_topic"], io="in", suggest=choices.task_names, unique=True,
                              help="comma-separated tasks (registered names or task YAML files)")
    methods: list[str] = option(default_factory=lambda: ["no_retrieval", "fid", "pgra", "knn_vote"],
                                choices=choices.methods, unique=True, help="comma-separated methods")
    seeds: list[int] = option(default_factory=lambda: [1], unique=True,
                              help="comma-separated seeds (one cell per seed; a method the seed cannot change "
                                   "runs once, at the first seed)")
    reference: str = option("fid", help="method the report tests every other method against")
    data_dir: str = option("data", io="in", help="root of the task data")
    index: IndexConfig = option(default_factory=IndexConfig, flag=False, help="index section (key=value: index.FIELD=...)")
    retrieve: RetrieveConfig = option(default_factory=RetrieveConfig, flag=False, help="retrieve section (key=value: retrieve.FIELD=...)")
    rerank: RerankConfig = option(default_factory=RerankConfig, flag=False, help="rerank section (key=value: rerank.FIELD=...)")
    reader: TrainConfig = option(default_factory=TrainConfig, flag=False, help="reader section (key=value: reader.FIELD=...)")
    knn_vote: KnnVoteConfig = option(default_factory=KnnVoteConfig, flag=False, help="knn_vote section (key=value: knn_vote.FIELD=...)")
    linear_probe: LinearProbeConfig = option(default_factory=LinearProbeConfig, flag=False,
                                             help="linear_probe section (key=value: linear_probe.FIELD=...)")
    icl: ICLConfig = option(default_factory=ICLConfig, flag=False, help="in-context learning section (key=value: icl.FIELD=...)")
    task_overrides: dict[str, Any] = option(default_factory=dict, flag=False,
                                            help="per task: {task: {reader: {...}, rerank: {...}, ...}}")
    method_overrides: dict[str, Any] = option(default_factory=dict, flag=False,
                                              help="per method: {method: {reader: {...}, knn_vote: {...}}}")
    analysis: AnalysisConfig = option(default_factory=AnalysisConfig, flag=False,
                                      help="what `pgra analyze` computes (key=value: analysis.FIELD=...)")
    log_with: str = option("none", choices=("none", "tensorboard", "wandb"),
                           help="tracker of every cell (wandb offline unless WANDB_MODE says otherwise)")
    report: bool = option(True, help="write results.md / results.json when the grid ends")
    dry_run: bool = option(False, help="print the plan and which cells are done; run nothing")
    show_progress: bool = option(True, help="progress bars (a line every 30 s in a log)")


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


def _key(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _defining(cfg: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    return {k: v for k, v in asdict(cfg).items() if k not in _COSMETIC + drop}


def cell_settings(cfg: ExperimentConfig, task: str, method: str | None = None) -> ExperimentConfig:
    """The settings of one task (and method): the config with its task and method overrides merged in."""
    base = {k: v for k, v in to_dict(cfg).items() if k not in ("task_overrides", "method_overrides")}
    for scope, name, allowed in (("task_overrides", task, TASK_OVERRIDABLE),
                                 ("method_overrides", method, METHOD_OVERRIDABLE)):
        extra = getattr(cfg, scope).get(name) if name else None
        if not extra:
            continue
        if not isinstance(extra, dict):
            raise InputError(f"{scope}.{name} must be a mapping", field=f"{scope}.{name}")
        bad = [k for k in extra if k not in allowed]
        if bad:
            raise InputError(f"{scope}.{name} may set {', '.join(allowed)}; not {', '.join(bad)}",
                             field=f"{scope}.{name}.{bad[0]}")
        base = merge(base, extra)
    return from_dict(ExperimentConfig, base, source=f"<experiment config: {task}/{method or '-'}>")


class Experiment:
    """The grid described by an :class:`ExperimentConfig`: plan it, run it."""

    def __init__(self, cfg: ExperimentConfig, candidates_from: Experiment | None = None) -> None:
        """``candidates_from``: another experiment whose candidates folders this one reads (an analysis's variant
        of the grid shares the first stage of the experiment it varies)."""
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
        from .choices import task_names
        from .methods import METHODS

        unknown = [t for t in cfg.task_overrides if t not in cfg.tasks and t not in task_names()]
        if unknown:
            raise InputError(f"task_overrides names unknown tasks: {unknown} (tasks: {', '.join(task_names())})",
                             field="task_overrides")
        unknown = [m for m in cfg.method_overrides if m not in METHODS]
        if unknown:
            raise InputError(f"method_overrides names unknown methods: {unknown} (methods: {', '.join(METHODS)})",
                             field="method_overrides")
        if not cfg.index.out:
            raise InputError("no index folder given (index.out)", field="index.out")
        from .tasks import get_task

        self.cfg = cfg
        self.out = Path(cfg.out)
        self.tasks = {t: get_task(t) for t in cfg.tasks}  # a task YAML is read once (its name checked: a folder)
        from .tasks import task_paths

        data_dirs = {t: cell_settings(cfg, t).data_dir for t in cfg.tasks}
        check_disjoint({"out": cfg.out}, {"tasks": [p for t, spec in self.tasks.items()
                                                    for p in task_paths(spec, data_dirs[t])]})
        self.candidates_from = candidates_from

    # ----- stages shared by the cells of a task -----
    def _task_name(self, task: str) -> str:
        return self.tasks[task].name

    def stage_dir(self, task: str, stage: str) -> Path:
        if stage == "candidates" and self.candidates_from is not None:
            return self.candidates_from.stage_dir(task, stage)
        return path_under(self.out, self._task_name(task), stage)

    def cell_dir(self, task: str, method: str, seed: int) -> Path:
        """``<out>/<task>/<method>/seed-<n>``."""
        return path_under(self.out, self._task_name(task), safe_name(method, "methods", what="method name"),
                          f"seed-{seed}")

    def retrieve_config(self, task: str) -> RetrieveConfig:
        s = cell_settings(self.cfg, task)
        # the index this config builds may run its encoder's code (this run's own config says so): so may retrieval
        trust = s.retrieve.trust_remote_code or s.index.trusts_remote_code()
        return replace(s.retrieve, task=task, index=s.index.out, out=str(self.stage_dir(task, "candidates")),
                       data_dir=s.data_dir, show_progress=s.show_progress, trust_remote_code=trust)

    def rerank_config(self, task: str) -> RerankConfig:
        s = cell_settings(self.cfg, task)
        return replace(s.rerank, candidates=str(self.stage_dir(task, "candidates")),
                       out=str(self.stage_dir(task, "reranked")), task="", index=s.index.out,
                       show_progress=s.show_progress)

    def _index_key(self) -> str:
        manifest = Path(self.cfg.index.out) / MANIFEST
        return read_json_object(manifest).get("build_key", "unbuilt") if manifest.exists() else "unbuilt"

    def stage_keys(self, task: str) -> dict[str, str]:
        retrieve = self.retrieve_config(task)
        defining = _defining(retrieve, ("out", "trust_remote_code", "exclude_ids"))
        if retrieve.exclude_ids:  # by content (a key without it, when unset, stays what it was before the option)
            path = Path(retrieve.exclude_ids)
            defining["exclude_ids"] = sha256_file(path) if path.is_file() else f"missing: {path}"
        candidates = _key({"retrieve": defining, "index": self._index_key()})
        rerank = self.rerank_config(task)
        reranked = _key({"rerank": {**_defining(rerank, ("out", "candidates")), "demos": settings_key(rerank.demos)},
                         "candidates": candidates})
        return {"candidates": candidates, "reranked": reranked}

    def stage_done(self, task: str, stage: str) -> bool:
        directory = self.stage_dir(task, stage)
        key_file = directory / STAGE_KEY_FILE
        return (directory / MANIFEST).exists() and key_file.exists() and \
            key_file.read_text().strip() == self.stage_keys(task)[stage]

    @property
    def needs_reranking(self) -> bool:
        """Whether a method of the grid reads the reranked folder (then every task builds one)."""
        return any(get_method(m).data == "reranked" for m in self.cfg.methods)

    def build_stages(self, task: str, ctx) -> None:
        """Run (or reuse) the candidates and, when needed, the reranked folder of ``task``."""
        from .rerank.reranker import rerank
        from .retrieval.retrieve import retrieve

        for stage, run, make_cfg in (("candidates", retrieve, self.retrieve_config),
                                     ("reranked", rerank, self.rerank_config)):
            if stage == "reranked" and not self.needs_reranking:
                continue
            if self.stage_done(task, stage):
                _say(ctx, f"[{self._task_name(task)}] {stage}: done, reused")
                continue
            _say(ctx, f"[{self._task_name(task)}] {stage}: running")
            with metered(ctx) as cost:
                run(make_cfg(task), ctx)
            ctx.barrier()
            if ctx.is_main:
                key = self.stage_keys(task)[stage]
                write_json(self.stage_dir(task, stage) / STAGE_COST_FILE, {"stage_key": key, **cost})
                write_text(self.stage_dir(task, stage) / STAGE_KEY_FILE, key)
            ctx.barrier()

    # ----- cells -----
    def method(self, task: str, method: str):
        settings = cell_settings(self.cfg, task, method)
        reranked = self.stage_dir(task, "reranked")
        inputs = MethodInputs(self.tasks[task], self.stage_dir(task, "candidates"),
                              reranked if self.needs_reranking else None, settings)
        return get_method(method)(inputs)

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
                upstream = keys["reranked" if method.needs_reranking else "candidates"]
                independent = not method.depends_on_seed()
                for seed in self._seeds(method):
                    directory = self.cell_dir(task, name, seed)
                    key = _key({"method": name, "seed": seed, "settings": method.settings(), "upstream": upstream})
                    cells.append(CellPlan(task, name, seed, directory, key, _cell_status(directory, key), independent))
        return cells

    def run(self, ctx=None) -> list[CellPlan]:
        """Run the grid; returns the failed cells (also listed on stderr)."""
        from .distributed import init_distributed
        from .retrieval.build import build_index

        ctx = ctx or init_distributed()
        if self.cfg.dry_run:
            if ctx.is_main:
                print(self.describe())
            return []
        _say(ctx, f"index {self.cfg.index.out}")
        build_index(replace(self.cfg.index, show_progress=self.cfg.show_progress), ctx)
        failed: list[CellPlan] = []
        for task in self.cfg.tasks:
            try:
                self.build_stages(task, ctx)
            except Exception as e:  # the grid goes on with the next task
                if ctx.world_size > 1:
                    raise
                _report_failure(f"[{self._task_name(task)}] stages", e)
                failed += [c for c in self.plan([task]) if c.status != "done"]
                continue
            for cell in self.plan([task]):
                if cell.status == "done":
                    _say(ctx, f"[{cell.label}] done, reused")
                    if ctx.is_main:
                        _mark_seed_independent(cell)
                    continue
                try:
                    self.run_cell(cell, ctx)
                except Exception as e:  # the grid goes on with the next cell
                    if ctx.world_size > 1:
                        raise
                    _report_failure(f"[{cell.label}]", e, cell.directory)
                    failed.append(cell)
        if ctx.is_main and self.cfg.report and any(self.out.glob(f"*/*/seed-*/{CELL_FILE}")):
            from .evaluation.report import write_report

            md = write_report(self.out, reference=self.cfg.reference)
            print(md.read_text(encoding="utf-8"))
        if failed and ctx.is_main:
            print(f"{len(failed)} cell(s) failed:", file=sys.stderr)
            for c in failed:
                print(f"  {c.label} (see {c.directory / 'error.log'})", file=sys.stderr)
        return failed

    def run_cell(self, cell: CellPlan, ctx) -> dict[str, Any]:
        """Fit the cell's method, predict dev and test, and write ``cell.json`` (the cell's completion mark)."""
        from .evaluation.predictions import PREDICTIONS_SHA256, score_lines
        from .interchange import read_records, write_records

        if cell.status == "stale" and ctx.is_main:
            print(f"[{cell.label}] settings changed: rerunning from scratch")
            shutil.rmtree(cell.directory)
        ctx.barrier()
        _say(ctx, f"[{cell.label}] {'resuming' if cell.status == 'resume' else 'running'}")
        if ctx.is_main:
            cell.directory.mkdir(parents=True, exist_ok=True)
            write_text(cell.directory / CELL_KEY_FILE, cell.key)
            (cell.directory / "error.log").unlink(missing_ok=True)
        ctx.barrier()
        method = self.method(cell.task, cell.method)
        task = method.inputs.task
        start = time.time()
        with metered(ctx) as fit_cost:
            fit = method.fit(cell.directory, cell.seed)
        if not ctx.is_main:
            ctx.barrier()
            return {}
        with metered() as spent:  # predictions the fit did not write (main process only)
            predictor = None
            results, data, checksums = {}, {}, {}
            cost = fit.cost
            for split in method.splits():
                data_file = method.data_dir / f"{split}.jsonl"
                data[split] = sha256_file(data_file)
                path = cell.directory / f"predictions_{split}.jsonl"
                if split not in fit.predicted_splits:
                    predictor = predictor or type(method).load(cell.directory, trust_remote_code=_trusts_code(method))
                    write_records(path, predictor.predict(list(read_records(data_file, labels=task.labels))))
                    cost = predictor.cost() or cost
                results[split] = score_lines(task, path)
                checksums[split] = sha256_file(path)  # the report refuses a predictions file changed after this
        evaluations = fit.evaluations
        still = None
        if method.trained and evaluations:
            still = fit.best_step == evaluations[-1]["step"]
        record = {"kind": "cell", "key": cell.key, "task": task.name, "task_spec": to_dict(task),
                  "method": cell.method, "seed": cell.seed,
                  "metric": task.metric, "results": results, "settings": method.settings(),
                  "steps": fit.steps, "best_step": fit.best_step, "evaluations": evaluations,
                  "still_improving": still, "seed_independent": not method.depends_on_seed(),
                  "lm_cost": cost, "data": {"folder": str(method.data_dir.resolve()), "sha256": data},
                  PREDICTIONS_SHA256: checksums,
                  "config": to_dict(method.inputs.settings), "git_commit": source_commit(),
                  "versions": library_versions(), "elapsed_s": round(time.time() - start, 1)}
        record["cost"] = {"elapsed_s": record["elapsed_s"], "resumed": cell.status == "resume",
                          "hardware": fit_cost["hardware"], "work": merge_work([fit_cost["work"], spent["work"]])}
        write_json(cell.directory / CELL_FILE, record)
        self._track(cell, record)
        summary = ", ".join(f"{s} {r[task.metric]:.4f}" for s, r in results.items())
        print(f"[{cell.label}] {summary}" + (" (still improving)" if still else ""))
        ctx.barrier()
        return record

    def _track(self, cell: CellPlan, record: dict[str, Any]) -> None:
        if self.cfg.log_with == "none":
            return
        from .tracking import open_tracker

        config = {"task": cell.task, "method": cell.method, "seed": cell.seed, **record["settings"].get("reader", {})}
        metric = record["metric"]
        with open_tracker(self.cfg.log_with, cell.directory, cell.label.replace("/", "-"), config) as tracker:
            tracker.log({f"{split}/{metric}": r[metric] for split, r in record["results"].items()}, step=record["steps"])

    def describe(self) -> str:
        """The plan as text: stages and cells with their status."""
        lines = [f"experiment {self.out}: {len(self.cfg.tasks)} task(s) x {len(self.cfg.methods)} method(s) x "
                 f"{len(self.cfg.seeds)} seed(s)"]
        index_done = (Path(self.cfg.index.out) / MANIFEST).exists()
        lines.append(f"  index {self.cfg.index.out}: {'built (checked when run)' if index_done else 'to build'}")
        cells = self.plan()
        for task in self.cfg.tasks:
            stages = ["candidates"] + (["reranked"] if self.needs_reranking else [])
            lines.append(f"  {task}: " + ", ".join(f"{s} {'done' if self.stage_done(task, s) else 'to run'}"
                                                   for s in stages))
            for c in (c for c in cells if c.task == task):
                once = "  (seed-independent: one run)" if c.seed_independent else ""
                lines.append(f"    {c.method:<14} seed {c.seed:<4} {c.status:<7} {c.directory}{once}")
        counts = {s: sum(c.status == s for c in cells) for s in ("done", "resume", "stale", "todo")}
        lines.append("cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        return "\n".join(lines)


def _cell_status(directory: Path, key: str) -> str:
    cell = directory / CELL_FILE
    if cell.exists():
        return "done" if read_json(cell).get("key") == key else "stale"
    key_file = directory / CELL_KEY_FILE
    if key_file.exists():
        return "resume" if key_file.read_text().strip() == key else "stale"
    return "stale" if directory.exists() and any(directory.iterdir()) else "todo"


def _mark_seed_independent(cell: CellPlan) -> None:
    """Record ``seed_independent`` in a finished cell written before cells carried it (the report reads it)."""
    path = cell.directory / CELL_FILE
    record = read_json(path)
    if cell.seed_independent and "seed_independent" not in record:
        write_json(path, {**record, "seed_independent": True})


def _trusts_code(method) -> bool:
    """Whether this run's own config lets the models a fitted method loads back run their own code (the index's
    encoder, the ICL LM); a fitted run's manifest never does."""
    s = method.inputs.settings
    return bool(s.index.trusts_remote_code() or s.retrieve.trust_remote_code or s.icl.trust_remote_code)


def _say(ctx, message: str) -> None:
    if ctx.is_main:
        print(message, flush=True)


def _report_failure(where: str, error: BaseException, directory: Path | None = None) -> None:
    text = "".join(traceback.format_exception(error))
    print(f"{where} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        write_text(directory / "error.log", text)


@locks_output()
def run_experiment(cfg: ExperimentConfig, ctx=None) -> list[CellPlan]:
    """Run (or with ``dry_run`` describe) the grid; returns the failed cells."""
    return Experiment(cfg).run(ctx)


__all__ = ["CELL_FILE", "CellPlan", "Experiment", "ExperimentConfig", "cell_settings", "run_experiment"]
