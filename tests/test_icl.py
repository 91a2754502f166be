"""In-context learning: label scoring equals the naive full-prompt computation; runs, predictor and prompt fitting."""

import json

import numpy as np
import pytest

from pgra.icl.classify import label_probabilities
from pgra.icl.config import ICLConfig
from pgra.icl.run import ICLPredictor, run_icl
from pgra.lm.label_scoring import LabelScorer
from pgra.lm.prompts import build_prompt
from pgra.methods import load_run
from pgra.selection import SelectorSettings, get_selector
from pgra.tasks import Example, get_task
from tests import numerics
from tests.conftest import SENTENCES

TASK = get_task("sst2")
DEMOS = [Example("d0", "a gripping film .", "1"), Example("d1", "dull and slow .", "0"),
         Example("d2", "The music was lovely.", "1")]


def test_label_scoring_equals_naive_full_prompts(tiny_lm):
    prompts = [build_prompt(TASK, DEMOS[: i % 4], t) for i, t in enumerate(SENTENCES + ["x " * 30])]
    words = ["positive", "negative", "quite unexpectedly wonderful"]  # one multi-token word
    scorer = LabelScorer(str(tiny_lm), dtype="fp32", max_tokens_per_batch=500, max_batch_size=3)  # odd batches
    fast, n_fast = scorer.score(prompts, words)
    naive, n_naive = scorer.score_naive(prompts, words)
    numerics.assert_close(fast, naive, depth=numerics.TINY_MODEL)
    np.testing.assert_array_equal(n_fast, n_naive)
    assert n_fast[:, 2].min() > 1 and scorer.stats.uncached_pairs == 0


def test_ragged_continuations_equal_naive_whole_sequences(tiny_lm):
    """score_continuations: each prompt its own continuations (none, one, several of odd lengths), each prompt
    run once: equal to every pair run whole."""
    prompts = [build_prompt(TASK, DEMOS[: i % 4], t) for i, t in enumerate(SENTENCES[:4] + ["x " * 30])]
    conts = [["positive"], [], SENTENCES[:3], ["quite unexpectedly wonderful", "no"], SENTENCES[2:]]
    scorer = LabelScorer(str(tiny_lm), dtype="fp32", max_tokens_per_batch=300, max_batch_size=2)
    logp, counts = scorer.score_continuations(prompts, conts)
    assert [len(x) for x in logp] == [len(c) for c in conts] and scorer.stats.prompts == len(prompts)
    for p, c, lp, n in zip(prompts, conts, logp, counts, strict=True):
        if c:
            naive, n_naive = scorer.score_naive([p], c)
            numerics.assert_close(lp, naive[0], depth=numerics.TINY_MODEL)
            np.testing.assert_array_equal(n, n_naive[0])
    with pytest.raises(ValueError, match="2 prompts but 1"):
        scorer.score_continuations(prompts[:2], conts[:1])


def test_label_probabilities_sum_or_mean():
    logp = np.array([[-2.0, -3.0]])
    counts = np.array([[1, 3]])
    numerics.assert_close(label_probabilities(logp, counts, False), [[1 / (1 + np.e ** -1), 1 / (1 + np.e)]], depth=4)
    # mean per token: -2/1 vs -3/3 = -2 vs -1, so the longer label wins
    numerics.assert_close(label_probabilities(logp, counts, True), [[1 / (1 + np.e), 1 / (1 + np.e ** -1)]], depth=4)


def _icl_cfg(candidates, tmp_path, lm, encoder, **kw):
    base = {"data": str(candidates), "out": str(tmp_path / "icl"), "lm": str(lm), "selection": "kate",
            "num_demos": 3, "demos": SelectorSettings(encoder=str(encoder), pooler="mean",
                                                       cache_dir=str(tmp_path / "sel")),
            "show_progress": False, "max_tokens_per_batch": 600}
    base.update(kw)
    return ICLConfig(**base)


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_icl_run_predicts_from_its_selected_demonstrations(candidates, tmp_path, tiny_opt, tiny_bert):
    cfg = _icl_cfg(candidates, tmp_path, tiny_opt, tiny_bert)
    results = run_icl(cfg)
    assert set(results) == {"dev", "test"} and results["test"]["examples"] == 6
    task = get_task(str(tmp_path / "sky.yaml"))
    train = [Example(str(r["id"]), r["text"], r["label"]) for r in _lines(candidates / "train.jsonl")]
    tests = [Example(str(r["id"]), r["text"], r["label"]) for r in _lines(candidates / "test.jsonl")]
    chosen = get_selector("kate", 3, settings=cfg.demos).fit(task, train).select_examples(tests)
    lines = _lines(tmp_path / "icl" / "predictions_test.jsonl")
    scorer = LabelScorer(str(tiny_opt))
    words = [task.demo_words[lab] for lab in task.labels]
    for line, demos in zip(lines, chosen, strict=True):
        assert line["evidence"] == [d.id for d in demos] and line["demo_labels"] == [d.label for d in demos]
        naive, _ = scorer.score_naive([build_prompt(task, demos, line["text"])], words)
        want = np.exp(naive[0] - naive[0].max()) / np.exp(naive[0] - naive[0].max()).sum()
        numerics.assert_close([line["scores"][lab] for lab in task.labels], want, depth=numerics.TINY_MODEL, scale=1)
        assert line["prediction"] == task.labels[int(np.argmax(want))]
    manifest = json.loads((tmp_path / "icl" / "manifest.json").read_text())
    assert manifest["kind"] == "icl" and manifest["cost"]["lm_calls"] == 2 + 6  # dev + test inputs
    assert manifest["cost"]["lm_tokens"] > 0 and manifest["selection"]["strategy"] == "kate"
    # the run loads back and predicts the same
    predictor = load_run(tmp_path / "icl")
    assert isinstance(predictor, ICLPredictor)
    again = predictor.predict(_lines(candidates / "test.jsonl"))
    assert [x["prediction"] for x in again] == [x["prediction"] for x in lines]
    assert predictor.evidence_of({}, again[0])[0]["text"] in {d.text for d in chosen[0]}


