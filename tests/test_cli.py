"""The CLI is generated from the config dataclasses: every option declared once, every field reachable."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from pgra.cli import COMMANDS, build_parser, main
from pgra.cli.options import default_of, leaves
from pgra.core.config import field_choices, load_config, resolve_yaml, to_dict
from pgra.core.errors import InputError
from pgra.reader.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def _value_for(leaf) -> typing.Any:
    """A valid value different from the field's default."""
    default = default_of(leaf.field)
    allowed = field_choices(leaf.field)
    if typing.get_origin(leaf.type) in (list, tuple):
        if typing.get_args(leaf.type) == (int,):
            return [5, 9]
        if typing.get_args(leaf.type) == (float,):
            return [0.5, 2.5]
        return [allowed[-1]] if allowed else ["a1", "b2"]
    if typing.get_origin(leaf.type) is dict or leaf.type is dict:
        return {"k1": 3}
    if allowed is not None:
        others = [c for c in allowed if c != default]
        return others[-1] if others else default  # a one-choice field (`config show`)
    if leaf.type is bool:
        return not default
    if leaf.type is int:
        return (default or 0) + 7
    if leaf.type is float:
        high = leaf.meta.get("max")
        return (default or 0.0) + 0.5 if high is None else ((default or 0.0) + high) / 2
    exists = leaf.meta.get("exists")  # a path that must exist: a real one
    if exists:
        return str(ROOT / "pgra") if exists == "dir" else str(ROOT / "README.md")
    return f"x-{leaf.key}"


def _get(cfg: typing.Any, key: str) -> typing.Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _argv_setting(leaf, value) -> list[str]:
    flags = leaf.flags()
    if leaf.type is bool:
        name = flags[0]
        return [name if value else "--no-" + name.removeprefix("--")]
    if leaf.meta.get("append"):
        return [a for v in value for a in (flags[0], str(v))]
    if typing.get_origin(leaf.type) in (list, tuple):
        return [flags[0], ",".join(map(str, value))]
    return [flags[0], str(value)]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_field_is_reachable_as_a_flag_or_key_value(name):
    command = COMMANDS[name]
    cls = command.config_class()
    all_leaves = list(leaves(cls))
    assert all_leaves, f"{name} has no options"
    positional = [leaf for leaf in all_leaves if leaf.meta.get("positional")]
    for leaf in all_leaves:
        value = _value_for(leaf)
        pos_args = []
        for p in positional:  # positionals are given in declaration order
            v = value if p is leaf else _value_for(p)
            pos_args += v if isinstance(v, list) else [str(v)]
        if leaf.meta.get("positional"):
            argv = pos_args
        elif leaf.flags():
            argv = pos_args + _argv_setting(leaf, value)
        else:
            assert command.from_yaml, f"{name}: field {leaf.key} has neither a flag nor key=value"
            shown = ",".join(map(str, value)) if isinstance(value, list) else str(value).lower() \
                if isinstance(value, bool) else "{k1: 3}" if isinstance(value, dict) else str(value)
            argv = pos_args + [f"{leaf.key}={shown}"]
        cfg = command.build_config(command.parse(argv))
        assert _get(cfg, leaf.key) == value, (name, leaf.key, argv)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_shows_the_dataclass_defaults(name):
    text = re.sub(r"-\s+", "-", re.sub(r"\s+", " ", build_parser(name).format_help()))  # textwrap splits at "-"
    for leaf in leaves(COMMANDS[name].config_class()):
        default = default_of(leaf.field)
        if leaf.flags() and default not in ("", None, []) and not isinstance(default, list):
            assert f"(default: {default})" in text, (name, leaf.key)


def test_no_command_module_declares_flags_by_hand():
    for path in (ROOT / "pgra" / "cli").glob("*.py"):
        if path.name in ("options.py", "command.py", "__init__.py"):
            continue
        assert "add_argument" not in path.read_text(), f"{path.name} declares a flag by hand"


