# numerics: Holm, MDE and standard-error arithmetic in float64 against hand values (no model, no batched kernel)
"""What a comparison can resolve (pgra/evaluation/resolution.py): Holm-adjusted p-values against a hand-computed
family and as properties, the minimum detectable effect against its hand value, the bootstrap SE against the
analytic SE of a paired accuracy difference, and the planning arithmetic (inputs and seeds an effect needs)
against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgra.evaluation.resolution import (
    DEFAULT_DISAGREEMENT,
    DEFAULT_SEED_STD,
    PAPER_GAIN,
    bootstrap_se,
    holm,
    inputs_needed,
    minimum_detectable_effect,
    plan_resolution,
    planned_se,
    resolution_lines,
    seeds_needed,
)
from pgra.evaluation.significance import paired_bootstrap
from tests import numerics
from tests.fuzzing import FUZZ

Z = 1.959963984540054 + 0.8416212335729143  # z_{0.975} + z_{0.8}


def test_holm_hand_computed_family():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> 0.06, monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # capped at 1; ties get one value; a family of one is unchanged
    assert holm([0.5, 0.5, 0.2]) == pytest.approx([1.0, 1.0, 0.6])
    assert holm([0.3, 0.3]) == pytest.approx([0.6, 0.6])
    assert holm([0.04]) == [0.04]
    assert holm([]) == []
    for bad in ([0.1, float("nan")], [-0.1], [1.5]):
        with pytest.raises(ValueError):
            holm(bad)


@FUZZ
@given(st.lists(st.floats(0.0, 1.0), max_size=30))
def test_holm_properties(ps):
    adj = holm(ps)
    assert len(adj) == len(ps)
    assert all(p <= a + numerics.tolerance("float64", 8) and a <= 1.0 for p, a in zip(ps, adj, strict=True))  # at least the raw, at most 1
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    assert all(adj[i] <= adj[j] for i, j in zip(order, order[1:], strict=False))  # monotone in the raw p-values
    assert all(a <= min(1.0, len(ps) * p) + numerics.tolerance("float64", 8) for p, a in zip(ps, adj, strict=True))  # never past Bonferroni
    assert holm(list(reversed(ps))) == list(reversed(adj))  # in the input order, whatever it is


def test_minimum_detectable_effect_hand_value():
    assert minimum_detectable_effect(0.01) == pytest.approx(0.028016, abs=1e-5)
    assert minimum_detectable_effect(0.0) == 0.0
    assert minimum_detectable_effect(0.01, alpha=0.05, power=0.5) == pytest.approx(0.0195996, abs=1e-6)
    for kw in ({"alpha": 0.0}, {"alpha": 1.0}, {"power": 0.0}, {"power": 1.0}):
        with pytest.raises(ValueError):
            minimum_detectable_effect(0.01, **kw)
    with pytest.raises(ValueError):
        minimum_detectable_effect(-0.01)


def test_bootstrap_se_matches_the_analytic_se_of_a_paired_accuracy_difference():
    n = 400
    # both right on 200 inputs, A alone on 40, B alone on 20, neither on 140: A 60%, B 55%
    a_right = np.zeros(n, dtype=bool)
    b_right = np.zeros(n, dtype=bool)
    a_right[:240] = True
    b_right[:200] = True
    b_right[240:260] = True
    assert a_right.mean() == 0.6 and b_right.mean() == 0.55
    gold = ["a"] * n
    preds_a = [["a" if r else "b" for r in a_right]]
    preds_b = [["a" if r else "b" for r in b_right]]
    res = paired_bootstrap(gold, preds_a, preds_b, ["a", "b"], "accuracy", n_resamples=20000, seed=0)
    d = a_right.astype(float) - b_right.astype(float)
    analytic = math.sqrt(d.var() / n)  # population variance: (60/400 - 0.05^2) / 400
    assert analytic == pytest.approx(math.sqrt(0.1475 / 400))
    assert bootstrap_se(res.replicates) == pytest.approx(analytic, rel=0.03)
    # ddof=1, and too few or non-finite replicates are refused
    assert bootstrap_se([0.0, 1.0]) == pytest.approx(math.sqrt(0.5))
    for bad in ([0.1], [], [0.1, float("inf")]):
        with pytest.raises(ValueError):
            bootstrap_se(bad)


def test_planned_se_hand_values():
    # 0.10 / 1000 + 2 * 0.005^2 / 3 = 1e-4 + 1.6667e-5
    assert planned_se(1000, 3, 0.10, 0.005) == pytest.approx(math.sqrt(1e-4 + 2 * 0.005 ** 2 / 3))
    assert planned_se(400, 1, 0.15, 0.0) == pytest.approx(math.sqrt(0.15 / 400))
    assert (DEFAULT_DISAGREEMENT, DEFAULT_SEED_STD, PAPER_GAIN) == (0.10, 0.005, 0.006)
    for args in ((0, 3, 0.1, 0.005), (10, 0, 0.1, 0.005), (10, 3, 1.5, 0.005), (10, 3, 0.1, -0.1),
                 (10, 3, float("nan"), 0.0), (10.5, 3, 0.1, 0.005)):
        with pytest.raises(ValueError):
            planned_se(*args)


def _mde(n, s, dis, std):
    return minimum_detectable_effect(planned_se(n, s, dis, std))


def test_inputs_needed_hand_computation():
    # 3 points at 3 seeds: (0.03 / Z)^2 - 2 * 0.005^2 / 3 = 1.1467e-4 - 1.6667e-5 = 9.800e-5; 0.1 / 9.800e-5 = 1020.4
    room = (0.03 / Z) ** 2 - 2 * 0.005 ** 2 / 3
    assert 0.1 / room == pytest.approx(1020.4, abs=0.1)
    n = inputs_needed(0.03, 3, 0.10, 0.005)
    assert n == 1021
    assert _mde(n, 3, 0.10, 0.005) <= 0.03 < _mde(n - 1, 3, 0.10, 0.005)
    # the paper's +0.6 points: the seed term alone at 3 seeds is Z * sqrt(2 * 0.005^2 / 3) = 1.14 points > 0.6
    assert Z * math.sqrt(2 * 0.005 ** 2 / 3) == pytest.approx(0.011437, abs=1e-5)
    assert inputs_needed(PAPER_GAIN, 3, 0.10, 0.005) is None
    # at 20 seeds it fits: (0.006 / Z)^2 - 2 * 0.005^2 / 20 = 4.5866e-6 - 2.5e-6 = 2.0866e-6 -> 0.1 / that = 47923.9
    n = inputs_needed(PAPER_GAIN, 20, 0.10, 0.005)
    assert n == 47924
    assert _mde(n, 20, 0.10, 0.005) <= PAPER_GAIN < _mde(n - 1, 20, 0.10, 0.005)
    # no seed spread: only the inputs count; no disagreement: one input is enough
    assert inputs_needed(0.05, 1, 0.10, 0.0) == math.ceil(0.1 / (0.05 / Z) ** 2) == 314
    assert inputs_needed(0.05, 1, 0.0, 0.0) == 1
    with pytest.raises(ValueError):
        inputs_needed(0.0, 3)


def test_seeds_needed_hand_computation():
    # 3 points at 1000 inputs: (0.03 / Z)^2 - 0.1 / 1000 = 1.1467e-4 - 1e-4 = 1.4666e-5; 2 * 0.005^2 / that = 3.41
    s = seeds_needed(0.03, 1000, 0.10, 0.005)
    assert s == 4
    assert _mde(1000, s, 0.10, 0.005) <= 0.03 < _mde(1000, s - 1, 0.10, 0.005)
    # the input term alone at 1000 inputs is Z * sqrt(1e-4) = 2.8 points > 0.6: no number of seeds
    assert seeds_needed(PAPER_GAIN, 1000, 0.10, 0.005) is None
    # 100,000 inputs: 4.5866e-6 - 1e-6 = 3.5866e-6; 5e-5 / that = 13.94
    s = seeds_needed(PAPER_GAIN, 100_000, 0.10, 0.005)
    assert s == 14
    assert _mde(100_000, s, 0.10, 0.005) <= PAPER_GAIN < _mde(100_000, s - 1, 0.10, 0.005)
    assert seeds_needed(0.03, 1000, 0.10, 0.0) == 1  # no seed spread: one seed is enough when the inputs fit


@FUZZ
@given(st.floats(0.001, 0.2), st.integers(1, 50), st.floats(0.0, 1.0), st.floats(0.0, 0.05))
def test_needed_counts_are_the_smallest_that_fit(effect, count, dis, std):
    n = inputs_needed(effect, count, dis, std)
    if n is None:
        assert Z * math.sqrt(2 * std ** 2 / count) >= effect * (1 - numerics.tolerance("float64", 64))
    else:
        assert _mde(n, count, dis, std) <= effect and (n == 1 or _mde(n - 1, count, dis, std) > effect)
    s = seeds_needed(effect, count, dis, std)
    if s is None:
        assert Z * math.sqrt(dis / count) >= effect * (1 - numerics.tolerance("float64", 64))
    else:
        assert _mde(count, s, dis, std) <= effect and (s == 1 or _mde(count, s - 1, dis, std) > effect)


def test_plan_and_its_lines():
    plan = plan_resolution(872, 3)
    assert plan["mde"] == pytest.approx(_mde(872, 3, 0.10, 0.005))
    assert (plan["inputs_needed"], plan["seeds_needed"], plan["effect"]) == (None, None, 0.006)
    lines = resolution_lines({"sst2": plan, "hf": "its test inputs are unknown: skipped",
                              "big": plan_resolution(100_000, 20)})
    assert lines[0].startswith("Resolution (planned") and "10% of the test inputs" in lines[0]
    assert "0.5 points std over seeds" in lines[0] and "alpha 0.05, power 0.8" in lines[0]
    assert lines[1] == ("  sst2: 872 test inputs x 3 seed(s): minimum detectable effect 3.21 points; to detect "
                        "+0.6 points: no number of test inputs at 3 seed(s), or no number of seeds at 872 inputs")
    assert lines[2] == "  hf: its test inputs are unknown: skipped"
    assert lines[3].endswith("to detect +0.6 points: 47,924 test inputs at 20 seed(s), or 14 seed(s) at 100,000 inputs")
    assert resolution_lines({"hf": "skipped"}) == ["Resolution:", "  hf: skipped"]
