"""Fuzzing the interchange reader (pgra/data/interchange.py, the JSONL between stages). Any file is a list of records
every stage can use (an id, a non-empty text, a known label, evidence with an id and a text) or an InputError
naming the file and line (one ``error:`` line through ``pgra peek``), never another exception. The same of FiD's
JSON arrays (``read_fid``, ``pgra fid import``): nested, huge integers, NaN, wrong types. Plain regression tests of
what the fuzzing found follow the properties."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgra.core.errors import InputError
from pgra.data.interchange import read_fid, read_records
from tests.fuzzing import FUZZ, assert_clean_exit, names, run_cli, snapshot, values

LABELS = ["0", "1"]
field_values = st.one_of(st.sampled_from(["0", "1", 0, 1, "", " ", "x", None, True, 1.5]), names, values())
ctx = st.one_of(st.fixed_dictionaries({}, optional={"id": field_values, "text": field_values,
                                                    "score": field_values, "retrieval_rank": field_values}),
                field_values)
record = st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]), field_values),
    "text": st.one_of(st.just("A sentence."), field_values), "label": field_values,
    "ctxs": st.one_of(st.lists(ctx, max_size=3), field_values)})
raw_lines = st.sampled_from(["", "   ", "{", "[]", "null", "\ufeff{}", '{"id": 1, "text": "a"}', "[" * 3000,
                             '{"id": ' + "9" * 5000 + ', "text": "a"}', '{"id": NaN, "text": "a"}'])


@st.composite
def jsonl_file(draw: st.DrawFn) -> bytes:
    """Lines of fuzzed records (well-formed JSON of nearly the right shape), odd lines, or fuzzed bytes."""
    if draw(st.integers(0, 7)) == 0:
        return draw(st.binary(max_size=80))
    lines = draw(st.lists(st.one_of(record.map(json.dumps), record.map(json.dumps), raw_lines), max_size=5))
    content = "\n".join(lines).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 5)) == 0:  # a stray byte that is not UTF-8
        at = draw(st.integers(0, len(content)))
        content = content[:at] + b"\xff" + content[at:]
    return content


def _check_usable(rec: dict[str, Any], labels: list[str] | None) -> None:
    """What the stages rely on in a record the reader returned (reader/data.py, rerank, predictions, peek)."""
    str(rec["id"])
    assert isinstance(rec["text"], str) and rec["text"].strip()
    if labels is not None and "label" in rec:
        assert str(rec["label"]) in labels
    assert isinstance(rec.get("ctxs", []), list)
    for c in rec.get("ctxs", []):
        assert isinstance(c, dict) and isinstance(c["text"], str)
        str(c["id"])
        if c.get("score") is not None:
            float(c["score"])


@FUZZ
@given(jsonl_file(), st.booleans())
def test_any_interchange_file_is_records_or_an_input_error(content: bytes, with_labels: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "test.jsonl"
        path.write_bytes(content)
        try:
            records = list(read_records(path, labels=LABELS if with_labels else None))
        except InputError as e:
            assert str(path) in str(e)
            return
        for rec in records:
            _check_usable(rec, LABELS if with_labels else None)


@FUZZ
@given(jsonl_file())
def test_peek_exits_cleanly_on_any_interchange_file(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test.jsonl").write_bytes(content)
        before = snapshot(folder)
        code, _, err = run_cli(["peek", str(folder), "-n", "5", "-d", "5"])
        assert_clean_exit(code, err)
        assert snapshot(folder) == before


# ------------------------------------------------------------------ FiD JSON arrays (issue 53)

WORDS = {"terrible": "0", "great": "1", "negative": "0", "positive": "1"}  # the mr task's reader and demo words
fid_values = st.one_of(st.sampled_from(["great", "Terrible", "<extra_id_0> great <extra_id_1>", "0", 1, "", None,
                                        True, 1.5, float("nan"), float("inf"), 10**400, "nan", "1e999", "0.5"]),
                       names, values())
fid_ctx = st.one_of(st.fixed_dictionaries({}, optional={"id": fid_values, "title": fid_values, "text": fid_values,
                                                        "score": fid_values, "has_answer": fid_values}),
                    fid_values)
fid_item = st.one_of(st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]), fid_values),
    "question": st.one_of(st.just("A question?"), fid_values),
    "answers": st.one_of(st.lists(fid_values, max_size=2), fid_values), "target": fid_values,
    "ctxs": st.one_of(st.lists(fid_ctx, max_size=3), fid_values)}), fid_values)
fid_raw = st.sampled_from(["", "[", "{}", "null", "[]", "[" * 3000 + "]" * 3000, "[" * 100_000,
                           '[{"id": ' + "9" * 5000 + ', "question": "a", "target": "great"}]',
                           '[{"question": "a", "target": "great", "ctxs": [{"text": "e", "score": NaN}]}]',
                           '[{"question": "a", "target": "great", "ctxs": [{"text": "e", "score": -Infinity}]}]',
                           '[{"question": "a", "target": "great", "ctxs": [{"text": "e", "score": 1' + "0" * 400 + '}]}]',
                           '[{"question": "a", "answers": ' + "[" * 2000 + "]" * 2000 + "}]"])


@st.composite
def fid_file(draw: st.DrawFn) -> bytes:
    """A FiD JSON array of fuzzed items (well-formed JSON of nearly the right shape, NaN and huge integers
    included), a raw document (deep nesting, a 5,000-digit id ...), or fuzzed bytes."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=80))
    if kind == 1:
        return draw(fid_raw).encode()
    items = draw(st.one_of(st.lists(fid_item, max_size=4), fid_values))
    return json.dumps(items).encode("utf-8", "surrogatepass")


