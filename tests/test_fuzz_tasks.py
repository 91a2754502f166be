"""Fuzzing custom tasks (pgra/tasks: a task YAML and its data files in every local format). Any task YAML and
data is a task and its splits or an InputError (one ``error:`` line through ``pgra tasks``), never another
exception; ``pgra tasks export`` writes only into its ``--out``. Plain regression tests of what the fuzzing
found follow the properties."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pgra.core.errors import InputError
from pgra.tasks import get_task, load_task, task_paths
from tests.fuzzing import FUZZ, assert_clean_exit, names, run_cli, snapshot, values

LABELS = ["pos", "neg"]
VALID = {"name": "fuzzy", "labels": LABELS, "rerank_template": "Good or bad?\n{text}",
         "demo_words": {"pos": "good", "neg": "bad"}, "reader_words": {"pos": "great", "neg": "terrible"},
         "reader_template": "{evidence} {text} It was {mask} .", "metric": "accuracy",
         "data": {"format": "jsonl", "path": "d", "files": {"train": "train.jsonl", "test": "test.jsonl"},
                  "id_column": "id"}}
TASK_KEYS = ["name", "labels", "rerank_template", "demo_words", "reader_words", "reader_template", "metric",
             "description", "source", "data", "data.format", "data.path", "data.files", "data.files.train",
             "data.files.dev", "data.files.test", "data.lmbff_layout", "data.text_column", "data.label_column",
             "data.id_column", "data.label_map", "data.dev_fraction", "data.dev_seed", "data.hf_name", "unknown"]
FORMATS = ["jsonl", "json", "csv", "tsv", "parquet", "lmbff"]  # not hf: it may reach the network
PLAUSIBLE = {"labels": [LABELS, ["pos"], [], ["pos", "pos"], [1, 2], "pos,neg", [None], [[1]]],
             "metric": ["accuracy", "mcc", "macro_f1", "f1"], "data.format": FORMATS,
             "data.lmbff_layout": ["csv", "sst2_tsv", "cola_tsv", "x"], "data.label_map": [{"1": "pos", "0": "neg"},
                                                                                          {1: "pos"}, {"x": None}],
             "data.files": [{"train": "train.jsonl"}, {"train": 5}, {"train": None}, {"train": ["a"]},
                            {"train": "../escape.jsonl"}, {"train": "/dev/null"}, {"train": "d"}, {"dev": "x"}],
             "data.dev_fraction": [0.1, 0.5, 0, 1, "0.2", -1], "data.id_column": ["", "id", "text", "nope"],
             "data.text_column": ["text", "label", "nope"], "data.label_column": ["label", "text", "nope"],
             "demo_words": [{"pos": "good", "neg": "bad"}, {"pos": 1, "neg": 2}, {"pos": None, "neg": "x"},
                            {"pos": ["a"], "neg": "b"}, {"pos": "a"}],
             "reader_words": [{"pos": "a", "neg": "a"}, {"pos": {"x": 1}, "neg": "b"}, {"pos": 1.5, "neg": True}]}


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    for p in parents:
        if not isinstance(data.get(p), dict):
            data[p] = {}
        data = data[p]
    if value is _DELETE:
        data.pop(leaf, None)
    else:
        data[leaf] = value


_DELETE = object()


@st.composite
def task_yaml(draw: st.DrawFn) -> bytes:
    """A valid task definition with up to three fields changed, deleted or given nonsense; or nonsense."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.binary(max_size=40), st.text(max_size=40).map(lambda t: t.encode("utf-8",
                                                                                                  "surrogatepass"))))
    data = json.loads(json.dumps(VALID))
    data["data"]["format"] = draw(st.sampled_from(FORMATS))
    if data["data"]["format"] == "lmbff":
        data["data"]["lmbff_layout"] = draw(st.sampled_from(["csv", "sst2_tsv", "cola_tsv"]))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):  # a valid task now and then: on to the data
        key = draw(st.sampled_from(TASK_KEYS))
        value = draw(st.one_of(st.sampled_from(PLAUSIBLE.get(key, [None])), values(), st.just(_DELETE)))
        _set(data, key, value)
    if isinstance(data.get("data"), dict) and data["data"].get("format") == "hf":
        data["data"]["format"] = "jsonl"
    try:
        return yaml.safe_dump(data, allow_unicode=True).encode()
    except (yaml.YAMLError, ValueError):
        return repr(data).encode()


