"""Reading and scoring ``predictions_<split>.jsonl`` files (the methods' one predictions schema)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..artifacts import iter_jsonl
from ..errors import InputError
from ..methods.base import PREDICTION_FIELDS
from ..tasks import TaskSpec
from .metrics import compute_metric

INVALID = "<invalid>"


def read_predictions(path: str | Path, task: TaskSpec | None = None) -> list[dict[str, Any]]:
    """The lines of a predictions file, each checked for the schema's fields (and the task's labels)."""
    path = Path(path)
    lines = []
    for line_no, rec in iter_jsonl(path):
        for key in PREDICTION_FIELDS:
            if key not in rec:
                raise InputError("missing field", path=path, line=line_no, field=key)
        if task is not None:
            for key in ("label", "prediction"):
                if rec[key] is not None and str(rec[key]) not in task.labels:
                    raise InputError(f"'{rec[key]}' is not a label of task {task.name}", path=path, line=line_no,
                                     field=key)
        lines.append(rec)
    if not lines:
        raise InputError("no predictions", path=path)
    return lines


def score_lines(task: TaskSpec, path: str | Path) -> dict[str, Any]:
    """``{metric: value, "examples": n, "invalid_predictions": k}`` of a predictions file with gold labels."""
    lines = read_predictions(path, task)
    unlabelled = sum(rec["label"] is None for rec in lines)
    if unlabelled:
        raise InputError(f"{unlabelled} inputs have no gold label; cannot score", path=path, field="label")
    gold = [str(rec["label"]) for rec in lines]
    pred = [str(rec["prediction"]) if rec["prediction"] is not None else INVALID for rec in lines]
    return {task.metric: compute_metric(task.metric, gold, pred, task.labels), "examples": len(lines),
            "invalid_predictions": sum(rec["prediction"] is None for rec in lines)}


def inputs_fingerprint(lines: list[dict[str, Any]]) -> str:
    """Identity of the evaluated inputs (ids, texts and gold labels in order): runs compared must share it."""
    payload = [[str(rec["id"]), rec["text"], rec["label"]] for rec in lines]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()


__all__ = ["INVALID", "inputs_fingerprint", "read_predictions", "score_lines"]