def test_icl_drops_far_demonstrations_when_the_prompt_is_too_long(candidates, tmp_path, tiny_opt, tiny_bert):
    cfg = _icl_cfg(candidates, tmp_path, tiny_opt, tiny_bert, selection="random", num_demos=6, max_context=70,
                   splits=["test"])
    run_icl(cfg)
    lines = _lines(tmp_path / "icl" / "predictions_test.jsonl")
    assert all(len(x["evidence"]) < 6 for x in lines)
    task = get_task(str(tmp_path / "sky.yaml"))
    train = [Example(str(r["id"]), r["text"], r["label"]) for r in _lines(candidates / "train.jsonl")]
    chosen = get_selector("random", 6, seed=cfg.seed).fit(task, train).select_examples(
        [Example(str(x["id"]), x["text"]) for x in lines])
    for line, demos in zip(lines, chosen, strict=True):  # the far end went: the kept ones are the row's tail
        assert line["evidence"] == [d.id for d in demos][6 - len(line["evidence"]):]
    assert json.loads((tmp_path / "icl" / "manifest.json").read_text())["cost"]["demos_dropped"] > 0


def test_icl_frees_the_rewriting_lm_before_scoring(candidates, tmp_path, tiny_opt, tiny_bert):
    from pgra.icl.classify import ICLClassifier

    skills = tmp_path / "skills.jsonl"
    skills.write_text('{"input": "The sun is bright.", "skill": "Describing light in the sky."}\n')
    demos = SelectorSettings(encoder=str(tiny_bert), pooler="mean", cache_dir=str(tmp_path / "sel"),
                             annotations=str(skills), max_new_tokens=4)
    cfg = _icl_cfg(candidates, tmp_path, tiny_opt, tiny_bert, selection="skill_knn", demos=demos)
    task = get_task(str(tmp_path / "sky.yaml"))
    train = [Example(str(r["id"]), r["text"], r["label"]) for r in _lines(candidates / "train.jsonl")]
    records = _lines(candidates / "dev.jsonl") + _lines(candidates / "test.jsonl")
    clf = ICLClassifier(cfg, task, train, demos)
    clf.prepare(records)  # every query rewritten, the rewriting LM freed, the scoring LM not loaded yet
    assert clf.selector.rewriter._model is None and clf._scorer is None
    lines = clf.predict(records)
    assert clf.selector.rewriter._model is None and len(lines) == len(records)
    assert clf.cost()["selection"]["lm_calls"] == len(train) + len(records)  # each rewrite counted once


def test_icl_bad_inputs(candidates, tmp_path, tiny_opt, tiny_bert):
    from pgra.core.errors import InputError

    with pytest.raises(InputError, match="more than the 12 labelled"):
        run_icl(_icl_cfg(candidates, tmp_path, tiny_opt, tiny_bert, num_demos=13))
    with pytest.raises(InputError, match="has no validation split"):
        run_icl(_icl_cfg(candidates, tmp_path, tiny_opt, tiny_bert, splits=["validation"]))
    with pytest.raises(InputError, match="needs a sentence encoder"):
        run_icl(_icl_cfg(candidates, tmp_path, tiny_opt, "", demos=SelectorSettings()))


def test_icl_pool_draws_demonstrations_from_a_fixed_sample(candidates, tmp_path, tiny_opt, tiny_bert):
    from pgra.icl.run import icl_settings

    train_ids = [str(r["id"]) for r in _lines(candidates / "train.jsonl")]
    pools = []
    for seed in (1, 2):
        out = tmp_path / f"icl-{seed}"
        run_icl(_icl_cfg(candidates, tmp_path, tiny_opt, tiny_bert, out=str(out), pool=5, seed=seed, splits=["test"]))
        pools.append(set(load_run(out).texts))
        used = {i for line in _lines(out / "predictions_test.jsonl") for i in line["evidence"]}
        assert used <= pools[-1]
    assert len(pools[0]) == 5 and pools[0] == pools[1] and pools[0] <= set(train_ids)  # whatever the run's seed
    cfg = _icl_cfg(candidates, tmp_path, tiny_opt, tiny_bert)
    assert icl_settings(cfg) != icl_settings(ICLConfig(**{**cfg.__dict__, "pool": 5}))  # a pool is another run
