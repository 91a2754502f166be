"""Read a task's splits (LM-BFF files, named-column files, HF datasets), every record checked."""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import to_dict
from ..core.errors import InputError, clip, shorten
from ..storage.artifacts import iter_jsonl, parse_json, read_utf8, require_file, sha256_file
from .spec import DataSpec, TaskSpec

SPLITS = ("train", "dev", "test")
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclass(frozen=True)
class Example:
    id: str
    text: str
    label: str | None = None


@dataclass
class TaskData:
    """A task's loaded splits plus where each came from (files, fingerprints, a carved dev split)."""

    task: TaskSpec
    splits: dict[str, list[Example]]
    provenance: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, split: str) -> list[Example]:
        if split not in self.splits:
            raise KeyError(f"task '{self.task.name}' has no split '{split}' (has {list(self.splits)})")
        return self.splits[split]


def resolve_data_path(spec: DataSpec, data_dir: str | Path) -> Path | str:
    if spec.format == "hf":
        local = Path(data_dir) / spec.path
        return local if local.exists() else spec.path
    p = Path(spec.path)
    return p if p.is_absolute() else Path(data_dir) / p


def task_paths(task: TaskSpec, data_dir: str | Path) -> list[str]:
    """What a task reads on disk: its YAML file, data folder and data files (no output may overlap them)."""
    paths = [task.source] if task.source != "builtin" else []
    base = resolve_data_path(task.data, data_dir)
    if isinstance(base, Path):
        paths += [str(base), *(str(base / f) for f in task.data.files.values())]
    return paths


# what of a task does not change a result (a YAML task's path is in the stage settings already)
_COSMETIC = ("description", "source")


def task_content(task: TaskSpec, data_dir: str | Path) -> dict[str, Any]:
    """What of a task changes a result, for keys: its spec and each data file's SHA-256 (a Hub dataset: its name)."""
    spec = {k: v for k, v in to_dict(task).items() if k not in _COSMETIC}
    base = resolve_data_path(task.data, data_dir)
    if not isinstance(base, Path):
        return {"spec": spec, "data": str(base)}
    if task.data.format == "hf":
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        names = {p.relative_to(base).as_posix(): p for p in files}
    else:
        names = {split: base / name for split, name in task.data.files.items()}
    return {"spec": spec, "data_sha256": {n: sha256_file(p) if p.is_file() else "missing"
                                          for n, p in sorted(names.items())}}


# ---------------------------------------------------------------- raw row readers: (line, {field: value})

_DATA_HINT = "run `pgra download-data` or check the task's data.path"


def _open_text(path: Path) -> io.StringIO:
    require_file(path, "data file", hint=_DATA_HINT)
    # decoded whole (BOM dropped, a bad byte named with its line), newlines kept as written for csv
    return io.StringIO(read_utf8(path, "data file"), newline="")


@contextlib.contextmanager
def _text_errors(path: Path) -> Iterator[None]:
    """Undecodable bytes or an unsplittable CSV row read inside this block: an InputError naming the file."""
    try:
        yield
    except UnicodeDecodeError as e:
        raise InputError(f"undecodable bytes (not UTF-8): {e}", path=path) from None
    except csv.Error as e:
        raise InputError(f"unreadable CSV ({e})", path=path) from None


