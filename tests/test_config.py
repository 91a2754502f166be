from dataclasses import dataclass, field

import pytest

from pgra.core.config import load_config, parse_overrides
from pgra.core.errors import InputError
from pgra.retrieval.index import IndexConfig


@dataclass
class Inner:
    lr: float = 1e-4
    steps: int = 10


@dataclass
class Outer:
    name: str = "x"
    flag: bool = False
    inner: Inner = field(default_factory=Inner)
    tags: list[str] = field(default_factory=list)


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: run\ninner:\n  lr: 3e-5\n")
    cfg = load_config(Outer, p, parse_overrides(["inner.steps=20", "flag=true", "tags=a,b"]))
    assert cfg.name == "run" and cfg.inner.lr == 3e-5 and cfg.inner.steps == 20 and cfg.flag is True
    assert cfg.tags == ["a", "b"]


def test_unknown_key_lists_close_matches(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("inner:\n  stpes: 3\n")
    with pytest.raises(InputError, match=r"c\.yaml \(field 'inner.stpes'\).*Did you mean: inner\.steps"):
        load_config(Outer, p)


def test_bad_type_names_field():
    with pytest.raises(InputError, match=r"field 'inner.steps'.*expected int"):
        load_config(Outer, None, parse_overrides(["inner.steps=ten"]))


def test_a_word_yaml_reads_as_a_bool_is_the_word_where_a_choice_expects_it(tmp_path):
    """`reader.mixed_precision=no` (as the docs write it) is YAML's False: the choice 'no', not an error; in a file
    too; a bool where no such word is a choice is still refused."""
    from pgra.reader.config import TrainConfig

    assert load_config(TrainConfig, None, parse_overrides(["mixed_precision=no"])).mixed_precision == "no"
    p = tmp_path / "r.yaml"
    p.write_text("mixed_precision: no\n")
    assert load_config(TrainConfig, p).mixed_precision == "no"
    with pytest.raises(InputError, match=r"field 'mixed_precision'.*must be one of"):
        load_config(TrainConfig, None, parse_overrides(["mixed_precision=yes"]))


def test_index_config_nested():
    cfg = load_config(IndexConfig, None, parse_overrides(["dense.faiss.nlist=64", "retriever=bm25"]))
    assert cfg.dense.faiss.nlist == 64 and cfg.retriever == "bm25"


def test_numbers_below_their_minimum_are_refused_at_load(tmp_path, capsys):
    """Ranges are declared once (option(min=...)) and checked from YAML, key=value, flags and Python."""
    from pgra.cli import main
    from pgra.core.config import check_config
    from pgra.reader.config import TrainConfig
    from pgra.retrieval.retrieve import RetrieveConfig

    for argv, name in ((["retrieve", "--task", "sst2", "--index", "i", "--out", "o", "-k", "-3"], "k"),
                        (["train", "--data", "d", "--out", "o", "--n-passages", "-2"], "n_passages"),
                        (["train", "--data", "d", "--out", "o", "batch_size=0"], "batch_size"),
                        (["rerank", "--candidates", "c", "--out", "o", "--top-d", "0"], "top_d")):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"(field '{name}'): must be at least" in err and "Traceback" not in err
    with pytest.raises(InputError, match="field 'max_steps': must be at least 1, got 0"):
        check_config(TrainConfig(max_steps=0))
    from pgra.simcse.config import SimCSEConfig

    with pytest.raises(InputError, match="field 'dropout': must be at least -1"):  # -1: the model's own, no lower
        check_config(SimCSEConfig(dropout=-5.0))
    check_config(RetrieveConfig())  # the defaults are valid


def test_cosmetic_fields_are_left_out_of_the_settings_that_define_a_result():
    """``option(cosmetic=True)`` is read by every key function (stages, cells, checkpoints, selection caches)."""
    from pgra.core.config import result_settings
    from pgra.reader.config import TrainConfig
    from pgra.selection.base import SelectorSettings, settings_key

    base = result_settings(TrainConfig())
    assert result_settings(TrainConfig(show_progress=False, log_with="wandb", keep_checkpoints=3)) == base
    assert result_settings(TrainConfig(learning_rate=0.5)) != base
    assert "out" in base and "out" not in result_settings(TrainConfig(), without=("out",))
    assert settings_key(SelectorSettings(cache_dir="elsewhere", batch_size=3)) == settings_key(SelectorSettings())
    assert settings_key(SelectorSettings(pooler="cls")) != settings_key(SelectorSettings())


def test_settings_added_later_stay_out_of_keys_at_their_default():
    """``option(omit_default=True)``: a setting enters the keys only when set away from its default, so the keys of
    results made before it existed stay valid."""
    from pgra.core.config import result_settings
    from pgra.reader.config import TrainConfig

    base = result_settings(TrainConfig())
    assert not {"adamw_impl", "compile", "compile_mode", "eval_dtype", "pad_to_multiple", "train_top_layers"} & set(base)
    for change in ({"adamw_impl": "fused"}, {"compile": True}, {"eval_dtype": "bf16"}, {"train_top_layers": 0},
                   {"compile_mode": "reduce-overhead"}, {"pad_to_multiple": 32}):
        settings = result_settings(TrainConfig(**change))
        assert settings == {**base, **change}


def test_settings_recorded_only_when_set():
    """``option(record_default=False)``: the recorded config (manifests, cell.json) holds the setting only when set,
    in a nested section too, so artifacts made before it existed stay byte-identical."""
    from pgra.core.config import to_dict
    from pgra.experiment.config import ExperimentConfig
    from pgra.reader.config import TrainConfig

    assert not {"train_top_layers", "compile_mode", "pad_to_multiple"} & set(to_dict(TrainConfig()))
    assert "train_top_layers" not in to_dict(ExperimentConfig())["reader"]
    assert to_dict(TrainConfig(train_top_layers=0))["train_top_layers"] == 0
    assert to_dict(ExperimentConfig(reader=TrainConfig(train_top_layers=2)))["reader"]["train_top_layers"] == 2
    assert "adamw_impl" in to_dict(TrainConfig())  # omit_default alone: recorded at its default


# --- issue 53 (reliability round 4): a key set twice in a YAML pgra reads from a user ---

def test_a_duplicate_yaml_key_is_refused_naming_file_line_and_key(tmp_path):
    """PyYAML keeps the last of two equal keys silently: every config (and its base chain) refuses it instead."""
    base = tmp_path / "base.yaml"
    base.write_text("name: a\ninner:\n  lr: 1e-4\n  steps: 3\n  lr: 2e-4\n")
    child = tmp_path / "child.yaml"
    child.write_text("base: base.yaml\nname: b\n")
    with pytest.raises(InputError) as e:
        load_config(Outer, child)
    assert e.value.path == str(base) and e.value.line == 5 and e.value.field == "lr"
    assert "duplicate key 'lr' (first set on line 3)" in str(e.value)
    flow = tmp_path / "flow.yaml"
    flow.write_text("{name: a, flag: true, name: b}\n")
    with pytest.raises(InputError, match="duplicate key 'name'") as e:
        load_config(Outer, flow)
    assert e.value.line == 1
    # a key a `<<` merge brings in may be set again (that is what a merge is for)
    merged = tmp_path / "merged.yaml"
    merged.write_text("name: x\ninner:\n  <<: {lr: 0.5, steps: 2}\n  steps: 4\n")
    assert load_config(Outer, merged).inner == Inner(lr=0.5, steps=4)


def test_a_duplicate_key_in_a_task_yaml_is_refused(tmp_path):
    from pgra.tasks.registry import task_from_yaml

    spec = tmp_path / "t.yaml"
    spec.write_text("name: t\nlabels: [a, b]\nname: u\n")
    with pytest.raises(InputError, match="duplicate key 'name'") as e:
        task_from_yaml(spec)
    assert e.value.path == str(spec) and e.value.line == 3


def test_a_recursive_alias_is_refused_not_expanded_forever(tmp_path):
    """An anchor used inside its own value (PyYAML builds a structure that holds itself): one InputError, where the
    expansion count used to loop until memory ran out."""
    p = tmp_path / "c.yaml"
    for text in ("inner: &a {lr: *a}\n", "tags: &t [x, [*t]]\n"):
        p.write_text(text)
        with pytest.raises(InputError, match="holds itself") as e:
            load_config(Outer, p)
        assert e.value.path == str(p)
    p.write_text("inner: &a {lr: 0.5}\nx: [*a, *a]\n")  # an alias used twice, not inside itself: fine
    with pytest.raises(InputError, match="unknown config key 'x'"):
        load_config(Outer, p)
