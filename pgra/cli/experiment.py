"""``pgra experiment``: a grid of tasks x methods x seeds, resumable cell by cell, ending with the report.

The grid (:mod:`pgra.experiment`) runs the cells; the report (:mod:`pgra.evaluation.report`) reads their folders.
This command joins the two: the experiment layer never imports the evaluation layer above it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import InputError, clip
from ..storage.lock import is_main_launch
from .command import Command

if TYPE_CHECKING:
    from ..stages import ModelNeed


def write_and_print_report(out, reference: str) -> None:
    """Write the grid's results.md / results.json / results.html and print results.md: what the job that finishes a
    grid last does (the experiment layer calls it, never importing the evaluation layer)."""
    from ..evaluation.report import write_report

    md = write_report(Path(out), reference=reference)
    print(md.read_text(encoding="utf-8"))
    print(f"written: {md}, {md.with_name('results.json')} and {md.with_name('results.html')} (open it in a browser to "
          "explore every input's predictions)")


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("PGRA_OFFLINE") == "1"


def check_model(name: str, field: str, what: str, trust_remote_code: bool = False, local_only: bool = False) -> None:
    """A model a stage or cell will load, checked without loading it: a folder must exist and hold a config
    transformers reads (``config.json``, read locally); anything else must look like a hub id (``NAME`` or
    ``ORG/NAME``), and offline (``HF_HUB_OFFLINE=1``) be in the hub cache. An InputError names ``field``."""
    from ..lm.loading import load_pretrained

    name = str(name or "")
    if not name:
        raise InputError(f"no {what} given", field=field)
    path = Path(name).expanduser()
    parent = name.split("/", 1)[0]
    looks_local = (local_only or name.startswith((".", "/", "~")) or name.count("/") > 1 or path.exists()
                   or ("/" in name and Path(parent).is_dir()))  # `models/typo` beside a models/ folder
    if looks_local:
        if not path.is_dir():
            raise InputError(f"the {what} '{clip(name)}' is no folder here (a hub id would be NAME or ORG/NAME with "
                             "no such local folder); fix the path", field=field)
        from transformers import AutoConfig

        load_pretrained(AutoConfig, name, what, field, local_files_only=True, trust_remote_code=trust_remote_code)
        return
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise InputError(f"the {what} '{clip(name)}' is neither a folder here nor a hub id (NAME or ORG/NAME)",
                         field=field) from None
    if _hub_offline():
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            raise InputError(f"the {what} '{clip(name)}' is no folder here, and the hub is offline (HF_HUB_OFFLINE) "
                             "with no copy of it in the cache", field=field)


def models_needed(cfg) -> list[ModelNeed]:
    """Every model the grid's stages and cells load, each once (a task's or method's overrides included), as their
    parts name them: the index's encoder (dense), the models of the stage each method reads
    (:meth:`pgra.stages.Stage.models`: a reranker's LM or cross-encoder, the full search's LM) and the method's own
    (:meth:`pgra.methods.Method.models`: a reader, an in-context LM)."""
    from ..experiment.config import cell_settings
    from ..methods import MethodInputs, get_method, get_stage
    from ..retrieval.base import get_retriever
    from ..stages import ModelNeed

    found: dict[tuple[str, str], ModelNeed] = {}
    for task in cfg.tasks:
        base = cell_settings(cfg, task)
        retriever = get_retriever(base.index)  # the index's query encoder, whichever retriever has one
        query_encoder = retriever.query_encoder()
        needs = [] if query_encoder is None else [ModelNeed(f"index.{base.index.retriever}.encoder",
                                                             str(query_encoder.encoder), "index's encoder",
                                                             retriever.trusts_remote_code())]
        for method in cfg.methods:
            cls, s = get_method(method), cell_settings(cfg, task, method)
            needs += get_stage(cls.data, "methods").models(s.rerank) + cls(MethodInputs(None, Path(), s)).models()  # (it reads only settings)
        for need in needs:
            found.setdefault((need.field, need.name), need)
    return list(found.values())


def check_grid(cfg) -> None:
    """What every cell of the grid needs, checked before any stage runs (else each cell would fail on it): the
    models (:func:`check_model`) and, where this machine runs the cells (not Slurm's workers), a reader precision it
    can run (:func:`pgra.runtime.training.check_mixed_precision`). One InputError naming the field."""
    for need in models_needed(cfg):
        check_model(need.name, need.field, need.what, need.trust_remote_code, need.local_only)
    if cfg.launcher == "slurm":  # the workers' machines, not this one, run the readers
        return
    from ..experiment.config import cell_settings
    from ..methods import get_method
    from ..methods.reader_method import ReaderMethod
    from ..runtime.training import check_mixed_precision

    for task in cfg.tasks:
        for method in cfg.methods:
            if issubclass(get_method(method), ReaderMethod):
                check_mixed_precision(cell_settings(cfg, task, method).reader.mixed_precision,
                                      "reader.mixed_precision")


def run_and_report(cfg, ctx=None) -> list:
    """Run the grid (or with ``dry_run`` print its plan); the job that finishes it last writes the report when
    ``cfg.report`` (:func:`write_and_print_report`). Returns the failed cells. The models and reader precision every
    cell needs are checked first (:func:`check_grid`)."""
    from ..evaluation.bundle import check_plan_records
    from ..experiment import run_experiment
    from ..experiment.config import apply_limit

    cfg = apply_limit(cfg)  # --limit N: a smoke run in OUT-limitN
    check_plan_records(cfg)  # --plan-records: folders and intact bundles, refused by name before anything runs
    if cfg.tasks and cfg.methods:  # (none: the grid's own check names the empty field)
        check_grid(cfg)
    if cfg.report and not cfg.dry_run:  # before anything runs: a report file pgra did not write is refused
        from ..evaluation.report import check_report_files

        check_report_files(Path(cfg.out))
    failed = run_experiment(cfg, ctx, report_writer=write_and_print_report if cfg.report else None)
    if cfg.dry_run and (ctx.is_main if ctx is not None else is_main_launch()):
        from ..analysis.plan import rerank_disk_lines
        from ..experiment import Experiment

        print("\n".join(rerank_disk_lines(cfg) + dry_run_resolution(Experiment(cfg))))
    return failed


def dry_run_resolution(experiment) -> list[str]:
    """The dry run's "Resolution" section (:func:`pgra.evaluation.resolution.resolution_lines`): per task, at its
    planned test inputs (:func:`pgra.experiment.estimate.planned_test_inputs`) and the grid's seeds, the minimum
    detectable effect between two seeded methods and what the paper's average PGRA-over-FiD gain would need, under
    the planning assumptions (:data:`~pgra.evaluation.resolution.DEFAULT_DISAGREEMENT`, ``DEFAULT_SEED_STD``)."""
    from ..evaluation.resolution import plan_resolution, resolution_lines
    from ..experiment.estimate import planned_test_inputs

    plans: dict[str, dict | str] = {}
    for task in experiment.cfg.tasks:
        spec = experiment.tasks[task]
        n, why = planned_test_inputs(experiment, task)
        if n is None:
            plans[spec.name] = why
            continue
        plans[spec.name] = plan_resolution(n, len(experiment.cfg.seeds))
        if spec.metric != "accuracy":
            plans[spec.name]["note"] = f"the task reports {spec.metric}: the accuracy formula is a rough guide"
    return resolution_lines(plans)


def run(cfg) -> int:
    """The command: the grid under the launcher's process group (if any), which every rank leaves together at the
    end (:func:`~pgra.cli.command.run_distributed`; a rank that exits holding it can abort in gloo's teardown)."""
    from .command import run_distributed

    _, failed = run_distributed(run_and_report, cfg)
    return 1 if failed else 0


COMMAND = Command("experiment", "run a tasks x methods x seeds grid (resumable) and report it",
                  "pgra.analysis.config:AnalyzeConfig", run,
                  description="Run every method of the config on every task and seed into "
                              "OUT/<task>/<method>/seed-<n>/, reusing finished stages and cells and resuming a "
                              "killed one; --dry-run prints the plan with its expected cost. Ends with results.md "
                              "(pgra report). Several runs (workers of --launcher, torchrun ranks, Slurm array tasks) "
                              "over one OUT share it: each stage and cell is claimed by one of them.",
                  writes="out", locks=False)