def _check_usable_fid(rec: dict[str, Any], require_labels: bool) -> None:
    _check_usable(rec, ["0", "1"])
    assert not require_labels or rec.get("label") in ("0", "1")
    for c in rec.get("ctxs", []):
        assert c.get("score") is None or abs(float(c["score"])) < float("inf")
        assert isinstance(c.get("title", ""), str)


@FUZZ
@given(fid_file(), st.booleans())
def test_any_fid_file_is_records_or_an_input_error(content: bytes, require_labels: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.json"
        path.write_bytes(content)
        try:
            records = read_fid(path, ["0", "1"], WORDS, require_labels=require_labels)
        except InputError as e:
            assert str(path) in str(e)
            return
        for rec in records:
            _check_usable_fid(rec, require_labels)
        json.dumps(records, allow_nan=False)  # what `fid import` writes: plain JSON


@FUZZ
@given(fid_file())
def test_fid_import_exits_cleanly_on_any_fid_file(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "train.json").write_bytes(content)
        (folder / "dev.json").write_text('[{"question": "A question?", "answers": ["great"]}]')
        before = snapshot(folder)
        code, _, err = run_cli(["fid", "import", "--task", "mr", "--train", str(folder / "train.json"), "--dev",
                                str(folder / "dev.json"), "--out", str(folder / "out")])
        assert_clean_exit(code, err)
        after = snapshot(folder)
        assert {p: after.get(p) for p in before} == before
        assert all(p == "out" or p.startswith("out/") for p in after if p not in before)
        if code:
            assert not (folder / "out").exists()


# ------------------------------------------------------------------ what the fuzzing found (shrunk examples)

def _read(tmp_path: Path, content: bytes) -> list[dict[str, Any]]:
    path = tmp_path / "test.jsonl"
    path.write_bytes(content)
    return list(read_records(path, labels=LABELS))


@pytest.mark.parametrize(("content", "message"), [
    (b'{"id": 0, "text": "a"}\n{"id": 1, "text": "b\xff"}\n', r"test\.jsonl:2: undecodable bytes \(not UTF-8\)"),
    (b"[" * 3000, r"test\.jsonl:1: invalid JSON \(nested too deeply\)"),
    (b'{"id": ' + b"9" * 5000 + b', "text": "a"}', r"test\.jsonl:1: invalid JSON \(Exceeds the limit"),
    (b'{"id": 0, "text": "a", "ctxs": 0}', r":1 \(field 'ctxs'\): must be a list"),
    (b'{"id": 0, "text": "a", "ctxs": null}', r":1 \(field 'ctxs'\): must be a list"),
    (b'{"id": 0, "text": "a", "ctxs": [{"id": 0, "text": 5}]}', r"ctxs\[0\] needs .* a string 'text'"),
    (b'{"id": 0, "text": "a", "ctxs": [{"id": 0, "text": "e", "score": "high"}]}', r"ctxs\[0\]\.score must be a "),
    (b'{"id": null, "text": "a"}', r":1 \(field 'id'\): an id is a string or an integer"),
])
def test_unreadable_interchange_line_is_an_input_error(tmp_path: Path, content: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message):
        _read(tmp_path, content)


def test_interchange_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    assert _read(tmp_path, b'\xef\xbb\xbf{"id": 0, "text": "a", "label": "1"}\n\n') == [
        {"id": 0, "text": "a", "label": "1"}]
