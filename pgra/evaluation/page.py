"""``results.html``: one self-contained page to explore a finished experiment in a browser (no server, no network):
tables, figures, an input browser and provenance; past ``INLINE_LIMIT`` its data sits in ``results_data.js``."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from ..core.errors import InputError, PgraError, shorten
from ..data.interchange import read_records
from ..experiment.layout import cell_path
from ..methods import get_method
from ..storage.artifacts import SAFE_NAME, read_json, write_text
from .bundle import ANALYSIS_DIR
from .page_assets import PAGE_TEMPLATE

FIGURES_FILE = "figures.json"  # pgra analyze's index of its figures and pages, in ANALYSIS_DIR
PAGE = "results.html"
DATA_SCRIPT = "results_data.js"
INLINE_LIMIT = 4_000_000  # bytes of JSON kept inside the page


def _rel(path: str | Path, directory: Path) -> str:
    p = Path(path)
    try:
        return p.resolve().relative_to(directory.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def _inside(directory: Path, expected: Path, recorded: str | Path) -> Path:
    """``directory/expected`` when it exists (the experiment's own layout), else the path the report recorded."""
    own = directory / expected
    return own if own.exists() else Path(recorded)


def _data_folder(directory: Path, task: str, data: Any, roots: list[Path]) -> Path | None:
    """The data folder a cell read, when it lies inside the report's folder or a source (else None)."""
    recorded = data.get("folder") if isinstance(data, dict) else None
    if not isinstance(recorded, str) or not SAFE_NAME.fullmatch(Path(recorded).name):
        return None
    path = _inside(directory, Path(task, Path(recorded).name), recorded)
    return path if any(path.resolve().is_relative_to(root.resolve()) for root in roots) else None


def _records(folder: Path, name: str, cache: dict[Path, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    path = folder / name
    if path not in cache:
        cache[path] = {str(r["id"]): r for r in read_records(path)} if path.exists() else {}
    return cache[path]


def _evidence(line: dict[str, Any], record: dict[str, Any] | None, train: dict[str, dict[str, Any]],
              texts: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """The evidence of one prediction as ``[key, score, first-stage rank]`` rows; texts go to ``texts``."""
    ctxs = {str(c["id"]): (i, c) for i, c in enumerate((record or {}).get("ctxs", []))}
    rows = []
    for eid in line.get("evidence", []):
        eid = str(eid)
        if eid in ctxs:  # a corpus sentence the reader read
            i, c = ctxs[eid]
            key = f"c:{eid}"
            texts.setdefault(key, {"text": c["text"]})
            rows.append([key, round(float(c["score"]), 4) if c.get("score") is not None else None,
                         c.get("retrieval_rank", i + 1)])
        elif eid in train:  # a demonstration or a voter
            key = f"t:{eid}"
            texts.setdefault(key, {"text": train[eid]["text"], "label": str(train[eid]["label"])})
            rows.append([key, None, None])
        else:
            rows.append([f"?:{eid}", None, None])
    return rows


def _score_name(method: str) -> str:
    """What the ``score`` of ``method``'s evidence is ("score" for a method not registered here)."""
    try:
        return get_method(method).score_name()
    except PgraError:
        return "score"


def analysis_figures(directory: str | Path) -> dict[str, list[dict[str, str]]]:
    """What ``analysis/figures.json`` lists (pages, figures), read as untrusted input: files beside it, no link."""
    folder = Path(directory) / ANALYSIS_DIR
    index = folder / FIGURES_FILE
    if folder.is_symlink() or not index.is_file() or index.is_symlink():
        return {"pages": [], "figures": []}
    entries = read_json(index)
    if not isinstance(entries, dict):
        raise InputError(f"holds a JSON {type(entries).__name__}, not an object (edited by hand?)", path=index)
    found: dict[str, list[dict[str, str]]] = {}
    for kind, suffix, fields in (("pages", ".md", ("file", "title")), ("figures", ".png", ("file", "title", "caption"))):
        listed = entries.get(kind, [])
        if not isinstance(listed, list):
            raise InputError(f"must be a list, got {shorten(listed)}", path=index, field=kind)
        found[kind] = []
        for i, entry in enumerate(listed):
            if not isinstance(entry, dict):
                raise InputError(f"must be an object, got {shorten(entry)}", path=index, field=f"{kind}[{i}]")
            for name in fields:
                value = entry.get(name)
                if not isinstance(value, str):
                    raise InputError(f"must be a string, got {shorten(value)} (edited by hand?)", path=index,
                                     field=f"{kind}[{i}].{name}")
            file = entry["file"]
            if not SAFE_NAME.fullmatch(file) or not file.endswith(suffix):
                raise InputError(f"names {shorten(file)}, which is not a {suffix} file beside {FIGURES_FILE}: an "
                                 f"index names only the analyses' own files", path=index, field=f"{kind}[{i}].file")
            path = folder / file
            if path.is_file() and not path.is_symlink():
                found[kind].append({name: entry[name] for name in fields})
    return found


def page_data(directory: Path, report: dict[str, Any]) -> dict[str, Any]:
    """Everything the page shows, from ``results.json``'s report and the cells' files."""
    split = report["split"]
    cache: dict[Path, dict[str, dict[str, Any]]] = {}
    inputs: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in report["tasks"]}
    texts: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in report["tasks"]}
    cells = []
    roots = [directory, *(Path(s["path"]) for s in report.get("sources") or [] if isinstance(s, dict))]
    for cell in report["cells"]:
        task, method, seed = cell["task"], cell["method"], cell["seed"]
        run = _inside(directory, cell_path(task, method, seed), cell["path"])  # a moved folder reads its own
        cells.append({"task": task, "method": method, "seed": seed, "path": _rel(run, directory)})
        data = _data_folder(directory, task, cell.get("data"), roots)
        records = _records(data, f"{split}.jsonl", cache) if data else {}
        train = _records(data, "train.jsonl", cache) if data else {}
        path = run / f"predictions_{split}.jsonl"
        if not path.exists():
            continue
        for line in read_records(path):
            iid = str(line["id"])
            entry = inputs[task].setdefault(iid, {"id": iid, "text": line.get("text", ""), "label": str(line["label"]),
                                                  "p": {}})
            scores = {k: round(float(v), 4) for k, v in (line.get("scores") or {}).items()}
            entry["p"].setdefault(method, []).append(
                [seed, None if line["prediction"] is None else str(line["prediction"]), scores,
                 _evidence(line, records.get(iid), train, texts[task])])
    figures = [{"title": fig["title"], "caption": fig["caption"], "src": "data:image/png;base64," +
                base64.b64encode((directory / ANALYSIS_DIR / fig["file"]).read_bytes()).decode()}
               for fig in analysis_figures(directory)["figures"]]
    label_words: dict[str, dict[str, str]] = {}
    for cell in report["cells"]:  # the task's own words for its labels (MR's 0 / 1: negative / positive)
        record = _inside(directory, cell_path(cell["task"], cell["method"], cell["seed"]), cell["path"]) / "cell.json"
        if cell["task"] not in label_words and record.exists():
            spec = read_json(record).get("task_spec") or {}
            words = spec.get("demo_words") if isinstance(spec, dict) else None
            label_words[cell["task"]] = {str(k): str(v) for k, v in words.items()} if isinstance(words, dict) else {}
    first = report["cells"][0] if report["cells"] else {}
    return {"directory": str(report.get("directory", directory)), "split": split, "reference": report["reference"],
            "floor": report.get("floor"), "tasks": report["tasks"], "methods": report["methods"],
            "summary": report["summary"], "significance": report["significance"], "bootstrap": report["bootstrap"],
            "cells": cells, "figures": figures, "label_words": label_words, "compare": report.get("compare"),
            "score_names": {m: _score_name(m) for m in report["methods"]},
            "provenance": {"commits": sorted({str(c.get("git_commit")) for c in report["cells"]}),
                           "versions": first.get("versions", {}), "config": first.get("config", {})},
            "inputs": {t: list(v.values()) for t, v in inputs.items()}, "texts": texts}


#: what a script's JSON writes as a unicode escape: ``<`` ``>`` ``&`` (no ``</script>``, ``<!--`` or ``<script`` in
#: the data, which the HTML tokenizer would act on inside the script element) and the line separators U+2028 and
#: U+2029 (a line break inside a string literal to older JavaScript engines)
_SCRIPT_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def script_json(value: Any) -> str:
    """``value`` as JSON safe inside a ``<script>``: the characters of ``_SCRIPT_ESCAPES`` as unicode escapes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).translate(_SCRIPT_ESCAPES)


def write_page(directory: str | Path, report: dict[str, Any]) -> Path:
    """Write ``results.html`` (and ``results_data.js`` for a large grid) into ``directory``."""
    directory = Path(directory)
    payload = script_json(page_data(directory, report))
    script = directory / DATA_SCRIPT
    if len(payload.encode()) > INLINE_LIMIT:
        write_text(script, "window.PGRA_DATA = " + payload + ";\n")
        data = f'<script src="{DATA_SCRIPT}"></script>'
    else:
        script.unlink(missing_ok=True)
        data = f"<script>window.PGRA_DATA = {payload};</script>"
    title = html.escape(f"pgra results: {directory.resolve().name}")
    head, tail = PAGE_TEMPLATE.split("{{DATA}}")  # the data goes in last: nothing inside it is replaced
    page = head.replace("{{TITLE}}", title) + data + tail
    write_text(directory / PAGE, page)
    return directory / PAGE


__all__ = ["DATA_SCRIPT", "FIGURES_FILE", "INLINE_LIMIT", "PAGE", "analysis_figures", "page_data", "script_json", "write_page"]
