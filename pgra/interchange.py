"""The JSONL format passed between stages (compatible with FiD and the paper's code).

One query a line: ``{"id", "text", "label", "ctxs": [{"id", "text", "score"}, ...]}``; ``label`` is absent
for unlabelled inputs and ``ctxs`` absent before retrieval.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .artifacts import atomic_path, iter_jsonl
from .errors import InputError, shorten
from .tasks.loaders import Example


def example_record(ex: Example, ctxs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": ex.id, "text": ex.text}
    if ex.label is not None:
        rec["label"] = ex.label
    if ctxs is not None:
        rec["ctxs"] = ctxs
    return rec


def write_records(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Write records atomically, one JSON object a line; returns the count."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_records(path: str | Path, labels: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Stream and validate records; ``labels`` (a task's) rejects unknown label values."""
    path = Path(path)
    if not path.is_file():
        raise InputError("interchange file not found", path=path)
    seen: set[str] = set()
    for line_no, rec in iter_jsonl(path):
        for key in ("id", "text"):
            if key not in rec:
                raise InputError("missing field", path=path, line=line_no, field=key)
        if not isinstance(rec["text"], str) or not rec["text"].strip():
            raise InputError("empty text", path=path, line=line_no, field="text")
        if not _is_id(rec["id"]):
            raise InputError(f"an id is a string or an integer, not {shorten(rec['id'], 60)}", path=path,
                             line=line_no, field="id")
        rid = str(rec["id"])
        if rid in seen:
            raise InputError(f"duplicate id '{rid}'", path=path, line=line_no, field="id")
        seen.add(rid)
        if labels is not None and "label" in rec and str(rec["label"]) not in labels:
            raise InputError(f"unknown label {shorten(rec['label'], 60)} (labels: {labels})", path=path,
                             line=line_no, field="label")
        _check_ctxs(rec.get("ctxs", []), path, line_no)
        yield rec


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _check_ctxs(ctxs: Any, path: Path, line_no: int) -> None:
    """A record's evidence as every stage reads it: a list of objects, each with an id (a string or an integer),
    a text (a string) and, when given, a numeric score."""
    if not isinstance(ctxs, list):
        raise InputError(f"must be a list of evidence objects, not {shorten(ctxs, 60)}", path=path, line=line_no,
                         field="ctxs")
    for j, ctx in enumerate(ctxs):
        if not isinstance(ctx, dict) or "id" not in ctx or "text" not in ctx:
            raise InputError(f"ctxs[{j}] must have 'id' and 'text'", path=path, line=line_no, field="ctxs")
        if not _is_id(ctx["id"]) or not isinstance(ctx["text"], str):
            raise InputError(f"ctxs[{j}] needs a string or integer 'id' and a string 'text'", path=path,
                             line=line_no, field="ctxs")
        score = ctx.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            raise InputError(f"ctxs[{j}].score must be a number, not {shorten(score, 60)}", path=path,
                             line=line_no, field="ctxs")
