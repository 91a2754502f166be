"""Each demonstration strategy declares its options on itself; the ``demos`` section is made from the registered
strategies (today's flat keys and flags unchanged, a plug-in's option configurable like a built-in one's); KATE
uses the index's encoder when one is already loaded."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pytest

from pgra.core.config import from_dict, option
from pgra.selection import STRATEGIES, GlobalSelector, SelectorSettings, get_selector, settings_key
from pgra.tasks import Example, get_task
from tests.toys.toy_selection import Longest


@pytest.fixture()
def toy():
    STRATEGIES.register(Longest)
    yield Longest
    STRATEGIES.pop(Longest.name)


def test_the_demos_section_is_the_strategies_own_options():
    from pgra.selection.kate import KateOptions
    from pgra.selection.skill_knn import SkillKnnOptions

    names = [f.name for f in dataclasses.fields(SelectorSettings())]
    for cls in (KateOptions, SkillKnnOptions):
        assert {f.name for f in dataclasses.fields(cls)} <= set(names)
    assert STRATEGIES["kate"].options is KateOptions and STRATEGIES["paper"].options is None
    # today's flat keys: the same names, and the key of the defaults unchanged (the golden guard checks the hash)
    assert names[:12] == ["balanced", "encoder", "pooler", "max_length", "metric", "reverse", "annotations",
                          "rewrite_lm", "instruction", "variant", "rewrites", "max_new_tokens"]
    assert isinstance(SelectorSettings(encoder="e"), SelectorSettings)


def test_a_plugin_strategy_option_is_configurable_and_keys_stay(toy):
    from pgra.icl.config import ICLConfig
    from pgra.rerank.config import RerankConfig

    STRATEGIES.pop(toy.name)
    before = settings_key(SelectorSettings())
    STRATEGIES.register(toy)
    assert settings_key(SelectorSettings()) == before  # omit_default: every existing key unchanged
    cfg = from_dict(ICLConfig, {"demos": {"toy_skip": 2, "encoder": "e"}})
    assert cfg.demos.toy_skip == 2 and cfg.demos.encoder == "e"
    assert settings_key(cfg.demos)["toy_skip"] == 2
    assert from_dict(RerankConfig, {"demos": {"toy_skip": 1}}).demos.toy_skip == 1
    from pgra.core.errors import InputError

    with pytest.raises(InputError, match="icl.demos.toy_skip"):
        from_dict(ICLConfig, {"demos": {"toy_skip": -1}}, prefix="icl.")


def test_two_strategies_declaring_one_option_differently_are_refused(toy):
    @dataclass
    class Other:
        toy_skip: str = option("x")

    class Clash(GlobalSelector):
        name = "toy_clash"
        options = Other

        def draw(self):
            return []

    STRATEGIES.register(Clash)
    try:
        with pytest.raises(ValueError, match="toy_skip"):
            SelectorSettings()
    finally:
        STRATEGIES.pop("toy_clash")


def test_pgra_icl_runs_a_plugin_strategy_with_its_option(toy, candidates, tmp_path, tiny_opt):
    from pgra.cli import main

    out = tmp_path / "icl"
    assert main(["icl", "--data", str(candidates), "--out", str(out), "--lm", str(tiny_opt), "--selection",
                 "toy_longest", "--num-demos", "2", "demos.toy_skip=1", "splits=test", "--no-show-progress"]) == 0
    train = [json.loads(x) for x in (candidates / "train.jsonl").read_text().splitlines()]
    want = [str(r["id"]) for r in sorted(train, key=lambda r: -len(r["text"]))[1:3]]
    lines = [json.loads(x) for x in (out / "predictions_test.jsonl").read_text().splitlines()]
    assert lines and all([str(i) for i in x["evidence"]] == want for x in lines)


def test_kate_uses_the_index_encoder_already_loaded(tiny_bert, tiny_bert_other, tmp_path, monkeypatch):
    import pgra.retrieval.encoder as encoder_module
    from pgra.retrieval.encoder import DenseEncoder

    task = get_task("sst2")
    train = [Example(str(i), t, "01"[i % 2]) for i, t in enumerate(
        ["a fine film", "dull", "the sun shines", "rain all day", "lovely music", "bad acting", "great plot"])]
    queries = [Example("q0", "a lovely film"), Example("q1", "rain and bad music")]
    settings = SelectorSettings(encoder=str(tiny_bert), pooler="mean", max_length=16, cache_dir=str(tmp_path / "a"))
    own = get_selector("kate", 3, settings=settings).fit(task, train).select(queries)
    index_encoder = DenseEncoder(str(tiny_bert), pooler="mean", max_length=64)  # the index's length limit
    loads = []
    monkeypatch.setattr(encoder_module, "DenseEncoder", lambda *a, **k: loads.append(a) or index_encoder)
    settings = dataclasses.replace(settings, cache_dir=str(tmp_path / "b"))
    kate = get_selector("kate", 3, settings=settings, encoder=index_encoder).fit(task, train)
    assert kate.select(queries) == own and not loads  # the same selection, no encoder loaded
    assert kate.encoder.encoder.model is index_encoder.model and kate.encoder.encoder.max_length == 16
    assert index_encoder.max_length == 64  # the index's own encoder is left as it was
    other = DenseEncoder(str(tiny_bert_other), pooler="mean")
    get_selector("kate", 3, settings=settings, encoder=other).fit(task, train)
    assert loads  # another model is not the one the settings name: KATE loads its own


def test_a_config_record_holds_the_new_strategies_options_only_when_set(toy):
    """Manifests and cells record ``to_dict`` of their config: the options strategies declare ``omit_default``
    are left out at their default, so no record changes with the strategies registered (the golden records)."""
    from pgra.core.config import to_dict
    from pgra.icl.config import ICLConfig

    original = {"balanced", "encoder", "pooler", "max_length", "metric", "reverse", "annotations", "rewrite_lm",
                "instruction", "variant", "rewrites", "max_new_tokens", "batch_size", "cache_dir"}
    assert set(to_dict(ICLConfig())["demos"]) == original
    demos = SelectorSettings(mmr_lambda=0.25, toy_skip=2)
    recorded = to_dict(ICLConfig(demos=demos))["demos"]
    assert set(recorded) == original | {"mmr_lambda", "toy_skip"} and recorded["mmr_lambda"] == 0.25
    assert from_dict(ICLConfig, to_dict(ICLConfig(demos=demos))).demos == demos  # read back as written