row_values = st.one_of(st.sampled_from(LABELS + ["pos ", "0", "1", "", " "]), names, st.integers(), st.none(),
                       st.floats(), st.lists(st.integers(), max_size=2))
good_row = st.fixed_dictionaries({"id": st.integers(0, 20), "text": st.sampled_from(["A fine film.", "Bad."]),
                                  "label": st.sampled_from(LABELS)})
fuzzed_row = st.fixed_dictionaries({}, optional={"id": st.one_of(st.integers(0, 3), names, st.none()),
                                                    "text": st.one_of(st.sampled_from(["A fine film.", "Bad."]),
                                                                      row_values),
                                                 "label": row_values, "sentence": row_values})
rows = st.lists(st.one_of(good_row, good_row, fuzzed_row), min_size=1, max_size=5)


@st.composite
def data_file(draw: st.DrawFn, fmt: str) -> bytes:
    """A split's file in format ``fmt`` built from fuzzed rows, or fuzzed bytes."""
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=60))
    records = draw(rows)
    if fmt == "jsonl":
        lines = [json.dumps(r) for r in records] + draw(st.lists(st.sampled_from(["", "[1]", "{", "null", "[" * 3000,
                                                                                "{\"id\": " + "9" * 5000 + "}"]),
                                                               max_size=1))
        return "\n".join(lines).encode()
    if fmt == "json":
        return json.dumps(draw(st.one_of(st.just(records), values()))).encode()
    if fmt == "parquet":
        return _parquet(records) if draw(st.booleans()) else draw(st.binary(max_size=60))
    buf = io.StringIO()
    delimiter = "\t" if fmt == "tsv" or draw(st.booleans()) else ","
    writer = csv.writer(buf, delimiter=delimiter)
    columns = draw(st.sampled_from([["id", "text", "label"], ["sentence", "label"], ["label", "text"], []]))
    if columns and draw(st.booleans()):
        writer.writerow(columns)
    for r in records:
        writer.writerow([str(r.get(c, "")) for c in columns] or [str(v) for v in r.values()])
    return buf.getvalue().encode()


def _parquet(records: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{k: None if v is None else str(v) for k, v in r.items()} for r in records])
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


@st.composite
def task_folder(draw: st.DrawFn) -> tuple[bytes, dict[str, bytes]]:
    """A task YAML and the data files (by name) in its data folder ``d``."""
    text = draw(task_yaml())
    try:
        fmt = yaml.safe_load(text)["data"]["format"]
    except Exception:
        fmt = "jsonl"
    fmt = fmt if fmt in FORMATS else "jsonl"
    files = {}
    for name in ["train", *draw(st.lists(st.sampled_from(["dev", "test"]), unique=True))]:
        files[f"{name}.jsonl"] = draw(data_file(fmt))  # the YAML's files name .jsonl whatever the format
    return text, files


def _materialise(folder: Path, text: bytes, files: dict[str, bytes]) -> Path:
    (folder / "d").mkdir()
    for name, content in files.items():
        (folder / "d" / name).write_bytes(content)
    path = folder / "task.yaml"
    path.write_bytes(text)
    return path