def test_registry_choices_are_read_from_the_registry(monkeypatch):
    import pgra.selection as selection

    class Extra(selection.CodeOrderSelector):
        name = "extra_strategy"

    monkeypatch.setitem(selection.STRATEGIES, "extra_strategy", Extra)
    assert "extra_strategy" in build_parser("rerank").format_help()
    cfg = COMMANDS["rerank"].build_config(COMMANDS["rerank"].parse(["--demo-selection", "extra_strategy"]))
    assert cfg.demo_selection == "extra_strategy"
    assert "wiki_topic" in build_parser("retrieve").format_help()  # registered tasks listed


def test_precedence_yaml_then_key_value_then_flags(tmp_path):
    cfg_file = tmp_path / "r.yaml"
    cfg_file.write_text("top_d: 4\nnum_demos: 2\nseed: 1\n")
    cmd = COMMANDS["rerank"]
    cfg = cmd.build_config(cmd.parse(["--config", str(cfg_file), "num_demos=3", "seed=5", "--seed", "9"]))
    assert (cfg.top_d, cfg.num_demos, cfg.seed) == (4, 3, 9)


def test_bad_keys_and_values_are_one_error_line(tmp_path, capsys):
    cfg_file = tmp_path / "t.yaml"
    cfg_file.write_text("max_stpes: 3\n")
    assert main(["train", "--config", str(cfg_file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "Did you mean: max_steps" in err[0]
    assert main(["train", "input_format=nope"]) == 2
    assert "must be one of ['intended', 'released', 'fid']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["rerank", "--dtype", "fp8"])
    assert e.value.code == 2


def test_choices_are_checked_when_a_config_is_loaded_from_yaml(tmp_path):
    cfg_file = tmp_path / "r.yaml"
    cfg_file.write_text("demo_selection: nearest\n")
    with pytest.raises(InputError, match=r"r\.yaml \(field 'demo_selection'\): must be one of"):
        load_config(COMMANDS["rerank"].config_class(), cfg_file)


# ------------------------------------------------------------------ config inheritance

def test_base_chain_resolves_relative_to_each_file(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "root.yaml").write_text("max_steps: 10\nlearning_rate: 1.0e-3\nbatch_size: 2\n")
    (tmp_path / "shared" / "mid.yaml").write_text("base: root.yaml\nbatch_size: 4\nseed: 3\n")
    (tmp_path / "leaf.yaml").write_text("base: shared/mid.yaml\nseed: 5\n")
    assert resolve_yaml(tmp_path / "leaf.yaml") == {"max_steps": 10, "learning_rate": 1e-3, "batch_size": 4,
                                                    "seed": 5}
    cfg = load_config(TrainConfig, tmp_path / "leaf.yaml")
    assert (cfg.max_steps, cfg.batch_size, cfg.seed) == (10, 4, 5)


def test_base_errors_name_the_file(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(InputError, match="inheritance cycle"):
        resolve_yaml(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(InputError, match=r"c\.yaml \(field 'base'\): base config 'missing.yaml' not found"):
        resolve_yaml(tmp_path / "c.yaml")


def test_paper_reader_configs_resolve_to_the_values_before_inheritance():
    expected = json.loads((ROOT / "tests" / "fixtures" / "paper_reader_configs.json").read_text())
    assert len(expected) == 8
    for task, values in expected.items():
        path = ROOT / "configs" / "paper" / f"reader_{task}.yaml"
        assert "base: reader_base.yaml" in path.read_text()
        assert to_dict(load_config(TrainConfig, path)) == values, task


def test_config_show_prints_the_resolved_config(capsys):
    assert main(["config", "show", "--config", str(ROOT / "configs/paper/reader_trec.yaml"), "seed=7"]) == 0
    out = capsys.readouterr().out
    assert "resolved for `pgra train`" in out
    import yaml

    shown = yaml.safe_load(out)
    assert shown == {**dataclasses.asdict(TrainConfig()), **shown}
    assert (shown["task"], shown["batch_size"], shown["learning_rate"], shown["seed"]) == ("trec", 4, 8e-5, 7)
    assert shown["model"] == "t5-base" and shown["max_steps"] == 5000
