"""One cell of the grid: fit the method, predict the splits the fit did not, score them and write ``cell.json``."""

from __future__ import annotations

import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.config import recorded_settings, to_dict
from ..data.interchange import read_records, write_records
from ..methods import Method
from ..results.predictions import PREDICTIONS_SHA256, score_lines
from ..runtime.cost import merge_work, metered
from ..storage.artifacts import MANIFEST, library_versions, sha256_file, source_commit, write_json, write_text
from ..storage.ownership import check_only_own, claim_folder
from ..storage.provenance import folder_fingerprint, relative_path
from .claims import worker_identity
from .layout import CELL_FILE, CELL_KEY_FILE, CellPlan

# what a cell folder may hold for pgra to delete it when stale: the cell's marks and what its methods write
CELL_NAMES = (CELL_FILE, CELL_KEY_FILE, "error.log", MANIFEST, "metrics.json", "train_log.jsonl", "predictions_*.jsonl",
              "best", "checkpoints", "probe.safetensors", "train_labels.json", "train_texts.json", "tensorboard",
              "wandb", "pgra")


def check_stale_cell(cell: CellPlan) -> None:
    """Refuse to delete a stale cell's folder unless it holds nothing but pgra's own files (an InputError names
    the others; nothing is changed)."""
    check_only_own(cell.directory, "cell", CELL_NAMES, "delete this folder to rerun the cell from scratch")


def run_cell(cell: CellPlan, make_method: Callable[[], Method], ctx, log_with: str = "none") -> dict[str, Any]:
    """Fit the cell's method (built by ``make_method`` once the folder is ready), predict dev and test, and write
    ``cell.json`` (the cell's completion mark); ``{}`` on the processes other than the main one."""
    if cell.status == "stale" and ctx.is_main:
        check_stale_cell(cell)
        print(f"[{cell.label}] settings changed: rerunning from scratch")
        shutil.rmtree(cell.directory)
    ctx.barrier()
    say(ctx, f"[{cell.label}] {'resuming' if cell.status == 'resume' else 'running'}")
    if ctx.is_main:
        claim_folder(cell.directory, "cell")
        write_text(cell.directory / CELL_KEY_FILE, cell.key)
        (cell.directory / "error.log").unlink(missing_ok=True)
    ctx.barrier()
    method = make_method()
    task = method.inputs.task
    start = time.time()
    with metered(ctx) as fit_cost:
        fit = method.fit(cell.directory, cell.seed)
    if not ctx.is_main:
        ctx.barrier()
        return {}
    with metered() as spent:  # predictions the fit did not write (main process only)
        results, data, checksums, cost = _predict_and_score(cell, method, fit)
    evaluations = fit.evaluations
    still = None
    if method.trained and evaluations:
        still = fit.best_step == evaluations[-1]["step"]
    record = {"kind": "cell", "key": cell.key, "task": task.name, "task_spec": to_dict(task),
              "method": cell.method, "seed": cell.seed,
              "metric": task.metric, "results": results, "settings": method.settings(),
              "steps": fit.steps, "best_step": fit.best_step, "evaluations": evaluations,
              "still_improving": still, "seed_independent": not method.depends_on_seed(),
              **({"train_inputs": fit.train_inputs} if fit.train_inputs is not None else {}),
              "lm_cost": cost, "data": {"folder": str(method.data_dir.resolve()),
                                         "relative": relative_path(method.data_dir, cell.directory),
                                         "fingerprint": folder_fingerprint(method.data_dir), "sha256": data},
              PREDICTIONS_SHA256: checksums,
              "config": recorded_config(method.inputs.settings), "git_commit": source_commit(),
              "versions": library_versions(), "elapsed_s": round(time.time() - start, 1),
              "ran_by": worker_identity()}
    record["cost"] = _cell_cost(record["elapsed_s"], cell.status == "resume", fit.split_s, fit_cost, spent)
    write_json(cell.directory / CELL_FILE, record)
    try:  # finished: what only resuming needed goes (a reader's checkpoints); the cell is done whatever happens here
        method.finished(cell.directory)
    except OSError as e:
        print(f"[{cell.label}] warning: done, but what only resuming needed was not deleted: {e}", file=sys.stderr,
              flush=True)
    _track(cell, record, log_with)
    summary = ", ".join(f"{s} {r[task.metric]:.4f}" for s, r in results.items())
    print(f"[{cell.label}] {summary}" + (" (still improving)" if still else ""))
    ctx.barrier()
    return record


def _predict_and_score(cell: CellPlan, method: Method, fit) -> tuple[dict, dict, dict, Any]:
    """Predict the splits the fit did not, and score every split: ``(results, data checksums, predictions
    checksums, LM cost)`` by split."""
    task, predictor = method.inputs.task, None
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
    return results, data, checksums, cost


def _cell_cost(elapsed_s: float, resumed: bool, split_s: float | None, fit_cost: dict, spent: dict) -> dict:
    """``cell.json``'s ``cost``. ``split_s``: of the cell's seconds, those the processes of a launch split among them
    (a reader's training loop, under parallel: ddp by all the ranks; the rest, its loads and final predictions, ran
    on each or on the main one); ``processes`` counts those that split them (1 where nothing was: a kNN vote, ICL)."""
    split = split_s if split_s is not None and split_s <= elapsed_s else None
    shared = fit_cost["processes"] > 1 and split is not None
    return {"elapsed_s": elapsed_s, "resumed": resumed, **({"split_s": round(split, 1)} if split is not None else {}),
            "processes": fit_cost["processes"] if shared else 1, "devices": fit_cost["devices"] if shared else 1,
            "hardware": fit_cost["hardware"], "work": merge_work([fit_cost["work"], spent["work"]])}


def recorded_config(settings) -> dict[str, Any]:
    """A cell's settings as ``cell.json`` records them: all but how the grid was run (``RUNTIME_FIELDS``)."""
    from .config import RUNTIME_FIELDS

    return {k: v for k, v in recorded_settings(settings).items() if k not in RUNTIME_FIELDS}


def _trusts_code(method) -> bool:
    """Whether this run's own config lets the models a fitted method loads back run their own code (the index's
    encoder, the ICL LM); a fitted run's manifest never does."""
    s = method.inputs.settings
    return bool(s.index.trusts_remote_code() or s.retrieve.trust_remote_code or s.icl.trust_remote_code)


def _track(cell: CellPlan, record: dict[str, Any], log_with: str) -> None:
    if log_with == "none":
        return
    from ..runtime.tracking import open_tracker

    config = {"task": cell.task, "method": cell.method, "seed": cell.seed, **record["settings"].get("reader", {})}
    metric = record["metric"]
    with open_tracker(log_with, cell.directory, cell.label.replace("/", "-"), config) as tracker:
        tracker.log({f"{split}/{metric}": r[metric] for split, r in record["results"].items()}, step=record["steps"])


def report_failure(where: str, error: BaseException, directory: Path | None = None) -> None:
    """Say on stderr that ``where`` failed and, given the cell's ``directory``, keep the traceback in its
    ``error.log``."""
    text = "".join(traceback.format_exception(error))
    print(f"{where} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        write_text(directory / "error.log", text)


def say(ctx, message: str) -> None:
    """Print ``message`` once (on the main process)."""
    if ctx.is_main:
        print(message, flush=True)
