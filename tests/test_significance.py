"""Metrics from confusion counts equal sklearn; the paired bootstrap equals a naive loop over the same draws."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from pgra.evaluation.significance import (
    average_replicates,
    confusion_matrices,
    metric_from_confusion,
    paired_bootstrap,
)

INVALID = "<invalid>"


def _sk(metric, gold, pred, labels):
    pred = [p if p is not None else INVALID for p in pred]
    if metric == "accuracy":
        return accuracy_score(gold, pred)
    if metric == "mcc":
        return matthews_corrcoef(gold, pred)
    return f1_score(gold, pred, labels=labels, average="macro", zero_division=0)


def _random_case(rng, n, n_labels, invalid=0.1):
    labels = [f"l{i}" for i in range(n_labels)]
    gold = [labels[i] for i in rng.integers(n_labels, size=n)]
    pred = [None if rng.random() < invalid else labels[i] for i in rng.integers(n_labels, size=n)]
    return labels, gold, pred


def _idx(labels, xs):
    return np.array([labels.index(x) if x is not None else -1 for x in xs])


@pytest.mark.parametrize("metric", ["accuracy", "mcc", "macro_f1"])
@pytest.mark.parametrize("n_labels", [2, 3, 6])
def test_metrics_from_confusion_equal_sklearn(metric, n_labels):
    rng = np.random.default_rng(n_labels)
    for _ in range(5):
        labels, gold, pred = _random_case(rng, 40, n_labels)
        conf = confusion_matrices(_idx(labels, gold), _idx(labels, pred)[None], n_labels)
        assert metric_from_confusion(metric, conf)[0] == pytest.approx(_sk(metric, gold, pred, labels), abs=1e-12)
    # degenerate: every prediction the same label (MCC 0), and all predictions invalid
    labels, gold, _ = _random_case(rng, 20, n_labels)
    for pred in ([labels[0]] * 20, [None] * 20):
        conf = confusion_matrices(_idx(labels, gold), _idx(labels, pred)[None], n_labels)
        assert metric_from_confusion(metric, conf)[0] == pytest.approx(_sk(metric, gold, pred, labels), abs=1e-12)


def test_weights_equal_repeated_inputs():
    rng = np.random.default_rng(1)
    labels, gold, pred = _random_case(rng, 15, 3)
    w = rng.integers(0, 4, size=(2, 15))
    weighted = confusion_matrices(_idx(labels, gold), _idx(labels, pred)[None], 3, w)
    for b in range(2):
        rep = np.repeat(np.arange(15), w[b])
        plain = confusion_matrices(_idx(labels, gold)[rep], _idx(labels, pred)[rep][None], 3)
        np.testing.assert_array_equal(weighted[b], plain)


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
    delta = np.mean([_sk(metric, gold, p, labels) for p in preds_a]) - \
        np.mean([_sk(metric, gold, p, labels) for p in preds_b])
    reps = []
    for b in range(n_resamples):
        g = [gold[i] for i in inputs[b]]
        ma = np.mean([_sk(metric, g, [preds_a[s][i] for i in inputs[b]], labels) for s in seeds_a[b]])
        mb = np.mean([_sk(metric, g, [preds_b[s][i] for i in inputs[b]], labels) for s in seeds_b[b]])
        reps.append(ma - mb)
    reps = np.array(reps)
    p = (1 + sum(abs(r - delta) >= abs(delta) - 1e-12 for r in reps)) / (n_resamples + 1)
    return delta, reps, p


@pytest.mark.parametrize("metric", ["accuracy", "mcc", "macro_f1"])
@pytest.mark.parametrize("paired,runs", [(True, (2, 2)), (False, (2, 3))])
def test_bootstrap_equals_a_naive_loop(metric, paired, runs):
    rng = np.random.default_rng(7)
    labels, gold, _ = _random_case(rng, 12, 3)
    preds_a = [_random_case(rng, 12, 3)[2] for _ in range(runs[0])]
    preds_b = [_random_case(rng, 12, 3)[2] for _ in range(runs[1])]
    got = paired_bootstrap(gold, preds_a, preds_b, labels, metric, n_resamples=50, seed=3, paired_seeds=paired,
                           chunk_size=7)
    delta, reps, p = _naive(gold, preds_a, preds_b, labels, metric, 50, 3, paired)
    assert got.delta == pytest.approx(delta, abs=1e-12)
    np.testing.assert_allclose(got.replicates, reps, atol=1e-12)
    assert got.p_value == pytest.approx(p, abs=1e-12)


def test_bootstrap_edge_cases_and_hand_example():
    labels = ["a", "b"]
    gold = ["a", "b", "a", "b"]
    same = paired_bootstrap(gold, [["a", "a", "a", "b"]], [["a", "a", "a", "b"]], labels, "accuracy",
                            n_resamples=200)
    assert same.delta == 0 and same.p_value == 1
    # hand example: A right on 3 of 4 inputs, B on 1 of 4: delta 0.75 - 0.25
    hand = paired_bootstrap(gold, [["a", "a", "a", "b"]], [["b", "a", "b", "b"]], labels, "accuracy",
                            n_resamples=200)
    assert hand.delta == pytest.approx(0.5)
    gold40 = ["a", "b"] * 20
    right, wrong = list(gold40), [("b" if g == "a" else "a") for g in gold40]
    clear = paired_bootstrap(gold40, [right, right], [wrong, wrong], labels, "accuracy", n_resamples=999)
    assert clear.delta == 1 and clear.p_value == 1 / 1000
    assert clear.ci_low == clear.ci_high == 1
    chunked = paired_bootstrap(gold40, [right], [wrong[:20] + right[20:]], labels, "mcc", n_resamples=1001,
                               chunk_size=100)
    whole = paired_bootstrap(gold40, [right], [wrong[:20] + right[20:]], labels, "mcc", n_resamples=1001,
                             chunk_size=5000)
    np.testing.assert_array_equal(chunked.replicates, whole.replicates)
    with pytest.raises(ValueError, match="predictions for 4 inputs"):
        paired_bootstrap(gold, [["a"]], [["a", "a", "a", "a"]], labels, "accuracy")
    with pytest.raises(ValueError, match="paired seeds"):
        paired_bootstrap(gold, [gold, gold], [gold], labels, "accuracy")
    with pytest.raises(ValueError, match="not among the labels"):
        paired_bootstrap(["c"], [["a"]], [["a"]], labels, "accuracy")


def test_average_replicates():
    labels = ["a", "b"]
    gold = ["a", "b", "a", "b", "a"]
    r1 = paired_bootstrap(gold, [gold], [["b"] * 5], labels, "accuracy", n_resamples=100, seed=1)
    r2 = paired_bootstrap(gold, [["a"] * 5], [gold], labels, "accuracy", n_resamples=100, seed=2)
    avg = average_replicates([r1, r2])
    assert avg.delta == pytest.approx((r1.delta + r2.delta) / 2)
    np.testing.assert_allclose(avg.replicates, (r1.replicates + r2.replicates) / 2)
    extreme = np.sum(np.abs(avg.replicates - avg.delta) >= abs(avg.delta) - 1e-12)
    assert avg.p_value == pytest.approx((1 + extreme) / 101)
