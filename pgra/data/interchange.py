"""The JSONL format passed between stages (one query a line: ``{"id", "text", "label", "ctxs"}``), and FiD's
JSON array format beside it (:func:`read_fid`, :func:`write_fid`; docs/tasks.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import InputError, finite_number, is_number, shorten
from ..storage.artifacts import atomic_path, iter_jsonl, parse_json
from ..tasks.loaders import Example


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
        check_record(rec, path, line_no, seen, labels)
        yield rec


def check_record(rec: dict[str, Any], path: Path, line_no: int, seen: set[str], labels: list[str] | None) -> None:
    """One record as every stage reads it (``seen``: the ids so far); an InputError names file, line and field."""
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


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _check_ctxs(ctxs: Any, path: Path, line_no: int) -> None:
    """A record's evidence: a list of objects, each with an id (string or integer), a text and maybe a score."""
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
        if score is not None and not is_number(score):
            raise InputError(f"ctxs[{j}].score must be a number, not {shorten(score, 60)}", path=path,
                             line=line_no, field="ctxs")
        if score is not None and not finite_number(score):
            raise InputError(f"ctxs[{j}].score must be a finite number, not {shorten(score, 60)}", path=path,
                             line=line_no, field="ctxs")


_SENTINEL = re.compile(r"<extra_id_\d+>")
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark (Windows editors write one): not part of the JSON


def _label_of(value: Any, words: dict[str, str], path: Path, item: int, field: str) -> str:
    """A FiD answer as a label: the label or one of its words (case-insensitive, T5 sentinels stripped)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"an answer is a string, not {shorten(value, 60)}", path=path, line=item, field=field)
    text = _SENTINEL.sub(" ", str(value)).strip()
    if not words:
        return text
    label = words.get(text) or words.get(text.lower())
    if label is None:
        raise InputError(f"answer {shorten(value, 60)} is no label or label word of the task "
                         f"({sorted(set(words))})", path=path, line=item, field=field)
    return label


def read_fid(path: str | Path, labels: list[str] | None = None, words: dict[str, str] | None = None,
             require_labels: bool = False) -> list[dict[str, Any]]:
    """A FiD / PGRA JSON array as interchange records, validated as :func:`read_records` does (``line``: the item's
    number). ``labels`` and ``words`` (word -> label) turn ``target`` / ``answers[0]`` into a label (none: unlabelled,
    or an InputError with ``require_labels``); missing ids are the item's index and ``<id>:<j>``."""
    path = Path(path)
    if not path.is_file():
        raise InputError("FiD file not found", path=path)
    raw = path.read_bytes()
    data = parse_json(raw[len(BOM):] if raw.startswith(BOM) else raw, path)
    if not isinstance(data, list):
        raise InputError("a FiD file is a JSON array of examples", path=path)
    lookup = {str(lab): str(lab) for lab in labels or []}
    for word, label in (words or {}).items():
        lookup.setdefault(word, label)
        lookup.setdefault(word.lower(), label)
    seen: set[str] = set()
    out = []
    for i, item in enumerate(data):
        n = i + 1
        if not isinstance(item, dict):
            raise InputError("an example is a JSON object", path=path, line=n)
        if "question" not in item:
            raise InputError("missing field", path=path, line=n, field="question")
        rec: dict[str, Any] = {"id": item.get("id", i), "text": item["question"]}
        answer = item.get("target")
        if answer is None and item.get("answers"):
            answers = item["answers"]
            answer = answers[0] if isinstance(answers, list) else answers
        if answer is not None:
            rec["label"] = _label_of(answer, lookup, path, n, "target" if "target" in item else "answers")
        elif require_labels:
            raise InputError("the example has no answer (a 'target' or a non-empty 'answers'): pgra train learns "
                             "from and scores every split it reads", path=path, line=n, field="answers")
        if "ctxs" in item:
            rec["ctxs"] = _fid_ctxs(item["ctxs"], rec["id"], path, n)
        check_record(rec, path, n, seen, labels)
        out.append(rec)
    return out


def _fid_ctxs(ctxs: Any, qid: Any, path: Path, item: int) -> Any:
    if not isinstance(ctxs, list):
        return ctxs  # check_record names it
    out = []
    for j, ctx in enumerate(ctxs):
        if not isinstance(ctx, dict):
            return ctxs
        c: dict[str, Any] = {"id": ctx.get("id", f"{qid}:{j}"), "text": ctx.get("text")}
        score = ctx.get("score")
        if isinstance(score, str):  # DPR's retrieval files write scores as strings
            try:
                score = float(score)
            except ValueError:
                raise InputError(f"ctxs[{j}].score must be a number, not {shorten(score, 60)}", path=path,
                                 line=item, field="ctxs") from None
        if score is not None:
            c["score"] = score
        title = ctx.get("title")
        if title is not None and not isinstance(title, str):
            raise InputError(f"ctxs[{j}].title must be a string, not {shorten(title, 60)}", path=path, line=item,
                             field="ctxs")
        if title:
            c["title"] = title
        out.append(c)
    return out


def fid_record(rec: dict[str, Any], words: dict[str, str] | None = None) -> dict[str, Any]:
    """One interchange record in FiD's format; ``words`` (label -> word) writes the label as its word."""
    out: dict[str, Any] = {"id": rec["id"], "question": rec["text"]}
    if rec.get("label") is not None:
        word = (words or {}).get(str(rec["label"]), str(rec["label"]))
        out["target"], out["answers"] = word, [word]
    if "ctxs" in rec:
        out["ctxs"] = [{"id": c["id"], "title": c.get("title", ""), "text": c["text"],
                        **({"score": c["score"]} if c.get("score") is not None else {})} for c in rec["ctxs"]]
    return out


def write_fid(path: str | Path, records: Iterable[dict[str, Any]], words: dict[str, str] | None = None) -> int:
    """Write records as one FiD JSON array, atomically; returns the count."""
    items = [fid_record(rec, words) for rec in records]
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(items, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return len(items)