@FUZZ
@given(task_folder(), st.sampled_from([("train",), ("train", "dev", "test"), ("test",), ("dev",)]))
def test_any_task_is_loaded_or_an_input_error(task: tuple[bytes, dict[str, bytes]], splits: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _materialise(folder, *task)
        before = snapshot(folder)
        try:
            spec = get_task(str(path))
            task_paths(spec, folder)
            data = load_task(spec, folder, splits=splits)
            assert set(data.splits) == set(splits)
            for examples in data.splits.values():
                assert examples and all(isinstance(ex.text, str) and ex.label in spec.labels for ex in examples)
        except InputError:
            pass
        assert snapshot(folder) == before


def _tasks_command(task: tuple[bytes, dict[str, bytes]], *args: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _materialise(folder, *task)
        before = snapshot(folder)
        code, _, err = run_cli(["tasks", args[0], str(path), "--data-dir", str(folder), *args[1:]])
        assert_clean_exit(code, err)
        if len(args) > 1:  # export: what it writes is in its --out
            after = {k: v for k, v in snapshot(folder).items() if k != "out" and not k.startswith("out/")}
        else:
            after = snapshot(folder)
        assert after == before


@FUZZ
@given(task_folder())
def test_tasks_show_exits_cleanly_on_any_task(task: tuple[bytes, dict[str, bytes]]) -> None:
    _tasks_command(task, "show")


@FUZZ
@given(task_folder(), st.sampled_from(["out", "out/deeper", "d", "d/out", "task.yaml"]))
def test_tasks_export_exits_cleanly_and_writes_only_its_output(task: tuple[bytes, dict[str, bytes]], out: str
                                                               ) -> None:
    """Export writes into --out or nowhere: an --out onto the task's own data or YAML is refused."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _materialise(folder, *task)
        before = snapshot(folder)
        code, _, err = run_cli(["tasks", "export", str(path), "--data-dir", str(folder), "--out", str(folder / out)])
        assert_clean_exit(code, err)
        if out.startswith("out"):
            before = {k: v for k, v in before.items() if k != "out" and not k.startswith("out/")}
            after = {k: v for k, v in snapshot(folder).items() if k != "out" and not k.startswith("out/")}
        else:  # onto the data: refused before anything is written
            assert code == 2
            after = snapshot(folder)
        assert after == before


# ------------------------------------------------------------------ what the fuzzing found (shrunk examples)

def _task(tmp_path: Path, fmt: str, train: bytes, files: Any = "train.jsonl") -> Path:
    data = json.loads(json.dumps(VALID))
    data["data"].update(format=fmt, files={"train": files})
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "train.jsonl").write_bytes(train)
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("fmt", "train", "message"), [
    ("jsonl", b'{"id": 1, "text": "Fine.", "label": "pos"}\n\x80\n', r"train\.jsonl:2: undecodable bytes \(not UTF-8\)"),
    ("jsonl", b"[" * 3000, r"train\.jsonl:1: invalid JSON \(nested too deeply\)"),
    ("json", b'[{"id": 1, "text": "Fine.", "label": "pos"}, 5]', r"train\.jsonl:2: item 2 of the list is 5"),
    ("json", b'[{"id": 1, "text": "Fine\xff"}]', r"train\.jsonl: not UTF-8"),
    ("csv", b"id,text,label\n1,Fine\xff,pos\n", r"train\.jsonl:2: undecodable bytes \(not UTF-8\)"),
    ("tsv", b"id\ttext\tlabel\n1\t\"" + b"x" * 70 + b"\n", r"train\.jsonl: unreadable CSV"),
    ("parquet", b"PAR1 not really", r"train\.jsonl: not a readable Parquet file"),
])
def test_unreadable_data_file_is_an_input_error(tmp_path: Path, fmt: str, train: bytes, message: str) -> None:
    old = csv.field_size_limit(64)  # an unclosed quote running past the limit, without writing 2 GB
    try:
        with pytest.raises(InputError, match=message):
            load_task(get_task(str(_task(tmp_path, fmt, train))), tmp_path, splits=("train",))
    finally:
        csv.field_size_limit(old)


@pytest.mark.parametrize(("files", "message"), [(None, r"field 'data\.files\.train'.*expected str, got None"),
                                                 (5, r"data file not found")])
def test_a_data_file_name_that_is_not_a_string_is_an_input_error(tmp_path: Path, files: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        task = get_task(str(_task(tmp_path, "jsonl", b"", files=files)))
        task_paths(task, tmp_path)
        load_task(task, tmp_path, splits=("train",))


def test_csv_row_with_more_values_than_the_header_is_an_input_error(tmp_path: Path) -> None:
    train = b'id,text,label\n1,"Fine.",pos\n2,Fine, really.,pos\n'
    with pytest.raises(InputError, match=r"train\.jsonl:3: 4 columns, the header has 3"):
        load_task(get_task(str(_task(tmp_path, "csv", train))), tmp_path, splits=("train",))


def test_tasks_show_with_a_train_split_of_demonstrations_only_exits_cleanly(tmp_path: Path) -> None:
    path = _task(tmp_path, "jsonl", b'{"id": 0, "text": "A fine film.", "label": "pos"}')
    code, out, err = run_cli(["tasks", "show", str(path), "--data-dir", str(tmp_path)])
    assert (code, err) == (0, "")
    assert "(no example prompt: train has 1 example(s), all shown as demonstrations)" in out
