"""``ExperimentConfig``: the grid (tasks x methods x seeds) and the settings of every stage, and the settings of
one cell with its task and method overrides merged in.

Every part declares its options as a dataclass on itself (``options``) and the config is made from the registries
when it is read: the ``rerank`` section holds a section per registered reranker with options
(:class:`~pgra.rerank.config.RerankSection`), and :func:`experiment_config` adds a top-level section per registered
method with options that has none here (a plug-in's ``<name>:``), so a plug-in's options are set from YAML like a
built-in part's.

The ``analysis`` section is read by ``pgra analyze``: its fields are declared by the registered analyses
(:mod:`pgra.analysis.config` types it); the commands build their configs with that typed subclass, so a cell's
settings keep the type they were given.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..core.config import MAX_CELLS_PER_GPU, MAX_WORKERS, SEED_MAX, from_dict, merge, option, to_dict
from ..core.errors import InputError
from ..icl.config import ICLConfig
from ..methods import METHODS, KnnVoteConfig, LinearProbeConfig
from ..reader.config import TrainConfig
from ..rerank.config import RerankSection, rerank_config
from ..retrieval.base import IndexSection, index_config
from ..retrieval.retrieve import RetrieveConfig
from ..runtime.tracking import TRACKERS
from ..tasks import task_names

# what task_overrides / method_overrides may change (the index is shared by every task; methods share stages)
TASK_OVERRIDABLE = ("data_dir", "retrieve", "rerank", "reader", "knn_vote", "linear_probe", "icl")
METHOD_OVERRIDABLE = ("reader", "knn_vote", "icl")
PARALLEL = ("cells", "ddp")
# how the grid is run, never what a cell computes: left out of a cell's recorded config (and of every key)
RUNTIME_FIELDS = ("parallel", "launcher", "workers", "slurm", "claim_stale_after_s", "claim_poll_s", "wait_s",
                  "cells_per_gpu", "cell_gpu_gb", "plan_records")
LAUNCHERS = ("none", "local", "slurm")
# what each job sharing an experiment folder may choose for itself: which cells it plans (its grid's extent) and
# how it reports them. Every other setting (less RUNTIME_FIELDS and cosmetic ones) enters a stage's or cell's key,
# so jobs sharing a folder must agree on it (pgra.experiment.claims.shared_folder)
JOB_FIELDS = ("out", "tasks", "methods", "seeds", "reference", "report", "dry_run", "show_progress", "log_with",
              "analysis")


@dataclass
class SlurmConfig:
    """The Slurm jobs of ``--launcher slurm`` (one worker each, submitted through submitit)."""

    partition: str = option("", help="partition of the workers (empty: the cluster's default)")
    time_min: int = option(24 * 60, min=1, help="time limit of a worker in minutes")
    gpus_per_worker: int = option(1, min=0, help="GPUs of a worker (it runs one cell at a time, on the first: "
                                                  "more GPUs are more workers)")
    cpus_per_worker: int = option(8, min=1, help="CPU cores of a worker")
    mem_gb: float = option(0.0, min=0, help="memory of a worker in GB (0: none asked, so Slurm gives the partition's "
                                            "default, DefMemPerCPU x cpus_per_worker or DefMemPerNode, said when "
                                            "submitting; where neither is set, that can be a whole node's memory)")
    cluster: str = option("slurm", choices=("slurm", "local"),
                          help="local: submitit's LocalExecutor (the same workers as local processes, no Slurm)")
    folder: str = option("", help="submitit's folder (job logs and pickles); default <out>/.submitit")
    wait: bool = option(True, help="wait for the workers to finish (else print their job ids and return)")


@dataclass
class ExperimentConfig:
    """A grid of tasks x methods x seeds and the settings of every stage (YAML; ``key=value`` reaches all)."""

    out: str = option("", help="experiment folder: <out>/<task>/<method>/seed-<n>/")
    tasks: list[str] = option(default_factory=lambda: ["wiki_topic"], io="in", suggest=task_names, unique=True,
                              help="comma-separated tasks (registered names or task YAML files)")
    methods: list[str] = option(default_factory=lambda: ["no_retrieval", "fid", "pgra", "knn_vote"],
                                choices=METHODS.names, unique=True, path_segment=True,
                                help="comma-separated methods")
    seeds: list[int] = option(default_factory=lambda: [1], min=0, max=SEED_MAX, unique=True, path_segment=True,
                              help="comma-separated seeds (one cell per seed; a method the seed cannot change "
                                   "runs once, at the first seed)")
    reference: str = option("fid", help="method the report tests every other method against")
    data_dir: str = option("data", io="in", help="root of the task data")
    index: IndexSection = option(default_factory=lambda: index_config()(), flag=False,
                                 help="index section (key=value: index.FIELD=...; a plug-in retriever's options: "
                                      "index.<name>.FIELD=...)")
    retrieve: RetrieveConfig = option(default_factory=RetrieveConfig, flag=False, help="retrieve section (key=value: retrieve.FIELD=...)")
    rerank: RerankSection = option(default_factory=lambda: rerank_config()(), flag=False,
                                   help="rerank section (key=value: rerank.FIELD=...; a registered reranker's options: "
                                        "rerank.<name>.FIELD=...)")
    reader: TrainConfig = option(default_factory=TrainConfig, flag=False, help="reader section (key=value: reader.FIELD=...)")
    knn_vote: KnnVoteConfig = option(default_factory=KnnVoteConfig, flag=False, help="knn_vote section (key=value: knn_vote.FIELD=...)")
    linear_probe: LinearProbeConfig = option(default_factory=LinearProbeConfig, flag=False,
                                             help="linear_probe section (key=value: linear_probe.FIELD=...)")
    icl: ICLConfig = option(default_factory=ICLConfig, flag=False, help="in-context learning section (key=value: icl.FIELD=...)")
    task_overrides: dict[str, Any] = option(default_factory=dict, flag=False,
                                            help="per task: {task: {reader: {...}, rerank: {...}, ...}}")
    method_overrides: dict[str, Any] = option(default_factory=dict, flag=False,
                                              help="per method: {method: {reader: {...}, knn_vote: {...}}}")
    analysis: dict[str, Any] = option(default_factory=dict, flag=False,
                                      help="what `pgra analyze` computes (key=value: analysis.FIELD=...; its sections "
                                           "are declared by the analyses, pgra.analysis.config)")
    log_with: str = option("none", choices=TRACKERS,
                           help="tracker of every cell (wandb offline unless WANDB_MODE says otherwise)")
    report: bool = option(True, help="write results.md / results.json when the grid ends")
    dry_run: bool = option(False, help="print the plan and which cells are done; run nothing")
    plan_records: list[str] = option(default_factory=list, append=True, cosmetic=True, record_default=False,
                                     metavar="DIR",
                                     help="with --dry-run: price the plan from the cost records of these experiment "
                                          "folders or results bundles too (a cell of the same task, method and "
                                          "settings; a stage of the same task), as from the experiment's own "
                                          "(repeatable)")
    limit: int = option(0, min=0, cosmetic=True, record_default=False, help="a smoke run: at most N inputs per split and N training steps per reader, "
                                       "into OUT-limitN (never the full experiment's folder); 0 = the config as "
                                       "written")
    show_progress: bool = option(True, help="progress bars (a line every 30 s in a log)")
    parallel: str = option("cells", choices=PARALLEL,
                           help="under N processes (torchrun, accelerate launch): cells runs whole cells side by side, "
                                "one process (one device) each; ddp runs each cell as one DDP job over all processes "
                                "(each holds the whole reader and trains on its part of the batch: fewer cells, each "
                                "done sooner; it needs the reader to fit one device). The stages split their work "
                                "over one process per GPU either way")
    launcher: str = option("none", choices=LAUNCHERS,
                           help="run --workers workers that share the grid: local processes (one device each, "
                                "round-robin) or Slurm jobs (submitit; the slurm section)")
    workers: int = option(1, min=1, max=MAX_WORKERS, help="how many workers --launcher starts (with --dry-run and no launcher: the "
                                         "ranks of the torchrun launch the plan prices)")
    slurm: SlurmConfig = option(default_factory=SlurmConfig, flag=False,
                                help="slurm section of --launcher slurm (key=value: slurm.FIELD=...)")
    cells_per_gpu: int = option(1, min=1, max=MAX_CELLS_PER_GPU,
                                help="how many cells may share one GPU (torchrun --nproc-per-node GPUs x this, or "
                                     "--launcher local --workers GPUs x this): a cell starts on a shared GPU only when "
                                     "it has cell_gpu_gb free, else its job waits (up to wait_s); a stage's models "
                                     "load on one process per GPU, the others wait")
    cell_gpu_gb: float = option(0.0, min=0,
                                help="GPU memory a cell needs free before it starts, in GiB (0: on a shared GPU, its "
                                     "memory over the cells sharing it; on a GPU of its own, no check)")
    claim_stale_after_s: float = option(600.0, above=0,
                                        help="a claim of a job on another host whose heartbeat is older than this is "
                                             "taken over (on this host: when its process is gone)")
    claim_poll_s: float = option(10.0, above=0, help="how often a job waits for a stage another job builds")
    wait_s: float = option(24 * 3600.0, min=0,
                           help="how long a job with nothing left to claim waits for the stages and cells other jobs "
                                "hold (taking over those whose job died) before leaving them to those jobs")


_made: dict[tuple[tuple[str, type], ...], type] = {}


def part_sections() -> tuple[tuple[str, type], ...]:
    """``(name, options)`` of every registered method and stage that declares options and has no section of
    :class:`ExperimentConfig` (a plug-in's), in registry order (the methods first)."""
    from ..methods import METHODS
    from ..stages import STAGES

    static = {f.name: f for f in dataclasses.fields(ExperimentConfig)}
    parts = [(name, getattr(registry[name], "options", None), what)
             for registry, what in ((METHODS, "method"), (STAGES, "stage")) for name in registry.names()]
    for name, options, what in parts:  # a section of its own name that is not its options: never silently the other's
        if options is not None and name in static and static[name].default_factory is not options:
            raise InputError(f"the {what} '{name}' declares options, but '{name}' is already a field of the "
                             f"experiment config: register the {what} under another name", field="methods")
    return tuple(dict.fromkeys((name, options) for name, options, _ in parts
                               if options is not None and name not in static))


def experiment_config() -> type:
    """:class:`ExperimentConfig` with a section for every registered method or stage that declares options and has
    none there (:func:`part_sections`: ``<name>:`` in YAML, overridable per task and method); ExperimentConfig
    itself when there is none. Made once per set of sections, named ``PluggedExperimentConfig`` (what a grid's payload names:
    its child processes make it again from the parts registered there)."""
    sections = part_sections()
    if not sections:
        return ExperimentConfig
    if sections not in _made:
        fields = [(name, tp, option(default_factory=tp, flag=False, help=f"options of the {name} part (key=value: "
                                                                          f"{name}.FIELD=...)"))
                  for name, tp in sections]
        made = dataclasses.make_dataclass("PluggedExperimentConfig", fields, bases=(ExperimentConfig,),
                                          namespace={"part_sections": tuple(name for name, _ in sections)})
        made.__module__, made.__doc__ = __name__, ExperimentConfig.__doc__
        _made[sections] = made
    return _made[sections]


def __getattr__(name: str) -> type:
    if name == "PluggedExperimentConfig":  # the made class, by the name it carries (a grid's payload)
        return experiment_config()
    raise AttributeError(name)


def _cap(value: int, n: int) -> int:
    """``value`` at most ``n``, where 0 means no cap (all)."""
    return n if not value else min(int(value), n)


def _limit_section(section: str, values: dict[str, Any], n: int) -> dict[str, Any]:
    """One config section (or a task's or method's override of it) under ``--limit n``."""
    out = dict(values)
    if section == "retrieve":
        if "split_sizes" in out:
            out["split_sizes"] = {split: _cap(size, n) for split, size in (out["split_sizes"] or {}).items()}
        out["max_examples"] = _cap(out.get("max_examples", 0), n)
    elif section == "reader":
        for name in ("max_steps", "batch_size", "eval_every", "save_every"):
            if name in out:
                out[name] = _cap(out[name], n) if name in ("max_steps", "batch_size") or out[name] else 0
    elif section in ("rerank", "icl", "knn_vote"):  # what is drawn from the N training inputs: at most N
        for name in ("num_demos", "pool", "k"):
            if out.get(name) and not (section == "rerank" and name == "k"):
                out[name] = _cap(out[name], n)
    return out


def apply_limit(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` as a smoke run of ``cfg.limit`` = N (lm-evaluation-harness's ``--limit``): every task's splits cut to
    at most N inputs (the same seeded draw, ``retrieve.split_sizes`` / ``max_examples``), every reader's
    ``max_steps`` and ``batch_size`` (and ``eval_every``, ``save_every``) to at most N, and what is drawn from the
    training inputs (the reranker's and in-context demonstrations, the in-context pool, the kNN vote's k) to at most N, in the folder
    ``OUT-limitN`` beside the experiment's, so that a smoke run never mixes with (or is taken for) the real one.
    The corpus-wide work (the index, a reranker's corpus pass) is not cut: the smoke run shares it. The result has
    ``limit`` 0 and the cut settings written out, so its folder's config says what ran; ``cfg`` itself when
    ``limit`` is 0."""
    n = int(getattr(cfg, "limit", 0) or 0)
    if not n:
        return cfg
    if not cfg.out:
        raise InputError("--limit needs an experiment folder (out) to write OUT-limitN beside", field="out")
    data = to_dict(cfg)
    data["limit"] = 0
    data["out"] = f"{str(cfg.out).rstrip('/')}-limit{n}"
    for section in ("retrieve", "rerank", "reader", "knn_vote", "icl"):
        data[section] = _limit_section(section, data[section], n)
    for scope in ("task_overrides", "method_overrides"):
        for name, extra in (data.get(scope) or {}).items():
            if isinstance(extra, dict):
                data[scope][name] = {k: _limit_section(k, v, n) if isinstance(v, dict) else v
                                     for k, v in extra.items()}
    return from_dict(type(cfg), data, source=f"<{cfg.out} with --limit {n}>")


def cell_settings(cfg: ExperimentConfig, task: str, method: str | None = None) -> ExperimentConfig:
    """The settings of one task (and method): the config with its task and method overrides merged in (of ``cfg``'s
    own type)."""
    base = {k: v for k, v in to_dict(cfg).items() if k not in ("task_overrides", "method_overrides")}
    plugged = tuple(getattr(type(cfg), "part_sections", ()))  # a plug-in method's section, as knn_vote's
    for scope, name, allowed in (("task_overrides", task, TASK_OVERRIDABLE + plugged),
                                 ("method_overrides", method, METHOD_OVERRIDABLE + plugged)):
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
    return from_dict(type(cfg), base, source=f"<experiment config: {task}/{method or '-'}>")


__all__ = ["JOB_FIELDS", "apply_limit", "LAUNCHERS", "METHOD_OVERRIDABLE", "PARALLEL", "RUNTIME_FIELDS", "TASK_OVERRIDABLE", "ExperimentConfig", "SlurmConfig",
           "cell_settings", "experiment_config", "part_sections"]
