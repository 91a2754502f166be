"""Fuzzing the reader of an exported manifest (pgra/serving/export.py's ``read_export``, which ``Pipeline.load`` and
``pgra predict`` call before any model loads): any ``export.json`` is a spec whose every part ``load_export`` reads
has its type, or an InputError naming the file, never another exception (a KeyError, a TypeError ...)."""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pgra.core.errors import InputError
from pgra.serving.export import read_export
from tests.fuzzing import FUZZ, names, values

field_values = st.one_of(st.sampled_from([0, 1, 2, -1, True, False, None, "", "x", "/tmp/index", 1.5, [], {},
                                          ["a"], [1], 10**30, math.nan]), names, values())
VALID = {"kind": "export", "pgra": "0.1", "run": "/runs/x", "n_passages": 2, "k": 4, "exclude_query_text": False,
         "excluded": ["3"], "index": {"copied": False, "path": "/tmp/idx", "corpus_content_sha256": "ab12"},
         "reranked": {"lm": "models/lm", "lm_fingerprint": "f", "copied_lm": False, "top_d": 2, "k": 4}}
PATHS = [(k,) for k in VALID] + [("index", k) for k in VALID["index"]] + [("reranked", k) for k in VALID["reranked"]]


@st.composite
def spec(draw: st.DrawFn) -> dict[str, Any]:
    """A valid export spec (with or without its index and reranking) with a few fields replaced or deleted."""
    value = json.loads(json.dumps(VALID))
    if draw(st.booleans()):
        value["reranked"] = None
        if draw(st.booleans()):
            value["index"] = None
    for where in draw(st.lists(st.sampled_from(PATHS), max_size=3, unique=True)):
        node = value
        for key in where[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        if draw(st.integers(0, 3)) == 0:
            node.pop(where[-1], None)
        else:
            node[where[-1]] = copy.deepcopy(draw(field_values))  # never one object in two places
    return value


@st.composite
def export_file(draw: st.DrawFn) -> bytes:
    """An export.json: a fuzzed spec (well-formed JSON of nearly the right shape), any JSON value, or any bytes."""
    which = draw(st.integers(0, 7))
    if which == 0:
        return draw(st.binary(max_size=80))
    if which == 1:
        return draw(st.sampled_from([b"", b"{", b"[" * 3000, b'{"kind": "export", "k": ' + b"9" * 5000 + b"}",
                                     b"\xef\xbb\xbf{}", b'{"kind": "export", "n_passages": NaN}']))
    value = draw(values()) if which == 2 else draw(spec())
    return json.dumps(value).encode("utf-8", "surrogatepass")


def _check_usable(spec: dict[str, Any]) -> None:
    """What load_export and the model card rely on in a spec read_export returned."""
    assert spec["kind"] == "export" and isinstance(spec["n_passages"], int)
    ix, r = spec["index"], spec["reranked"]
    if ix is None:
        assert r is None
        return
    assert isinstance(ix["copied"], bool) and Path(ix["path"]) and isinstance(ix["corpus_content_sha256"], str)
    assert isinstance(spec["k"], int) and spec["k"] >= 1 and isinstance(spec["exclude_query_text"], bool)
    assert all(isinstance(i, str) for i in frozenset(spec["excluded"]))
    if r is not None:
        assert Path(r["lm"]) and isinstance(r["copied_lm"], bool)
        assert all(isinstance(r[n], int) and r[n] >= 1 for n in ("top_d", "k"))


@settings(FUZZ, max_examples=FUZZ.max_examples * 5)  # a read costs a millisecond: five times the usual examples
@given(export_file())
def test_any_export_json_loads_or_is_an_input_error(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "export.json"
        path.write_bytes(content)
        try:
            spec = read_export(tmp)
        except InputError as e:
            assert str(path) in str(e)
            return
        _check_usable(spec)
