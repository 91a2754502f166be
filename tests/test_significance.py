# numerics: float64 arithmetic on label counts; the hand computations' comparisons go through tests.numerics
"""Metrics from confusion counts equal sklearn; the paired bootstrap equals a naive loop over the same draws."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from pgra.evaluation.significance import (
    _TIE_TOL,  # the library's own rule for a tie with the observed delta
    BootstrapResult,
    average_replicates,
    confusion_matrices,
    metric_from_confusion,
    paired_bootstrap,
)
from tests import numerics

INVALID = "<invalid>"
METRICS = ["accuracy", "mcc", "macro_f1"]

# metrics, shares and their bootstrap in float64 against hand computations of a few dozen terms, at the scale of a
# share (1)
F64 = {"dtype": "float64", "depth": 64, "scale": 1}


def _sk(metric, gold, pred, labels):
    """The metric by sklearn; an invalid prediction (None or not a label) is the string '<invalid>'."""
    pred = [p if p in labels else INVALID for p in pred]
    if metric == "accuracy":
        return accuracy_score(gold, pred)
    if metric == "mcc":
        return matthews_corrcoef(gold, pred)
    return f1_score(gold, pred, labels=labels, average="macro", zero_division=0)


def _random_case(rng, n, n_labels, invalid=0.15):
    labels = [f"l{i}" for i in range(n_labels)]
    gold = [labels[i] for i in rng.integers(n_labels, size=n)]
    pred = [None if rng.random() < invalid else labels[i] for i in rng.integers(n_labels, size=n)]
    return labels, gold, pred


def _idx(labels, xs):
    return np.array([labels.index(x) if x in labels else -1 for x in xs], dtype=np.int64)


def _metric(metric, labels, gold, pred):
    conf = confusion_matrices(_idx(labels, gold), _idx(labels, pred)[None], len(labels))
    return float(metric_from_confusion(metric, conf)[0])


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("n_labels", [2, 3, 6])
def test_metrics_from_confusion_equal_sklearn(metric, n_labels):
    rng = np.random.default_rng(n_labels)
    for n, invalid in [(40, 0.0), (40, 0.15), (25, 0.5), (7, 0.2)]:
        labels, gold, pred = _random_case(rng, n, n_labels, invalid)
        assert _metric(metric, labels, gold, pred) == numerics.close(_sk(metric, gold, pred, labels), **F64)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("n_labels", [2, 6])
def test_degenerate_cases_equal_sklearn(metric, n_labels):
    rng = np.random.default_rng(10 + n_labels)
    labels, gold, _ = _random_case(rng, 20, n_labels)
    gold[0], gold[1] = labels[0], labels[1]  # at least two gold labels
    cases = {
        "constant": (gold, [labels[0]] * 20),
        "all invalid": (gold, [None] * 20),
        "perfect": (gold, list(gold)),
        "one gold label": ([labels[1]] * 20, [labels[1]] * 10 + [labels[0]] * 10),
        "not a label": (gold, ["zzz" if i % 3 == 0 else g for i, g in enumerate(gold)]),
    }
    for name, (g, p) in cases.items():
        assert _metric(metric, labels, g, p) == numerics.close(_sk(metric, g, p, labels), **F64), name
    if metric == "mcc":
        assert _metric(metric, labels, gold, [labels[0]] * 20) == 0.0
        assert _metric(metric, labels, gold, gold) == numerics.close(1.0, **F64)


def test_confusion_layout_and_float64():
    # gold a a b b c; run 0: a b b - c (one invalid); run 1: all invalid
    conf = confusion_matrices(np.array([0, 0, 1, 1, 2]), np.array([[0, 1, 1, -1, 2], [-1] * 5]), 3)
    assert conf.shape == (2, 3, 4)
    np.testing.assert_array_equal(conf[0], [[1, 1, 0, 0], [0, 1, 0, 1], [0, 0, 1, 0]])
    np.testing.assert_array_equal(conf[1], [[0, 0, 0, 2], [0, 0, 0, 2], [0, 0, 0, 1]])
    for metric in METRICS:
        out = metric_from_confusion(metric, conf)
        assert out.dtype == np.float64 and out.shape == (2,)
    assert metric_from_confusion("accuracy", conf)[0] == 3 / 5
    with pytest.raises(ValueError, match="unknown metric"):
        metric_from_confusion("f2", conf)
    with pytest.raises(ValueError, match="predicted indices"):
        confusion_matrices(np.array([0, 1]), np.array([[0, 3]]), 3)


def test_weights_equal_repeated_inputs():
    rng = np.random.default_rng(1)
    labels, gold, _ = _random_case(rng, 15, 3)
    preds = np.stack([_idx(labels, _random_case(rng, 15, 3)[2]) for _ in range(2)])  # (S=2, n)
    w = rng.integers(0, 4, size=(4, 15))
    weighted = confusion_matrices(_idx(labels, gold), preds, 3, w)
    assert weighted.shape == (4, 2, 3, 4)
    for b in range(4):
        rep = np.repeat(np.arange(15), w[b])
        plain = confusion_matrices(_idx(labels, gold)[rep], preds[:, rep], 3)
        np.testing.assert_array_equal(weighted[b], plain)
        # metrics are vectorised over the leading (B, S) axes
        for metric in METRICS:
            numerics.assert_close(metric_from_confusion(metric, weighted)[b],
                                       metric_from_confusion(metric, plain), **F64)
    # unit weights are the unweighted counts
    np.testing.assert_array_equal(confusion_matrices(_idx(labels, gold), preds, 3, np.ones((1, 15)))[0],
                                  confusion_matrices(_idx(labels, gold), preds, 3))


def _naive(gold, preds_a, preds_b, labels, metric, n_resamples, seed, paired):
    """The documented protocol, written out with Python loops and sklearn."""
    rng = np.random.default_rng(seed)
    n = len(gold)
    inputs = rng.integers(n, size=(n_resamples, n))
    if paired:
        seeds_a = seeds_b = rng.integers(len(preds_a), size=(n_resamples, len(preds_a)))
    else:
        seeds_a = rng.integers(len(preds_a), size=(n_resamples, len(preds_a)))
        seeds_b = rng.integers(len(preds_b), size=(n_resamples, len(preds_b)))
    delta = (np.mean([_sk(metric, gold, p, labels) for p in preds_a])
             - np.mean([_sk(metric, gold, p, labels) for p in preds_b]))
    reps = []
    for b in range(n_resamples):
        g = [gold[i] for i in inputs[b]]
        ma = np.mean([_sk(metric, g, [preds_a[s][i] for i in inputs[b]], labels) for s in seeds_a[b]])
        mb = np.mean([_sk(metric, g, [preds_b[s][i] for i in inputs[b]], labels) for s in seeds_b[b]])
        reps.append(ma - mb)
    reps = np.array(reps)
    p = (1 + sum(abs(r - delta) >= abs(delta) - _TIE_TOL for r in reps)) / (n_resamples + 1)
    return delta, reps, p, np.percentile(reps, [2.5, 97.5])


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("paired,runs", [(True, (2, 2)), (False, (2, 3)), (False, (3, 1))])
def test_bootstrap_equals_a_naive_loop(metric, paired, runs):
    rng = np.random.default_rng(7)
    labels, gold, _ = _random_case(rng, 12, 3)
    preds_a = [_random_case(rng, 12, 3)[2] for _ in range(runs[0])]
    preds_b = [_random_case(rng, 12, 3)[2] for _ in range(runs[1])]
    preds_b[0][0] = "not-a-label"  # a string outside the labels is invalid too
    got = paired_bootstrap(gold, preds_a, preds_b, labels, metric, n_resamples=50, seed=3, paired_seeds=paired,
                           chunk_size=7)
    delta, reps, p, (low, high) = _naive(gold, preds_a, preds_b, labels, metric, 50, 3, paired)
    assert isinstance(got, BootstrapResult) and got.n_resamples == 50 and got.replicates.shape == (50,)
    assert got.delta == numerics.close(delta, **F64)
    numerics.assert_close(got.replicates, reps, **F64)
    assert got.p_value == numerics.close(p, **F64)
    assert (got.ci_low, got.ci_high) == numerics.close((low, high), **F64)


def test_identical_predictions_give_delta_0_and_p_1():
    rng = np.random.default_rng(4)
    labels, gold, pred = _random_case(rng, 30, 3)
    for metric in METRICS:
        res = paired_bootstrap(gold, [pred, pred], [pred, pred], labels, metric, n_resamples=200)
        assert res.delta == 0 and res.p_value == 1
        assert np.all(res.replicates == 0) and res.ci_low == res.ci_high == 0


def test_always_right_against_always_wrong():
    labels = ["a", "b"]
    gold = ["a", "b"] * 20
    right, wrong = list(gold), [("b" if g == "a" else "a") for g in gold]
    res = paired_bootstrap(gold, [right, right], [wrong, wrong], labels, "accuracy", n_resamples=999)
    assert res.delta == 1 and res.p_value == 1 / 1000
    assert res.ci_low == res.ci_high == 1
    # the reverse direction: delta -1, same p-value
    rev = paired_bootstrap(gold, [wrong], [right], labels, "accuracy", n_resamples=999)
    assert rev.delta == -1 and rev.p_value == 1 / 1000


def test_hand_example():
    labels = ["a", "b"]
    gold = ["a", "b", "a", "b"]
    # A right on inputs 0, 2, 3 (3/4); B right on input 3 only, input 0 invalid (1/4): delta 0.5
    res = paired_bootstrap(gold, [["a", "a", "a", "b"]], [[None, "a", "b", "b"]], labels, "accuracy",
                           n_resamples=5, seed=11)
    assert res.delta == 0.5
    # replicate b by hand: on the resampled inputs, the share where A is right minus the share where B is
    inputs = np.random.default_rng(11).integers(4, size=(5, 4))
    a_right, b_right = np.array([1, 0, 1, 1]), np.array([0, 0, 0, 1])
    want = [(a_right[i].sum() - b_right[i].sum()) / 4 for i in inputs]
    numerics.assert_close(res.replicates, want, **F64)


def test_chunking_does_not_change_results():
    rng = np.random.default_rng(5)
    labels, gold, _ = _random_case(rng, 40, 4)
    preds_a = [_random_case(rng, 40, 4)[2] for _ in range(3)]
    preds_b = [_random_case(rng, 40, 4)[2] for _ in range(2)]
    for metric in METRICS:
        whole = paired_bootstrap(gold, preds_a, preds_b, labels, metric, n_resamples=1001, seed=2,
                                 paired_seeds=False, chunk_size=5000)
        for chunk in (64, 300, 1000):
            part = paired_bootstrap(gold, preds_a, preds_b, labels, metric, n_resamples=1001, seed=2,
                                    paired_seeds=False, chunk_size=chunk)
            np.testing.assert_array_equal(part.replicates, whole.replicates)
            assert (part.p_value, part.ci_low, part.ci_high) == (whole.p_value, whole.ci_low, whole.ci_high)


def test_seed_changes_the_draws_only():
    rng = np.random.default_rng(6)
    labels, gold, _ = _random_case(rng, 20, 3)
    pa, pb = [_random_case(rng, 20, 3)[2]], [_random_case(rng, 20, 3)[2]]
    r0 = paired_bootstrap(gold, pa, pb, labels, "mcc", n_resamples=100, seed=0)
    r1 = paired_bootstrap(gold, pa, pb, labels, "mcc", n_resamples=100, seed=1)
    assert r0.delta == r1.delta and not np.array_equal(r0.replicates, r1.replicates)
    np.testing.assert_array_equal(r0.replicates,
                                  paired_bootstrap(gold, pa, pb, labels, "mcc", n_resamples=100).replicates)


def test_errors():
    labels = ["a", "b"]
    gold = ["a", "b", "a", "b"]
    ok = [["a", "a", "a", "a"]]
    with pytest.raises(ValueError, match="no inputs"):
        paired_bootstrap([], [[]], [[]], labels, "accuracy")
    with pytest.raises(ValueError, match="predictions for 4 inputs"):
        paired_bootstrap(gold, [["a"]], ok, labels, "accuracy")
    with pytest.raises(ValueError, match="predictions for 4 inputs"):
        paired_bootstrap(gold, ok, [["a"] * 5], labels, "accuracy")
    with pytest.raises(ValueError, match="no runs"):
        paired_bootstrap(gold, [], ok, labels, "accuracy")
    with pytest.raises(ValueError, match="no runs"):
        paired_bootstrap(gold, ok, [], labels, "accuracy", paired_seeds=False)
    with pytest.raises(ValueError, match="unknown metric"):
        paired_bootstrap(gold, ok, ok, labels, "f2")
    with pytest.raises(ValueError, match="not among the labels"):
        paired_bootstrap(["c", "a", "a", "a"], ok, ok, labels, "accuracy")
    with pytest.raises(ValueError, match="paired seeds"):
        paired_bootstrap(gold, [gold, gold], [gold], labels, "accuracy")
    with pytest.raises(ValueError, match="n_resamples"):
        paired_bootstrap(gold, ok, ok, labels, "accuracy", n_resamples=0)
    with pytest.raises(ValueError, match="chunk_size"):
        paired_bootstrap(gold, ok, ok, labels, "accuracy", chunk_size=0)


def test_average_replicates():
    labels = ["a", "b"]
    gold = ["a", "b", "a", "b", "a"]
    r1 = paired_bootstrap(gold, [gold], [["b"] * 5], labels, "accuracy", n_resamples=100, seed=1)
    r2 = paired_bootstrap(gold, [["a"] * 5], [gold], labels, "mcc", n_resamples=100, seed=2)
    r3 = paired_bootstrap(gold, [["a", "b", "b", "b", "a"]], [["a"] * 5], labels, "macro_f1", n_resamples=100,
                          seed=3)
    avg = average_replicates([r1, r2, r3])
    assert avg.delta == numerics.close((r1.delta + r2.delta + r3.delta) / 3, **F64)
    numerics.assert_close(avg.replicates, (r1.replicates + r2.replicates + r3.replicates) / 3, **F64)
    extreme = np.sum(np.abs(avg.replicates - avg.delta) >= abs(avg.delta) - _TIE_TOL)
    assert avg.p_value == numerics.close((1 + extreme) / 101, **F64)
    assert (avg.ci_low, avg.ci_high) == pytest.approx(tuple(np.percentile(avg.replicates, [2.5, 97.5])))
    assert avg.n_resamples == 100
    one = average_replicates([r1])
    assert (one.delta, one.p_value, one.ci_low, one.ci_high) == (r1.delta, r1.p_value, r1.ci_low, r1.ci_high)
    with pytest.raises(ValueError, match="different numbers of resamples"):
        average_replicates([r1, paired_bootstrap(gold, [gold], [gold], labels, "accuracy", n_resamples=50)])
    with pytest.raises(ValueError, match="no results"):
        average_replicates([])


def test_a_bootstrap_too_large_to_draw_at_once_is_refused_before_it_allocates():
    """The resampled indices are drawn at once (the documented protocol): B x inputs past 2**28 is one error naming
    --bootstrap, not 100,000 x 70,000 x 8 bytes asked of the machine."""
    from pgra.core.errors import InputError
    from pgra.evaluation.significance import MAX_DRAWS

    gold = ["a", "b"] * 35_000
    with pytest.raises(InputError, match=r"100,000 x 70,000 input indices at once .* at most 3,834 resamples"):
        paired_bootstrap(gold, [gold], [gold], ["a", "b"], "accuracy", n_resamples=100_000)
    assert MAX_DRAWS // len(gold) == 3834
