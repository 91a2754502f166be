"""Fuzzing config loading (pgra/core/config.py): YAML files with ``base`` chains and ``key=value`` overrides, for every
stage's config and the experiment's. Any input is a config or an InputError (one ``error:`` line through the
CLI), never another exception, and loading writes nothing. Plain regression tests of what the fuzzing found
follow the properties."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pgra.core.config import check_config, load_config, parse_overrides, resolve_yaml, safe_load_yaml
from pgra.core.errors import InputError
from tests.fuzzing import FUZZ, TRICKY, assert_clean_exit, names, run_cli, snapshot, values


def _yaml_classes() -> list[type]:
    from pgra.cli import COMMANDS

    return [cmd.config_class() for cmd in COMMANDS.values() if cmd.from_yaml]


CLASSES = _yaml_classes()


def _leaves(cls: type, prefix: str = "") -> dict[str, list[Any]]:
    """Every dotted key of config ``cls`` with plausible values: its default and declared choices (so that
    examples get past the type checks to the deeper ones)."""
    out: dict[str, list[Any]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out.update(_leaves(tp, f"{prefix}{f.name}."))
            continue
        plausible: list[Any] = []
        if f.default is not dataclasses.MISSING:
            plausible.append(f.default)
        choices = f.metadata.get("choices")
        if choices is not None:
            plausible += list(choices() if callable(choices) else choices)[:6]
        out[prefix + f.name] = plausible or [None]
    return out


LEAVES = {cls: _leaves(cls) for cls in CLASSES}


def _nest(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``[("a.b", 1)]`` as ``{"a": {"b": 1}}``; a pair that collides with an earlier one is dropped."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        node = out
        *parents, leaf = key.split(".")
        if any(not isinstance(node := node.setdefault(p, {}), dict) for p in parents):
            continue
        node[leaf] = value
    return out


@st.composite
def config_files(draw: st.DrawFn, cls: type) -> tuple[list[bytes], list[str]]:
    """Up to three YAML files (``c0.yaml`` first) whose ``base`` keys may name each other (cycles included), a
    missing file, a folder or nonsense; and ``key=value`` overrides."""
    leaves = LEAVES[cls]
    key = st.one_of(st.sampled_from(sorted(leaves)), names)
    pair = key.flatmap(lambda k: st.tuples(st.just(k), st.one_of(st.sampled_from(leaves.get(k, [None])),
                                                                 values())))
    base = st.one_of(st.sampled_from(["c0.yaml", "c1.yaml", "c2.yaml", "missing.yaml", "sub", ".", "/",
                                      "x" * 5000, "../c0.yaml"]), scalars_or_lists())
    files = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["mapping", "mapping", "mapping", "text", "bytes"]))
        if kind == "mapping":
            data = _nest(draw(st.lists(pair, max_size=6)))
            if draw(st.booleans()):
                data["base"] = draw(st.one_of(base, st.lists(base, max_size=3)))
            try:
                files.append(yaml.safe_dump(data, allow_unicode=True).encode())
            except (yaml.YAMLError, ValueError):  # a value safe_dump cannot write: write text instead
                files.append(repr(data).encode())
        elif kind == "text":
            files.append(draw(st.one_of(st.text(max_size=60), st.sampled_from(TRICKY))).encode("utf-8",
                                                                                            "surrogatepass"))
        else:
            files.append(draw(st.binary(max_size=40)))
    overrides = draw(st.lists(st.one_of(
        st.tuples(key, st.one_of(st.sampled_from(TRICKY), st.text(max_size=10))).map(lambda kv: f"{kv[0]}={kv[1]}"),
        st.sampled_from(TRICKY)), max_size=3))
    return files, overrides


def scalars_or_lists() -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.integers(), st.booleans(), st.text(max_size=8), st.lists(st.integers(), max_size=2))


def _write(folder: Path, files: list[bytes]) -> Path:
    (folder / "sub").mkdir()
    for i, content in enumerate(files):
        (folder / f"c{i}.yaml").write_bytes(content)
    return folder / "c0.yaml"


def _load(cls: type, path: Path, overrides: list[str]) -> Any:
    """What a stage does with ``--config PATH KEY=VALUE...`` before it runs."""
    cfg = load_config(cls, path, parse_overrides(overrides))
    assert isinstance(cfg, cls)
    check_config(cfg)
    return cfg


@FUZZ
@given(st.data())
def test_any_config_is_a_config_or_an_input_error(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from(CLASSES), label="class")
    files, overrides = data.draw(config_files(cls), label="files")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, files)
        before = snapshot(folder)
        with contextlib.suppress(InputError):
            _load(cls, path, overrides)
        assert snapshot(folder) == before


@FUZZ
@given(st.data())
def test_config_show_exits_cleanly_on_any_config(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from(CLASSES), label="class")
    files, overrides = data.draw(config_files(cls), label="files")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, files)
        before = snapshot(folder)
        code, _, err = run_cli(["config", "show", "--config", str(path), *overrides])
        assert_clean_exit(code, err)
        assert snapshot(folder) == before


@FUZZ
@given(st.data())
def test_any_experiment_config_plans_or_is_an_input_error(data: st.DataObject) -> None:
    """The experiment's config through everything ``pgra experiment`` checks before its first cell: the grid
    (tasks, methods, overrides), each cell's merged settings and its stages' configs and keys."""
    from pgra.analysis.config import AnalyzeConfig
    from pgra.experiment.config import cell_settings
    from pgra.experiment.grid import Experiment

    files, overrides = data.draw(config_files(AnalyzeConfig), label="files")
    scoped = st.dictionaries(st.sampled_from(["wiki_topic", "sst2", "fid", "pgra", "knn_vote", "nope"]),
                             st.one_of(values(), st.dictionaries(st.sampled_from(["reader", "rerank", "retrieve",
                                                                                  "data_dir", "icl", "index"]),
                                                                 values(), max_size=2)), max_size=2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, files)
        extra = {"out": str(folder / "exp"), "index": {"out": str(folder / "index")},
                 "task_overrides": data.draw(scoped, label="task_overrides"),
                 "method_overrides": data.draw(scoped, label="method_overrides")}
        before = snapshot(folder)
        try:
            from pgra.core.config import merge

            cfg = load_config(AnalyzeConfig, path, merge(extra, parse_overrides(overrides)))
            grid = Experiment(cfg)
            for task in cfg.tasks:
                for method in cfg.methods:
                    cell_settings(cfg, task, method)
                grid.retrieve_config(task)
                grid.rerank_config(task)
                grid.stage_keys(task)
        except InputError:
            pass
        assert snapshot(folder) == before


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=30),
                          st.tuples(names, st.text(max_size=30)).map("=".join)), max_size=4))
def test_any_override_is_parsed_or_an_input_error(items: list[str]) -> None:
    try:
        parsed = parse_overrides(items)
    except InputError:
        return
    assert isinstance(parsed, dict)


# ------------------------------------------------------------------ what the fuzzing found (shrunk examples)

def test_override_of_a_key_and_of_a_key_inside_it_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"field 'a.b'.*earlier override sets 'a' to 1"):
        parse_overrides(["a=1", "a.b=2"])


def test_deeply_nested_override_value_is_an_input_error() -> None:
    with pytest.raises(InputError, match="field 'a'.*nested too deeply"):
        parse_overrides(["a=" + "[" * 5000])


def test_deeply_nested_yaml_is_an_input_error() -> None:
    with pytest.raises(yaml.YAMLError, match="nested too deeply"):
        safe_load_yaml("[" * 5000)


def test_config_file_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"epochs: \xff\n")
    with pytest.raises(InputError, match=r"c\.yaml.*not UTF-8"):
        resolve_yaml(path)


def test_base_with_a_name_too_long_for_the_file_system_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"base: {'x' * 5000}\n")
    with pytest.raises(InputError, match=r"field 'base'.*base config 'xxx.*not accessible"):
        resolve_yaml(path)


def test_a_number_too_large_for_a_float_is_an_input_error() -> None:
    from pgra.core.config import from_dict
    from pgra.tasks import DataSpec

    with pytest.raises(InputError, match=r"field 'dev_fraction'.*expected float"):
        from_dict(DataSpec, {"dev_fraction": 10**400})


def test_mapping_values_take_the_declared_type() -> None:
    from pgra.core.config import from_dict
    from pgra.tasks import DataSpec

    assert from_dict(DataSpec, {"files": {"train": 5}, "label_map": {1: "pos"}}).files == {"train": "5"}
    assert from_dict(DataSpec, {"label_map": {1: "pos", 0: 2}}).label_map == {"1": "pos", "0": "2"}
    with pytest.raises(InputError, match=r"field 'files.train'.*expected str, got None"):
        from_dict(DataSpec, {"files": {"train": None}})


def test_output_folder_with_a_nul_character_is_an_input_error() -> None:
    from pgra.retrieval.config import IndexConfig

    cfg = load_config(IndexConfig, None, {"out": "idx\0x", "corpus": "c.txt"})
    with pytest.raises(InputError, match=r"field 'out'.*not found \(the name holds a NUL character\)"):
        check_config(cfg)