def _read_lmbff(path: Path, layout: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with _text_errors(path), _open_text(path) as f:
        if layout == "sst2_tsv":
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = next(reader, None)
            if header is None:
                return
            if "sentence" not in header or "label" not in header:
                raise InputError(f"header {header} lacks a 'sentence' or 'label' column", path=path, line=1,
                                 field="sentence" if "sentence" not in header else "label")
            s, lab = header.index("sentence"), header.index("label")
            for i, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) <= max(s, lab):
                    raise InputError(f"{len(row)} columns, header has {len(header)}", path=path, line=i)
                yield i, {"text": row[s], "label": row[lab]}
        elif layout == "cola_tsv":
            for i, row in enumerate(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
                if not row:
                    continue
                if len(row) < 4:
                    raise InputError(f"{len(row)} columns, CoLA rows have 4 (source, label, mark, sentence)",
                                     path=path, line=i, field="sentence")
                yield i, {"text": row[3], "label": row[1]}
        elif layout == "csv":
            for i, row in enumerate(csv.reader(f), start=1):
                if not row:
                    continue
                if len(row) < 2:
                    raise InputError("expected 'label,sentence'", path=path, line=i, field="sentence")
                yield i, {"text": ",".join(row[1:]) if len(row) > 2 else row[1], "label": row[0]}
        else:
            raise InputError(f"unknown LM-BFF layout '{layout}' (sst2_tsv, cola_tsv, csv)", path=path,
                             field="lmbff_layout")


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    require_file(path, "data file", hint=_DATA_HINT)
    return iter_jsonl(path)


def _read_json(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    require_file(path, "data file", hint=_DATA_HINT)
    raw = path.read_bytes()
    data = parse_json(raw[len(codecs.BOM_UTF8):] if raw.startswith(codecs.BOM_UTF8) else raw, path)
    if not isinstance(data, list):
        raise InputError("expected a JSON list of objects", path=path)
    for i, row in enumerate(data, start=1):  # "line" i: the i-th item of the list
        if not isinstance(row, dict):
            raise InputError(f"item {i} of the list is {shorten(row, 60)}, not an object", path=path, line=i)
        yield i, row


def _read_delimited(path: Path, delimiter: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with _text_errors(path), _open_text(path) as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        for line, row in enumerate(reader, start=2):
            if None in row:  # DictReader files the values past the header's columns under None
                header = len(reader.fieldnames or [])
                sep = "tab" if delimiter == "\t" else "comma"
                raise InputError(f"{header + len(row[None])} columns, the header has {header} (a {sep} in a value "
                                 "that is not quoted?)", path=path, line=line)
            yield line, row


def _read_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    require_file(path, "data file", hint=_DATA_HINT)
    try:
        table = pq.read_table(path)
    except pa.ArrowException as e:  # not Parquet, truncated, corrupted
        raise InputError(f"not a readable Parquet file ({clip(str(e))})", path=path) from None
    yield from enumerate(table.to_pylist(), start=1)


def _read_hf(spec: DataSpec, location: Path | str, split: str) -> Iterator[tuple[int, dict[str, Any]]]:
    from ..data.hfdata import MissingSplitError, open_hf_dataset

    try:
        ds = open_hf_dataset(location, spec.hf_splits.get(split, split), spec.hf_name or None)
    except MissingSplitError:
        raise _MissingSplit(split) from None
    yield from enumerate(ds)


class _MissingSplit(Exception):
    pass


def _rows(spec: DataSpec, location: Path | str, split: str) -> tuple[Iterator[tuple[int, dict[str, Any]]], str]:
    """Row iterator and the display name of its source; raises _MissingSplit when the split has no file."""
    if spec.format == "hf":
        return _read_hf(spec, location, split), f"{location}[{spec.hf_splits.get(split, split)}]"
    if split not in spec.files:
        raise _MissingSplit(split)
    path = Path(location) / spec.files[split]
    if spec.format == "lmbff":
        return _read_lmbff(path, spec.lmbff_layout), str(path)
    readers = {"jsonl": _read_jsonl, "json": _read_json, "parquet": _read_parquet,
               "csv": lambda p: _read_delimited(p, ","), "tsv": lambda p: _read_delimited(p, "\t")}
    if spec.format not in readers:
        raise InputError(f"unknown data format '{spec.format}' (lmbff, jsonl, json, csv, tsv, parquet, hf)",
                         field="data.format")
    return readers[spec.format](path), str(path)


def _columns(spec: DataSpec) -> tuple[str, str, str]:
    if spec.format == "lmbff":
        return "text", "label", ""
    return spec.text_column, spec.label_column, spec.id_column


def read_split(task: TaskSpec, split: str, data_dir: str | Path = "data"
               ) -> tuple[list[Example], dict[str, Any]] | None:
    """One split's examples and provenance, or None when the task has no such split."""
    spec = task.data
    location = resolve_data_path(spec, data_dir)
    try:
        rows, source = _rows(spec, location, split)
        text_col, label_col, id_col = _columns(spec)
        examples: list[Example] = []
        seen: set[str] = set()
        for line, row in rows:
            if text_col not in row:
                raise InputError(f"missing text column (columns: {sorted(row)})", path=source, line=line,
                                 field=text_col)
            text = row[text_col]
            if not isinstance(text, str) or not text.strip():
                raise InputError("empty text", path=source, line=line, field=text_col)
            if id_col and id_col not in row:
                raise InputError(f"missing id column (columns: {sorted(row)})", path=source, line=line,
                                 field=id_col)
            eid = str(row[id_col]) if id_col else f"{split}-{len(examples)}"
            if eid in seen:
                raise InputError(f"duplicate id '{eid}'", path=source, line=line, field=id_col or "id")
            seen.add(eid)
            label = _label(task, row, label_col, source, line)
            examples.append(Example(id=eid, text=text, label=label))
    except _MissingSplit:
        return None
    if not examples:
        raise InputError(f"split '{split}' of task '{task.name}' is empty", path=source)
    prov: dict[str, Any] = {"source": source, "rows": len(examples)}
    if Path(source).is_file():
        prov["sha256"] = sha256_file(source)
    return examples, prov


def _label(task: TaskSpec, row: dict[str, Any], col: str, source: str, line: int) -> str:
    if col not in row or row[col] is None or (isinstance(row[col], str) and not row[col].strip()):
        raise InputError(f"missing label (columns: {sorted(row)})", path=source, line=line, field=col)
    raw = row[col]
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    value = str(raw).strip()
    if task.data.label_map:
        if value not in task.data.label_map:
            raise InputError(f"label '{value}' is not in the task's label_map {sorted(task.data.label_map)}",
                             path=source, line=line, field=col)
        value = str(task.data.label_map[value])
    if value not in task.labels:
        raise InputError(f"unknown label '{value}' for task '{task.name}' (labels: {task.labels})",
                         path=source, line=line, field=col)
    return value


def carve_dev(train: list[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """Seeded, label-stratified split of ``train`` into (train, dev); each label keeps at least one example."""
    rng = np.random.default_rng(seed)
    by_label: dict[str | None, list[int]] = {}
    for i, ex in enumerate(train):
        by_label.setdefault(ex.label, []).append(i)
    dev_idx: set[int] = set()
    for label in sorted(by_label, key=str):
        idx = np.asarray(by_label[label])
        n_dev = int(round(fraction * len(idx)))
        n_dev = min(max(n_dev, 1 if len(idx) > 1 else 0), len(idx) - 1)
        dev_idx.update(rng.permutation(idx)[:n_dev].tolist())
    return ([ex for i, ex in enumerate(train) if i not in dev_idx],
            [ex for i, ex in enumerate(train) if i in dev_idx])


def load_task(task: TaskSpec, data_dir: str | Path = "data", splits: tuple[str, ...] = SPLITS) -> TaskData:
    """Load the requested splits; a missing dev split is carved from train (seeded, stratified, recorded)."""
    out: dict[str, list[Example]] = {}
    prov: dict[str, Any] = {}
    need_train = "train" in splits or "dev" in splits
    for split in SPLITS:
        if split not in splits and not (split == "train" and need_train):
            continue
        got = read_split(task, split, data_dir)
        if got is None:
            if split == "train":
                raise InputError(f"task '{task.name}' has no train split", field="data.files")
            continue
        out[split], prov[split] = got
    if "dev" in splits and "dev" not in out:
        out["train"], out["dev"] = carve_dev(out["train"], task.data.dev_fraction, task.data.dev_seed)
        prov["dev"] = {"carved_from": "train", "fraction": task.data.dev_fraction, "seed": task.data.dev_seed,
                       "rows": len(out["dev"]), "ids": [ex.id for ex in out["dev"]]}
        prov["train"]["rows_after_carving"] = len(out["train"])
    if "train" not in splits:
        out.pop("train", None)
    for split in splits:
        if split not in out:
            raise InputError(f"task '{task.name}' has no '{split}' split", field="data.files")
    return TaskData(task=task, splits={s: out[s] for s in SPLITS if s in out}, provenance=prov)


def check_label_words(task: TaskSpec, tokenizer: Any, which: str = "reader_words") -> list[str]:
    """Warnings for label words the tokenizer splits into several pieces (each names the word and label)."""
    warnings = []
    for label, word in getattr(task, which).items():
        pieces = tokenizer.tokenize(" " + word) if hasattr(tokenizer, "tokenize") else [word]
        pieces = [p for p in pieces if p not in ("▁", "Ġ", " ")]
        if len(pieces) != 1:
            warnings.append(f"task '{task.name}' ({task.source}), field '{which}': label '{label}' word "
                            f"'{word}' is split into {len(pieces)} tokens {pieces}")
    return warnings


def check_label_ids(task: TaskSpec, tokenizer: Any, ids: Sequence[Sequence[int]], which: str = "reader_words",
                    model: str = "") -> None:
    """Refuse label words the model cannot tell apart: their token ids must differ and hold no unknown token."""
    where = task.source if task.source != "builtin" else None
    words = getattr(task, which)
    of = f" for the tokenizer of {model}" if model else ""
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None:
        bad = [lab for lab, row in zip(task.labels, ids, strict=True) if unk in row]
        if bad:
            shown = ", ".join(f"label '{lab}' word '{words[lab]}'" for lab in bad)
            verb = "contains" if len(bad) == 1 else "contain"
            raise InputError(f"task '{task.name}': {shown} {verb} the unknown token "
                             f"{getattr(tokenizer, 'unk_token', unk)!s}{of}: the model cannot read or write it; "
                             "choose words in the model's vocabulary", path=where, field=which)
    seen: dict[tuple[int, ...], str] = {}
    for lab, row in zip(task.labels, ids, strict=True):
        key = tuple(int(i) for i in row)
        if key in seen:
            first = seen[key]
            raise InputError(f"task '{task.name}': label '{first}' word '{words[first]}' and label '{lab}' word "
                             f"'{words[lab]}' are the same tokens {list(key)}{of}: the model cannot tell them "
                             "apart; choose words that differ as tokens", path=where, field=which)
        seen[key] = lab
