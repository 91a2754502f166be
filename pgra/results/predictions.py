"""The one predictions schema every method writes, the :class:`Predictor` that writes it, and reading and
scoring ``predictions_<split>.jsonl`` (a line: ``id``, ``text``, ``label``, ``prediction``, ``scores``,
``evidence``; ``demo_labels`` where a method shows labelled demonstrations)."""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from ..core.config import SEED_MAX, from_dict
from ..core.errors import InputError, shorten
from ..runtime.cost import cost_problem, finite_number
from ..storage.artifacts import SAFE_NAME, iter_jsonl, read_json_object, sha256_file, sha256_text
from ..tasks import TaskSpec, get_task
from ..tasks.spec import METRICS
from .metrics import compute_metric

INVALID = "<invalid>"
PREDICTION_FIELDS = ("id", "text", "label", "prediction", "scores", "evidence")


def prediction_line(record: dict[str, Any], prediction: str | None, scores: dict[str, float] | None,
                    evidence: list[Any]) -> dict[str, Any]:
    """One predictions-schema line for an interchange ``record`` (gold ``label`` is None when unlabelled)."""
    return {"id": record["id"], "text": record["text"], "label": record.get("label"), "prediction": prediction,
            "scores": scores, "evidence": list(evidence)}


class Predictor(ABC):
    """A fitted method, loaded from its run folder."""

    task: TaskSpec

    @abstractmethod
    def predict(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Predictions-schema lines for interchange ``records`` (with ``ctxs`` where the method reads them)."""

    def default_data(self) -> Path | None:
        """The folder the run read its inputs from (``pgra evaluate``'s default ``--data``)."""
        return None

    def cost(self) -> dict[str, Any] | None:
        """LM work of the predictions made so far (``{"lm_calls", "lm_tokens", ...}``); None when none."""
        return None

    def evidence_of(self, record: dict[str, Any], line: dict[str, Any]) -> list[dict[str, Any]]:
        """``{"id", "text", "score"}`` of the evidence ``line`` used, in its order (from the record's ``ctxs``)."""
        by_id = {str(c["id"]): c for c in record.get("ctxs", [])}
        return [{"id": by_id[str(i)]["id"], "text": by_id[str(i)]["text"], "score": by_id[str(i)].get("score")}
                for i in line["evidence"]]


def _is_scalar(value: Any, none: bool = False) -> bool:
    """A string or a whole number (an id, a label), or None where ``none`` allows it."""
    return (value is None and none) or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


# what each field of a predictions line must hold (a file is read as untrusted input: a bundle's is its sender's)
_LINE_FIELDS = {
    "id": ("a string or a whole number", _is_scalar),
    "text": ("a string", lambda v: isinstance(v, str)),
    "label": ("a label (a string) or null", lambda v: _is_scalar(v, none=True)),
    "prediction": ("a label (a string) or null", lambda v: _is_scalar(v, none=True)),
    "scores": ("an object of numbers (a probability per label) or null",
               lambda v: v is None or (isinstance(v, dict) and all(map(finite_number, v.values())))),
    "evidence": ("a list of ids (strings or whole numbers)", lambda v: isinstance(v, list) and all(map(_is_scalar, v))),
    "demo_labels": ("a list of labels", lambda v: isinstance(v, list) and all(map(_is_scalar, v))),
}


def read_predictions(path: str | Path, task: TaskSpec | None = None) -> list[dict[str, Any]]:
    """The lines of a predictions file, each field and label checked (an InputError names file, line, field)."""
    path = Path(path)
    lines = []
    for line_no, rec in iter_jsonl(path):
        for key in PREDICTION_FIELDS:
            if key not in rec:
                raise InputError("missing field", path=path, line=line_no, field=key)
        for key, (want, ok) in _LINE_FIELDS.items():
            if key in rec and not ok(rec[key]):
                raise InputError(f"must be {want}, got {shorten(rec[key])}", path=path, line=line_no, field=key)
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
    return score_records(task, read_predictions(path, task), path)


def score_records(task: TaskSpec, lines: list[dict[str, Any]], path: str | Path) -> dict[str, Any]:
    """:func:`score_lines` of the lines already read from ``path``."""
    if unlabelled := sum(rec["label"] is None for rec in lines):
        raise InputError(f"{unlabelled} inputs have no gold label; cannot score", path=path, field="label")
    gold = [str(rec["label"]) for rec in lines]
    pred = [str(rec["prediction"]) if rec["prediction"] is not None else INVALID for rec in lines]
    return {task.metric: compute_metric(task.metric, gold, pred, task.labels), "examples": len(lines),
            "invalid_predictions": sum(rec["prediction"] is None for rec in lines)}


def inputs_fingerprint(lines: list[dict[str, Any]]) -> str:
    """Identity of the evaluated inputs (ids, texts and gold labels in order): runs compared must share it."""
    payload = [[str(rec["id"]), rec["text"], rec["label"]] for rec in lines]
    return sha256_text(json.dumps(payload, ensure_ascii=False))


# the cell.json field recording each predictions file's SHA-256 when the cell finished
PREDICTIONS_SHA256 = "predictions_sha256"


def _cell_field_error(record: dict[str, Any], name: str) -> str | None:
    """What is wrong with field ``name`` of a cell record (None: it is fine, or absent and optional)."""
    value = record.get(name)
    if name in ("task", "method"):  # each names a folder of the experiment (and is shown in every report)
        ok = isinstance(value, str) and SAFE_NAME.fullmatch(value) is not None and len(value) <= 100
        return None if ok else (f"must be a {name} name (letters, digits, '-', '_' and '.', not first), got "
                                f"{shorten(value)}")
    if name == "seed":
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= SEED_MAX
        return None if ok else f"must be a whole number from 0 to {SEED_MAX}, got {shorten(value)}"
    if name == "metric":
        return None if value in METRICS else f"must be one of {list(METRICS)}, got {shorten(value)}"
    if name == "results":
        ok = isinstance(value, dict) and all(isinstance(r, dict) for r in value.values())
        odd = [k for k in value if not (SAFE_NAME.fullmatch(k) and len(k) <= 100)] if ok else []
        if odd:  # a split names its predictions file: predictions_<split>.jsonl beside the cell.json
            return (f"holds a split {shorten(odd[0])}, which cannot be part of a file name: use letters, digits, '-', "
                    "'_' and '.' (not first)")
        return None if ok else f"must map each split to its results, got {shorten(value)}"
    if name in ("seed_independent", "still_improving"):  # still_improving: null when not checked
        ok = isinstance(value, bool) or (value is None and name == "still_improving")
        return None if ok or name not in record else f"must be true or false, got {shorten(value)}"
    if name in ("task_spec", PREDICTIONS_SHA256, "config", "data", "versions"):
        ok = value is None or isinstance(value, dict)
        return None if ok else f"must be an object, got {shorten(value)}"
    if name in ("cost", "elapsed_s") and value is not None:  # what it spent (pgra.runtime.cost.metered), read by the analyses
        problem = cost_problem(value if name == "cost" else {"elapsed_s": value})
        hardware = value.get("hardware") if isinstance(value, dict) and name == "cost" else None
        if problem is None and not (hardware is None or isinstance(hardware, dict)):
            problem = ("hardware", "must be an object")
        return None if problem is None else f"{problem[0] + ': ' if problem[0] and name == 'cost' else ''}{problem[1]}"
    if name == "lm_cost" and value is not None:  # the LM work its predictions took, averaged by the report
        ok = isinstance(value, dict) and all(finite_number(value.get(k)) for k in ("lm_calls", "lm_tokens"))
        return None if ok else f"must be {{lm_calls, lm_tokens}} (numbers), got {shorten(value)}"
    return None


CELL_FIELDS = ("task", "method", "seed", "metric", "results", "seed_independent", "still_improving", "task_spec",
               PREDICTIONS_SHA256, "config", "data", "versions", "cost", "elapsed_s", "lm_cost")


def read_cell(path: str | Path) -> dict[str, Any]:
    """A finished cell's ``cell.json``, the fields the report reads checked (unknown ones kept unchecked)."""
    path = Path(path)
    record = read_json_object(path)
    redo = f"(edited by hand? re-run the cell: delete {path.parent} and run the experiment again)"
    for name in CELL_FIELDS:
        if (problem := _cell_field_error(record, name)) is not None:
            raise InputError(f"{problem} {redo}", path=path, field=name)
    spec = record.get("task_spec")
    if isinstance(spec, dict) and spec.get("metric", record["metric"]) != record["metric"]:
        raise InputError(f"says metric {shorten(record['metric'])} but its task_spec says "
                         f"{shorten(spec.get('metric'))} {redo}", path=path, field="metric")
    return record


def cell_task(record: dict[str, Any], source: str = "<config>") -> TaskSpec:
    """The task a cell recorded (its ``task_spec``), else the registry's of that name (a cell from before it)."""
    spec = record.get("task_spec")
    return from_dict(TaskSpec, spec, source=source) if spec else get_task(record["task"])


def checked_cell_results(cell: Path, record: dict[str, Any], task: TaskSpec
                         ) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """A finished cell's results per split, recomputed from its checked predictions files, and their lines."""
    recorded_sha = record.get(PREDICTIONS_SHA256) or {}
    results: dict[str, dict[str, Any]] = {}
    lines_of: dict[str, list[dict[str, Any]]] = {}
    redo = f"re-run the cell (delete {cell} and run the experiment again)"
    for split, recorded in (record.get("results") or {}).items():
        path = cell.parent / f"predictions_{split}.jsonl"
        if not path.is_file():
            raise InputError(f"missing: {cell.name} records {split} results but their predictions are gone; {redo}",
                             path=path)
        want = recorded_sha.get(split)
        if want is not None and sha256_file(path) != want:
            raise InputError(f"its SHA-256 differs from the one {cell.name} recorded when the cell finished: the "
                             f"file was edited, truncated or replaced, and its results are not reported; {redo}",
                             path=path)
        lines = read_predictions(path, task)
        result = score_records(task, lines, path)
        recorded = recorded if isinstance(recorded, dict) else {}
        old, n_old = recorded.get(task.metric), recorded.get("examples")
        same = isinstance(old, (int, float)) and n_old == result["examples"] and \
            math.isclose(float(old), result[task.metric], rel_tol=1e-9, abs_tol=1e-12)
        if want is None and not same:
            raise InputError(f"its {result['examples']} predictions give {task.metric} {result[task.metric]:.4f}; "
                             f"{cell.name} recorded {old} over {n_old} inputs: the file changed after the cell "
                             f"finished; {redo}", path=path)
        results[split], lines_of[split] = result, lines
    return results, lines_of


def checked_cell_metric(cell: Path, split: str, task: TaskSpec) -> float:
    """A finished cell's metric on ``split``, recomputed from its checked predictions (:func:`checked_cell_results`)."""
    record = read_cell(cell)
    if split not in record["results"]:
        raise InputError(f"cell has no '{split}' results", path=cell, field="results")
    return checked_cell_results(cell, record, task)[0][split][task.metric]


__all__ = ["INVALID", "PREDICTIONS_SHA256", "PREDICTION_FIELDS", "Predictor", "prediction_line", "cell_task", "checked_cell_metric", "checked_cell_results", "inputs_fingerprint", "read_cell", "read_predictions",
           "score_lines", "score_records"]
