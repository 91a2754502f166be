"""Config values that become path components (splits, methods, seeds, task names, analysis.retrievers keys ...)
are declared ``option(path_segment=True)`` and checked in one place (:func:`pgra.core.config.check_path_segments`,
built on :func:`pgra.storage.artifacts.safe_name`): every such option of every config class refuses a value that would
lead outside its folder, with one error naming the field, before anything is read or written."""

from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path

import pytest
import yaml

from pgra.cli import COMMANDS
from pgra.core.config import check_config, from_dict, section_type, to_dict
from pgra.core.errors import InputError
from pgra.tasks import TaskSpec, get_task
from tests.conftest import one_error_line

ROOT = Path(__file__).resolve().parents[1]
BAD = ["../x", "x/../../y", "/tmp/x", "a/b", "a\\b", ".", "..", "", "a\x00b", "x" * 101]


# ---------------------------------------------------------------- every config class and its path options

def _roots() -> dict[str, type]:
    """The config classes the enumeration starts from: every command's, and a task's spec (read from YAML)."""
    roots = {name: command.config_class() for name, command in COMMANDS.items()}
    roots["task YAML"] = TaskSpec
    return roots


def _leaves(cls: type, prefix: str = "", owner: str = ""):
    """(dotted key, owning class, field) of every leaf option of ``cls``, nested sections included."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = section_type(hints[f.name])
        inner = [t for t in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(t)]
        if inner:
            yield from _leaves(inner[0], f"{prefix}{f.name}.")
        else:
            owning = next(c for c in cls.__mro__ if f.name in getattr(c, "__annotations__", {}))
            yield prefix + f.name, owning, f


def _classes(cls: type, seen: dict[str, type]) -> dict[str, type]:
    seen[cls.__name__] = cls
    for b in cls.__mro__[1:]:
        if dataclasses.is_dataclass(b):
            seen[b.__name__] = b
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        for t in (hints[f.name], *typing.get_args(hints[f.name])):
            parts = t.__section_parts__() if hasattr(t, "__section_parts__") else ()  # a registry's parts' options
            for part in (section_type(t), *parts):
                if dataclasses.is_dataclass(part) and part.__name__ not in seen:
                    _classes(part, seen)
    return seen


def _marked() -> list[tuple[str, str, dataclasses.Field]]:
    """(root, key, field) of every option declared ``path_segment``, each field once (at its first root)."""
    out, seen = [], set()
    for root, cls in _roots().items():
        for key, _, f in _leaves(cls):
            if f.metadata.get("path_segment") and id(f) not in seen:
                seen.add(id(f))
                out.append((root, key, f))
    return out


def test_the_enumeration_reaches_every_config_class():
    """Every class of pgra that declares an ``option(...)`` is reached from the roots (a config class added later
    is enumerated, or this test names it)."""
    declared = set()
    for path in (ROOT / "pgra").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(s, ast.AnnAssign) and isinstance(s.value, ast.Call)
                    and getattr(s.value.func, "id", None) == "option" for s in node.body):
                declared.add(node.name)
    reached: dict[str, type] = {}
    for cls in _roots().values():
        _classes(cls, reached)
    # BatchDefaults: made inside pgra.lm.causal_lm.lm_config, reached under the names of the classes it makes
    assert declared - set(reached) - {"BatchDefaults"} == set()
    assert len(declared) >= 30


# the options known to become (part of) a path, by root and key: each must be declared path_segment
KNOWN = {
    "experiment": ["methods", "seeds", "retrieve.splits", "rerank.splits", "icl.splits", "reader.test_split",
                   "analysis.split", "analysis.retrievers", "analysis.leakage.splits", "analysis.sweep.seeds"],
    "retrieve": ["splits"], "rerank": ["splits"], "icl": ["splits"], "train": ["test_split"],
    "evaluate": ["split"], "report": ["split"], "peek": ["split"], "task YAML": ["name"],
}
# options named like a split that never become a path: the split of a Hugging Face dataset corpus (given to
# `datasets`), and a task's map of its splits (train, dev, test) to a dataset's split names
NOT_PATHS = {("IndexConfig", "split"), ("SimCSEConfig", "split"), ("DataSpec", "hf_splits")}


def test_the_known_path_building_options_are_marked():
    roots = _roots()
    for root, keys in KNOWN.items():
        leaves = {key: f for key, _, f in _leaves(roots[root])}
        unmarked = [k for k in keys if not leaves[k].metadata.get("path_segment")]
        assert not unmarked, f"{root}: {unmarked} become paths but are not declared option(path_segment=True)"


def test_every_split_method_seed_or_retriever_option_is_marked():
    """An option named like a split, the methods, the seeds or the retrievers becomes a path somewhere; one added
    later without the mark fails here."""
    def path_like(name: str) -> bool:
        return name in ("split", "splits", "methods", "seeds", "retrievers") or name.endswith(("_split", "_splits"))

    unmarked = sorted({(owner.__name__, f.name) for cls in _roots().values() for _, owner, f in _leaves(cls)
                       if path_like(f.name) and not f.metadata.get("path_segment")} - NOT_PATHS)
    assert unmarked == []


def test_there_are_path_options_to_check():
    marked = _marked()
    assert len(marked) >= 14 and {"analysis.retrievers", "split", "name"} <= {key for _, key, _ in marked}


# ---------------------------------------------------------------- each refuses every bad name

def _nested(key: str, value) -> dict:
    *parents, leaf = key.split(".")
    data = {leaf: value}
    for p in reversed(parents):
        data = {p: data}
    return data


def _as_value(bad: str, tp):
    origin = typing.get_origin(tp)
    if origin is dict or tp is dict:
        return {bad: {}}
    if origin in (list, tuple):
        return [bad]
    return bad


def _base(root_cls: type) -> dict:
    return to_dict(get_task("wiki_topic")) if root_cls is TaskSpec else {}


def _type_of(root_cls: type, key: str):
    cls = root_cls
    *parents, leaf = key.split(".")
    for p in parents:
        cls = section_type(typing.get_type_hints(cls)[p])
    return typing.get_type_hints(cls)[leaf]


def _path_options() -> list[tuple[str, str, dataclasses.Field]]:
    """Every option declared path_segment, and every one known to become a path (marked or not)."""
    out = _marked()
    seen = {id(f) for _, _, f in out}
    roots = _roots()
    for root, keys in KNOWN.items():
        leaves = {key: f for key, _, f in _leaves(roots[root])}
        out += [(root, k, leaves[k]) for k in keys if id(leaves[k]) not in seen]
        seen |= {id(leaves[k]) for k in keys}
    return out


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_every_path_option_refuses_a_name_leading_elsewhere(bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    roots = _roots()
    checked = 0
    for root, key, f in _path_options():
        cls = roots[root]
        value = _as_value(bad, _type_of(cls, key))
        if value == "" and f.metadata.get("path_segment") == "optional":  # an empty string means none there
            from_dict(cls, {**_base(cls), **_nested(key, value)})
            continue
        # read from YAML or key=value ...
        with pytest.raises(InputError) as e:
            from_dict(cls, {**_base(cls), **_nested(key, value)})
        assert e.value.field == key and "\n" not in str(e.value), (root, key, str(e.value))
        # ... or built in Python: refused when the stage starts
        cfg = from_dict(cls, _base(cls))
        *parents, leaf = key.split(".")
        target = cfg
        for p in parents:
            target = getattr(target, p)
        object.__setattr__(target, leaf, value if not isinstance(getattr(target, leaf), int) else bad)
        with pytest.raises(InputError) as e:
            check_config(cfg)
        assert e.value.field == key, (root, key, str(e.value))
        checked += 1
    assert checked >= 13
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_good_names_pass():
    from pgra.core.config import check_path_segments

    for value in ("test", ["train", "dev"], {"bm25-v2": {}, "simcse_large": {}}, [1, 2, -3], "SST-2.v1"):
        check_path_segments(value, "f")
    check_path_segments("", "f", empty_ok=True)
    with pytest.raises(InputError, match="field 'f'"):
        check_path_segments([""], "f", empty_ok=True)  # an empty item is never "none"


# ---------------------------------------------------------------- end to end, on the command line

def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_analysis_retrievers_name_cannot_build_anything_elsewhere(tmp_path, corpus_txt, sky_task, monkeypatch,
                                                                  capsys):
    """``analysis.retrievers: {x/../../..: ...}`` once built an index (and a grid) outside the experiment and the
    working folder; now `pgra analyze` (and `pgra experiment`) refuse it before anything runs."""
    work = tmp_path.joinpath("a", "b", "c", "d", "e", "f", "g")
    (work / "exp").mkdir(parents=True)
    monkeypatch.chdir(work)
    name = "x/../../../../../escaped"  # <work>/index-x/.. five times up: inside tmp_path, outside work
    assert not (work / f"index-{name}").resolve().is_relative_to(work)
    cfg = {"out": str(work / "exp"), "tasks": [str(sky_task)], "methods": ["no_retrieval"], "seeds": [1],
           "index": {"corpus": str(corpus_txt), "out": str(work / "index"), "retriever": "bm25"},
           "rerank": {"lm": str(work / "no-lm")}, "reader": {"model": str(work / "no-reader")},
           "show_progress": False,
           "analysis": {"analyses": ["retrievers"], "retrievers": {name: {"retriever": "bm25"}}}}
    config = tmp_path / "experiment.yaml"
    config.write_text(yaml.safe_dump(cfg))
    before = _tree(tmp_path)
    for command in ("analyze", "experiment"):
        line = one_error_line([command, "--config", str(config)], capsys)
        assert "field 'analysis.retrievers'" in line and "escaped" in line
    assert _tree(tmp_path) == before  # no index, candidates or cell anywhere


def test_peek_reads_no_split_outside_its_folder(tmp_path, monkeypatch, capsys):
    import pgra.data.interchange

    folder = tmp_path / "a" / "cands"
    folder.mkdir(parents=True)
    record = {"id": "q1", "text": "an input", "ctxs": []}
    (folder / "test.jsonl").write_text(json.dumps(record) + "\n")
    (tmp_path / "secret.jsonl").write_text(json.dumps({**record, "text": "SECRET"}) + "\n")
    read: list[Path] = []
    real = pgra.data.interchange.read_records
    monkeypatch.setattr(pgra.data.interchange, "read_records", lambda path, *a, **kw: (read.append(Path(path)),
                                                                                  real(path, *a, **kw))[1])
    for split in ("../../secret", str(tmp_path / "secret"), "a/b", ".."):
        line = one_error_line(["peek", str(folder), "--split", split], capsys)
        assert "field 'split'" in line
    assert read == []
    from pgra.cli import main

    assert main(["peek", str(folder)]) == 0 and "an input" in capsys.readouterr().out
