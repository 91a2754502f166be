"""Re-evaluate a finished run (a reader run or an experiment cell) on a split of a data folder of its task."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..data.interchange import read_records, write_records
from ..methods import load_run, stage_kinds
from ..results.predictions import score_lines
from ..storage.artifacts import MANIFEST, read_manifest, sha256_text, verify_run, write_json
from ..storage.ownership import claim_folder
from ..storage.provenance import check_run_data


def evaluate_run(run: str | Path, split: str = "test", data: str | Path | None = None, out: str | Path | None = None,
                 batch_size: int = 16, device: str | None = None, trust_remote_code: bool = False) -> dict[str, Any]:
    """Predict ``data/<split>.jsonl`` with the run (default data: the run's own), write and score it."""
    run = Path(run)
    verify_run(run)  # a truncated best/model.safetensors: one error line, not a loader's traceback
    predictor = load_run(run, device, trust_remote_code=trust_remote_code)
    if hasattr(predictor, "batch_size"):
        predictor.batch_size = batch_size
    folder = Path(data) if data else predictor.default_data()
    if folder is None:
        raise InputError(f"{run} does not record its data folder; pass --data", field="data")
    if not data:  # the run's own folder must still hold what the run read
        check_run_data(run, folder, "re-run the experiment, or evaluate with --data pointing at a folder that "
                                    "holds the original")
    manifest = read_manifest(folder, stage_kinds())
    task = predictor.task
    theirs = manifest.get("task", {})
    if theirs.get("name") != task.name or [str(x) for x in theirs.get("labels", [])] != task.labels:
        raise InputError(f"{folder} holds task '{theirs.get('name')}' (labels {theirs.get('labels')}); the run was "
                         f"trained on '{task.name}' (labels {task.labels})", path=folder / MANIFEST, field="task")
    own = predictor.default_data()
    own_kind = read_manifest(own, stage_kinds())["kind"] if own is not None and own.exists() else manifest["kind"]
    if own_kind != manifest["kind"]:
        warnings.warn(f"the run read a '{own_kind}' folder; {folder} is '{manifest['kind']}': its evidence differs "
                      "from training", stacklevel=2)
    path = folder / f"{split}.jsonl"
    if not path.exists():
        raise InputError(f"no split '{split}' in {folder} (splits: {sorted(manifest.get('counts', {}))})",
                         path=folder, field="split")
    records = list(read_records(path, labels=task.labels))
    tag = sha256_text(str(folder.resolve()))[:8]
    target = Path(out) if out else run / "evaluations" / f"{folder.name}-{tag}"
    predictions = target / f"predictions_{split}.jsonl"
    claim_folder(target, "evaluation")  # a folder pgra did not make (holding a user's files) is refused
    write_records(predictions, predictor.predict(records))
    result: dict[str, Any] = {"split": split, "metric": task.metric, "data": str(folder.resolve()),
                              "run": str(run.resolve()), "predictions": str(predictions)}
    if all(r.get("label") is not None for r in records):
        result.update(score_lines(task, predictions))
    else:
        result.update({task.metric: float("nan"), "examples": len(records), "invalid_predictions": 0})
    write_json(target / f"metrics_{split}.json", result)
    return result


__all__ = ["evaluate_run"]
