"""Fuzzing the ``--compare`` targets reader (pgra/evaluation/targets.py). Any file is a table of published numbers
the report can put beside its cells (method and task names as text, each value a finite percentage, each tolerance
finite and >= 0 or none, the source text) or an InputError naming the file (one ``error:`` line through ``pgra
report --compare``), never another exception; its text reaches ``results.md`` escaped. Plain regression tests of
what the fuzzing found follow the properties."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pgra.core.errors import InputError
from pgra.evaluation.targets import compare, format_comparison, load_targets
from tests.fuzzing import FUZZ, assert_clean_exit, names, run_cli, scalars, snapshot, values

MARKUP = ["a | b", "x\n## heading", "<script>alert(1)</script>", "<!--", "&amp;", "[l](javascript:x)", "`code`",
          "*b*", "\r\n", "\u2028", "\x85", "\\|"]
texts = st.one_of(scalars, st.sampled_from(MARKUP), st.text(max_size=30))
keys = st.one_of(names, st.sampled_from(["sst2", "cr", "average", "fid", "pgra"]), scalars)
entry = st.one_of(st.floats(-100, 100), scalars, values(),
                  st.fixed_dictionaries({}, optional={"value": st.one_of(st.floats(-100, 100), scalars),
                                                      "tolerance": scalars, "note": scalars}))
per_task = st.one_of(st.dictionaries(keys, entry, max_size=3), values())
document = st.fixed_dictionaries({}, optional={
    "source": st.one_of(texts, values()), "tolerance": scalars,
    "methods": st.one_of(st.dictionaries(keys, per_task, max_size=3), values()), "extra": values()})
raw = st.sampled_from([
    "", "~", "[]", "methods:", "methods: {}", "methods: {pgra: {sst2: 1e999}}", "methods: {pgra: {sst2: .nan}}",
    "methods: {pgra: {sst2: 70}}\ntolerance: " + "9" * 500, "methods: {pgra: {sst2: 70}}\ntolerance: .inf",
    "methods: {pgra: {sst2: {value: 70, tolerance: " + "9" * 500 + "}}}", "methods: {pgra: {sst2: 70, sst2: 71}}",
    "methods: {pgra: {sst2: 70}}\nmethods: {fid: {sst2: 70}}", "methods: &a {pgra: *a}",
    "methods: {pgra: {? [1, 2] : 3}}", "methods: {1: {2: 3}}", "methods: {pgra: {null: 3}}",
    "!!python/object/apply:os.system ['true']", "methods:\n\tpgra: 1", "[" * 3000, "a: &a [*a]",
    "x: &x [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(f"x{i}: &x{i} [*x{i - 1 if i else ''}, *x{i - 1 if i else ''}, "
                                                         f"*x{i - 1 if i else ''}, *x{i - 1 if i else ''}]\n"
                                                         for i in range(12)),
    "methods: {pgra: {sst2: 70}}\nsource: !!binary aGVsbG8=", "methods: {pgra: {sst2: 2020-01-01}}",
])


@st.composite
def targets_file(draw: st.DrawFn) -> bytes:
    """A YAML document of nearly the right shape, an odd document, arbitrary text, or bytes (some not UTF-8)."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=80))
    if kind == 1:
        return draw(st.text(max_size=80)).encode("utf-8", "surrogatepass")
    if kind == 2:
        return draw(raw).encode("utf-8")
    return yaml.safe_dump(draw(document), allow_unicode=True).encode("utf-8", "surrogatepass")


def _check_usable(targets: dict[str, Any], path: Path) -> None:
    """What the report relies on in a loaded targets table."""
    assert targets["file"] == str(path) and isinstance(targets["source"], str)
    assert isinstance(targets["methods"], dict) and targets["methods"]
    for method, per_task in targets["methods"].items():
        assert isinstance(method, str) and isinstance(per_task, dict)
        for task, target in per_task.items():
            assert isinstance(task, str) and set(target) == {"value", "tolerance"}
            assert isinstance(target["value"], float) and -100 <= target["value"] <= 100
            tol = target["tolerance"]
            assert tol is None or (isinstance(tol, float) and math.isfinite(tol) and tol >= 0)


def _report(targets: dict[str, Any]) -> dict[str, Any]:
    """A report whose grid ran every method and task of ``targets`` (each at 50%), compared with them."""
    methods = list(targets["methods"])
    tasks = sorted({t for per in targets["methods"].values() for t in per if t != "average"})
    summary = {m: {t: {"mean": 0.5} for t in [*tasks, "average"]} for m in methods}
    report = {"methods": methods, "tasks": tasks, "summary": summary}
    report["compare"] = compare(report, targets)
    return report


@FUZZ
@given(targets_file())
def test_any_targets_file_loads_or_is_an_input_error(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "targets.yaml"
        path.write_bytes(content)
        try:
            targets = load_targets(path)
        except InputError as e:
            assert str(path) in str(e)
            return
        _check_usable(targets, path)
        lines = format_comparison(_report(targets))
        assert lines and all("\n" not in line and "\r" not in line for line in lines)
        for line in lines:  # the file's text shows as text: no tag of its own, no line of its own
            if line.startswith(("Source: ", "## Against")):
                assert "<" not in line and ">" not in line
                assert "|" not in line.replace("\\|", "")


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    """The hand-made grid of tests/test_report.py (sst2 and cr x fid, pgra x 3 seeds + knn_vote)."""
    from tests.test_report import _cell

    root = tmp_path_factory.mktemp("fuzz-targets") / "exp"
    for seed, (fid, pgra) in zip((1, 2, 3), ((6, 8), (7, 9), (8, 7)), strict=True):
        for task, f, p in (("sst2", fid, pgra), ("cr", 5, 6)):
            _cell(root, task, "fid", seed, f)
            _cell(root, task, "pgra", seed, p)
    return root


@FUZZ
@given(content=targets_file())
def test_report_exits_cleanly_on_any_targets_file(grid: Path, content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "targets.yaml"
        path.write_bytes(content)
        before = snapshot(Path(tmp))
        code, _, err = run_cli(["report", str(grid), "--bootstrap", "20", "--compare", str(path)])
        assert_clean_exit(code, err)
        if code:
            assert str(path) in err
        assert snapshot(Path(tmp)) == before  # the targets file is read, never written


@pytest.mark.parametrize("text, field, message", [
    ("methods: &a {pgra: *a}", None, "holds itself"),  # a recursive alias: was endless work, then MemoryError
    ("a: &a [1, &b [*b]]\nmethods: {pgra: {sst2: 70}}", None, "holds itself"),
    ("methods: {pgra: {sst2: 70}}\ntolerance: " + "9" * 400, "tolerance", "a tolerance is"),  # was OverflowError
    ("methods: {pgra: {sst2: {value: 70, tolerance: " + "9" * 400 + "}}}", "methods.pgra.sst2.tolerance",
     "a tolerance is"),
    ("methods: {1: {sst2: 70}}", "methods", "a method name is non-empty text"),  # was loaded as '1'
    ("methods: {pgra: {null: 70}}", "methods.pgra", "a task name is non-empty text"),  # was loaded as 'None'
    ("methods: {'': {}}", "methods", "a method name"),  # was an empty table
    ("methods: {pgra: {}}", "methods.pgra", "must map task names"),
    ("methods: {pgra: {sst2: 70}}\nsource: [a]", "source", "a source is text"),  # was written as "['a']"
])
def test_what_the_fuzzing_found(tmp_path, text, field, message):
    path = tmp_path / "targets.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as e:
        load_targets(path)
    assert e.value.path == str(path) and e.value.field == field
