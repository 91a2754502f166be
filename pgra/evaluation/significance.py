"""Paired bootstrap significance of a metric difference, over shared test inputs and seeds: every metric comes from
confusion counts, so a resample is a vector of per-input weights and all are scored with one matrix product."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import InputError
from ..tasks.spec import METRICS

#: slack on the p-value's tie test ``|d* - d| >= |d|``: a replicate equal to 0 or 2d in exact arithmetic
#: counts as extreme even when rounding moves it by a few ulps
_TIE_TOL = 1e-12
MAX_DRAWS = 2 ** 28  # resampled input indices drawn at once (8 bytes each: 2 GiB)


def confusion_matrices(gold_idx: np.ndarray, pred_idx: np.ndarray, n_labels: int,
                       weights: np.ndarray | None = None) -> np.ndarray:
    """Confusion counts ``(S, L, L+1)``, or ``(B, S, L, L+1)`` with per-input ``weights`` ``(B, n)``: rows gold
    (``gold_idx`` ``(n,)`` in ``[0, L)``), columns predicted (``pred_idx`` ``(S, n)``, -1 = invalid: the last)."""
    gold_idx = np.asarray(gold_idx, dtype=np.int64)
    pred_idx = np.atleast_2d(np.asarray(pred_idx, dtype=np.int64))
    if gold_idx.ndim != 1 or pred_idx.ndim != 2 or pred_idx.shape[1] != gold_idx.shape[0]:
        raise ValueError(f"gold indices {gold_idx.shape} and predicted indices {pred_idx.shape} do not match "
                         "((n,) and (S, n))")
    if gold_idx.size and (gold_idx.min() < 0 or gold_idx.max() >= n_labels):
        raise ValueError(f"gold indices must lie in [0, {n_labels})")
    if pred_idx.size and (pred_idx.min() < -1 or pred_idx.max() >= n_labels):
        raise ValueError(f"predicted indices must lie in [-1, {n_labels})")
    n_runs, n = pred_idx.shape
    cols = n_labels + 1
    cells = n_labels * cols
    cell = gold_idx[None, :] * cols + np.where(pred_idx < 0, n_labels, pred_idx)  # (S, n)
    if weights is None:
        flat = (cell + cells * np.arange(n_runs)[:, None]).ravel()
        return np.bincount(flat, minlength=n_runs * cells).astype(np.float64).reshape(n_runs, n_labels, cols)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != n:
        raise ValueError(f"weights must have shape (B, {n}), got {weights.shape}")
    onehot = np.zeros((n, n_runs, cells), dtype=np.float64)  # input x (run, cell)
    onehot[np.arange(n)[None, :], np.arange(n_runs)[:, None], cell] = 1.0
    counts = weights @ onehot.reshape(n, n_runs * cells)  # (B, S * cells)
    return counts.reshape(weights.shape[0], n_runs, n_labels, cols)


def metric_from_confusion(name: str, conf: np.ndarray) -> np.ndarray:
    """The metric ``name`` of confusion counts ``(..., L, L+1)`` (rows gold, last column invalid) as sklearn computes
    it (mcc 0 on a zero denominator; macro_f1 with ``zero_division=0``, invalid predictions false negatives)."""
    if name not in METRICS:
        raise ValueError(f"unknown metric '{name}', use one of {METRICS}")
    conf = np.asarray(conf, dtype=np.float64)
    n_labels = conf.shape[-2]
    if conf.shape[-1] != n_labels + 1:
        raise ValueError(f"confusion counts must have shape (..., L, L+1), got {conf.shape}")
    total = conf.sum(axis=(-2, -1))
    tp = np.diagonal(conf[..., :n_labels], axis1=-2, axis2=-1)  # (..., L)
    correct = tp.sum(-1)
    if name == "accuracy":
        return correct / total
    true = conf.sum(-1)  # (..., L) gold counts
    predicted = conf.sum(-2)  # (..., L+1) predicted counts, invalid last
    if name == "macro_f1":
        denom = true + predicted[..., :n_labels]  # 2tp + fp + fn
        f1 = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
        return f1.mean(-1)
    # mcc; no gold label is invalid, so the invalid column adds nothing to t . p
    cov_ytyp = correct * total - (true * predicted[..., :n_labels]).sum(-1)
    cov_ypyp = total ** 2 - (predicted ** 2).sum(-1)
    cov_ytyt = total ** 2 - (true ** 2).sum(-1)
    denom_sq = cov_ytyt * cov_ypyp
    safe = np.where(denom_sq != 0, denom_sq, 1.0)
    return np.where(denom_sq != 0, cov_ytyp / np.sqrt(safe), 0.0)


@dataclass
class BootstrapResult:
    """Observed difference (A - B), two-sided p-value, 95% percentile interval and the resampled differences."""

    delta: float
    p_value: float
    ci_low: float
    ci_high: float
    n_resamples: int
    replicates: np.ndarray = field(repr=False)


def _summarise(delta: float, replicates: np.ndarray) -> BootstrapResult:
    """Null-centred two-sided p-value ``(1 + #{|d* - d| >= |d|}) / (B + 1)`` and the 2.5-97.5% interval."""
    replicates = np.asarray(replicates, dtype=np.float64)
    extreme = int(np.count_nonzero(np.abs(replicates - delta) >= abs(delta) - _TIE_TOL))
    low, high = np.percentile(replicates, [2.5, 97.5])
    return BootstrapResult(float(delta), (1 + extreme) / (len(replicates) + 1), float(low), float(high),
                           len(replicates), replicates)


def draw_counts(draws: np.ndarray, n: int) -> np.ndarray:
    """How often each of ``n`` items was drawn in each row of ``draws``: counts ``(rows, n)``, one bincount."""
    rows = draws.shape[0]
    flat = (draws + n * np.arange(rows)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * n).reshape(rows, n)


def input_weights(n_resamples: int, n: int, seed: int = 0,
                  clusters: Sequence[object] | None = None) -> np.ndarray:
    """Bootstrap weights ``(B, n)``: how often replicate b drew each input, as :func:`paired_bootstrap` draws; with
    ``clusters`` (an input's source) the sources are drawn instead and every input weighs its source's count."""
    if n_resamples < 1 or n < 1:
        raise ValueError(f"need at least one resample and one input, got {n_resamples} and {n}")
    rng = np.random.default_rng(seed)
    if clusters is None:
        return draw_counts(rng.integers(n, size=(n_resamples, n)), n)
    if len(clusters) != n:
        raise ValueError(f"{len(clusters)} cluster values for {n} inputs")
    first: dict[object, int] = {}
    member = np.asarray([first.setdefault(c, len(first)) for c in clusters], dtype=np.int64)
    g = len(first)
    return draw_counts(rng.integers(g, size=(n_resamples, g)), g)[:, member]


def share_bootstrap(numer: Sequence[float] | np.ndarray, denom: Sequence[float] | np.ndarray,
                    weights: np.ndarray) -> BootstrapResult:
    """``sum(numer) / sum(denom)`` and its bootstrap under ``weights`` ``(B, n)``: a share of evidence or, with
    ``numer`` a difference of two counts, a paired difference of shares (only then does its p-value mean anything)."""
    numer, denom = np.asarray(numer, dtype=np.float64), np.asarray(denom, dtype=np.float64)
    if numer.shape != denom.shape or weights.shape[1:] != numer.shape:
        raise ValueError(f"numerators {numer.shape}, denominators {denom.shape} and weights {weights.shape} differ")
    with np.errstate(invalid="ignore", divide="ignore"):
        return _summarise(float(numer.sum() / denom.sum()), (weights @ numer) / (weights @ denom))


def _indices(preds: Sequence[Sequence[str | None]], index: dict[str, int], n: int, name: str) -> np.ndarray:
    """Label indices ``(S, n)`` of one method's runs; None or a string not among the labels is -1."""
    if len(preds) == 0:
        raise ValueError(f"no runs (seeds) for method {name}")
    rows = []
    for s, run in enumerate(preds):
        if len(run) != n:
            raise ValueError(f"method {name} run {s} has {len(run)} predictions for {n} inputs")
        rows.append([index.get(p, -1) if p is not None else -1 for p in run])
    return np.asarray(rows, dtype=np.int64)


def paired_bootstrap(gold: Sequence[str], preds_a: Sequence[Sequence[str | None]],
                     preds_b: Sequence[Sequence[str | None]], labels: Sequence[str], metric: str,
                     n_resamples: int = 10000, seed: int = 0, paired_seeds: bool = True,
                     chunk_size: int = 1000) -> BootstrapResult:
    """Paired bootstrap of ``delta = mean_s metric(A_s) - mean_s metric(B_s)`` over the shared inputs and seeds.

    ``preds_a[s]`` / ``preds_b[s]``: run s of method A / reference B on the ``gold`` inputs; None or a string not in
    ``labels`` is wrong. Draws, in this order: ``rng = np.random.default_rng(seed)``; ``inputs = rng.integers(n,
    size=(B, n))``; then ``seeds = rng.integers(S, size=(B, S))`` for both (``paired_seeds``: run s of A with run s
    of B), else ``seeds_a`` then ``seeds_b`` the same way. Two-sided null-centred p-value ``(1 + #{b: |delta*_b -
    delta| >= |delta|}) / (B + 1)``; the interval: the 2.5 and 97.5 percentiles of ``delta*``."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric '{metric}', use one of {METRICS}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    n = len(gold)
    if n == 0:
        raise ValueError("no inputs to resample (empty gold)")
    if n_resamples * n > MAX_DRAWS:  # drawn at once, so that the p-values follow the documented protocol
        raise InputError(f"the paired bootstrap would draw {n_resamples:,} x {n:,} input indices at once "
                         f"({n_resamples * n * 8 / 2 ** 30:.1f} GiB): at most {MAX_DRAWS // n:,} resamples for "
                         f"{n:,} inputs", field="bootstrap")
    index = {lab: i for i, lab in enumerate(labels)}
    missing = sorted({g for g in gold if g not in index})
    if missing:
        raise ValueError(f"gold labels {missing} are not among the labels {list(labels)}")
    gold_idx = np.asarray([index[g] for g in gold], dtype=np.int64)
    a, b = _indices(preds_a, index, n, "A"), _indices(preds_b, index, n, "B")
    if paired_seeds and len(a) != len(b):
        raise ValueError(f"paired seeds need as many runs of A as of B ({len(a)} vs {len(b)}); "
                         "use paired_seeds=False")
    n_labels = len(labels)
    delta = float(metric_from_confusion(metric, confusion_matrices(gold_idx, a, n_labels)).mean()
                  - metric_from_confusion(metric, confusion_matrices(gold_idx, b, n_labels)).mean())

    rng = np.random.default_rng(seed)
    inputs = rng.integers(n, size=(n_resamples, n))
    if paired_seeds:
        seeds_a = seeds_b = rng.integers(len(a), size=(n_resamples, len(a)))
    else:
        seeds_a = rng.integers(len(a), size=(n_resamples, len(a)))
        seeds_b = rng.integers(len(b), size=(n_resamples, len(b)))

    replicates = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, chunk_size):
        stop = min(start + chunk_size, n_resamples)
        weights = draw_counts(inputs[start:stop], n)
        m_a = metric_from_confusion(metric, confusion_matrices(gold_idx, a, n_labels, weights))  # (rows, S_a)
        m_b = metric_from_confusion(metric, confusion_matrices(gold_idx, b, n_labels, weights))  # (rows, S_b)
        pick_a = np.take_along_axis(m_a, seeds_a[start:stop], axis=1).mean(1)
        pick_b = np.take_along_axis(m_b, seeds_b[start:stop], axis=1).mean(1)
        replicates[start:stop] = pick_a - pick_b
    return _summarise(delta, replicates)


def average_replicates(results: Sequence[BootstrapResult]) -> BootstrapResult:
    """The test of the average over tasks: the mean of their differences and replicates."""
    if not results:
        raise ValueError("no results to average")
    sizes = {r.n_resamples for r in results}
    if len(sizes) != 1:
        raise ValueError(f"results with different numbers of resamples: {sorted(sizes)}")
    delta = float(np.mean([r.delta for r in results]))
    return _summarise(delta, np.mean([np.asarray(r.replicates, dtype=np.float64) for r in results], axis=0))


__all__ = ["BootstrapResult", "average_replicates", "confusion_matrices", "draw_counts",
           "input_weights", "metric_from_confusion", "paired_bootstrap", "share_bootstrap"]
