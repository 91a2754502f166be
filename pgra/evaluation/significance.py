"""Paired bootstrap significance of a metric difference, over shared test inputs and seeds.

Every metric (accuracy, Matthews correlation, macro-F1) is computed from confusion counts, so a bootstrap
resample is a vector of per-input weights and all resamples are scored in a few matrix products. An invalid
prediction (no label) is an extra predicted column that no gold label has: it counts as wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..tasks.spec import METRICS


def confusion_matrices(gold_idx: np.ndarray, pred_idx: np.ndarray, n_labels: int,
                       weights: np.ndarray | None = None) -> np.ndarray:
    """Confusion counts ``(S, L, L+1)`` (or ``(B, S, L, L+1)`` with ``weights`` ``(B, n)``).

    ``gold_idx`` ``(n,)``: gold label indices; ``pred_idx`` ``(S, n)``: predicted indices per run, -1 = invalid
    (counted in the last column). Rows are gold labels, columns predictions.
    """
    gold_idx = np.asarray(gold_idx, dtype=np.int64)
    pred_idx = np.atleast_2d(np.asarray(pred_idx, dtype=np.int64))
    cols = n_labels + 1
    cell = gold_idx[None, :] * cols + np.where(pred_idx < 0, n_labels, pred_idx)  # (S, n)
    onehot = np.zeros((*cell.shape, n_labels * cols), dtype=np.float64)
    np.put_along_axis(onehot, cell[..., None], 1.0, axis=-1)
    if weights is None:
        return onehot.sum(axis=1).reshape(-1, n_labels, cols)
    counts = np.einsum("bn,snc->bsc", np.asarray(weights, dtype=np.float64), onehot)
    return counts.reshape(counts.shape[0], -1, n_labels, cols)


def metric_from_confusion(name: str, conf: np.ndarray) -> np.ndarray:
    """The metric ``name`` of confusion counts ``(..., L, L+1)`` (rows gold, last column invalid)."""
    conf = np.asarray(conf, dtype=np.float64)
    n_labels = conf.shape[-2]
    total = conf.sum(axis=(-2, -1))
    tp = np.diagonal(conf[..., :n_labels], axis1=-2, axis2=-1)  # (..., L)
    if name == "accuracy":
        return tp.sum(-1) / total
    true = conf.sum(-1)                 # (..., L) gold counts
    predicted = conf.sum(-2)            # (..., L+1) predicted counts, invalid last
    if name == "macro_f1":
        denom = true + predicted[..., :n_labels]  # 2tp + fp + fn
        f1 = np.divide(2 * tp, denom, out=np.zeros_like(tp), where=denom > 0)
        return f1.mean(-1)
    if name == "mcc":  # Gorodkin's multiclass MCC, as sklearn.metrics.matthews_corrcoef
        correct = tp.sum(-1)
        cov_ytyp = correct * total - (true * predicted[..., :n_labels]).sum(-1)
        cov_ypyp = total ** 2 - (predicted ** 2).sum(-1)
        cov_ytyt = total ** 2 - (true ** 2).sum(-1)
        denom = np.sqrt(cov_ytyt * cov_ypyp)
        return np.divide(cov_ytyp, denom, out=np.zeros_like(cov_ytyp), where=denom > 0)
    raise ValueError(f"unknown metric '{name}', use one of {METRICS}")


def compute_metric_from_indices(name: str, gold_idx: Sequence[int], pred_idx: Sequence[int], n_labels: int) -> float:
    """The metric of one run given label indices (-1 = invalid prediction)."""
    return float(metric_from_confusion(name, confusion_matrices(np.asarray(gold_idx), np.asarray(pred_idx)[None],
                                                                 n_labels))[0])


@dataclass
class BootstrapResult:
    """Observed difference (A - B), two-sided p-value, 95% percentile interval and the resampled differences."""

    delta: float
    p_value: float
    ci_low: float
    ci_high: float
    n_resamples: int
    replicates: np.ndarray


def _summarise(delta: float, replicates: np.ndarray) -> BootstrapResult:
    """Null-centred two-sided p-value ``(1 + #{|d* - d| >= |d|}) / (B + 1)`` and the percentile interval."""
    extreme = int(np.sum(np.abs(replicates - delta) >= abs(delta) - 1e-12))
    low, high = np.percentile(replicates, [2.5, 97.5])
    return BootstrapResult(float(delta), (1 + extreme) / (len(replicates) + 1), float(low), float(high),
                           len(replicates), replicates)


def _indices(preds: Sequence[Sequence[str | None]], labels: Sequence[str], n: int, name: str) -> np.ndarray:
    if not preds:
        raise ValueError(f"no runs (seeds) for {name}")
    index = {lab: i for i, lab in enumerate(labels)}
    rows = []
    for s, run in enumerate(preds):
        if len(run) != n:
            raise ValueError(f"{name} run {s} has {len(run)} predictions for {n} inputs")
        rows.append([index.get(p, -1) if p is not None else -1 for p in run])
    return np.asarray(rows, dtype=np.int64)


def paired_bootstrap(gold: Sequence[str], preds_a: Sequence[Sequence[str | None]],
                     preds_b: Sequence[Sequence[str | None]], labels: Sequence[str], metric: str,
                     n_resamples: int = 10000, seed: int = 0, paired_seeds: bool = True,
                     chunk_size: int = 1000) -> BootstrapResult:
    """Paired bootstrap of ``mean_s metric(A_s) - mean_s metric(B_s)`` over the shared inputs and the seeds.

    ``preds_a[s]`` / ``preds_b[s]``: predictions of run (seed) ``s`` on the ``gold`` inputs, in the same order.
    Draws, in this order: ``rng = default_rng(seed)``; ``inputs = rng.integers(n, size=(B, n))``; then
    ``seeds = rng.integers(S, size=(B, S))`` shared by both methods when ``paired_seeds`` (run s of A is
    paired with run s of B), else ``seeds_a`` then ``seeds_b`` drawn separately. Replicate b scores every run
    on the resampled inputs (the same resample for both methods) and averages over the resampled seeds.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric '{metric}', use one of {METRICS}")
    n = len(gold)
    if n == 0:
        raise ValueError("no inputs")
    index = {lab: i for i, lab in enumerate(labels)}
    missing = sorted({g for g in gold if g not in index})
    if missing:
        raise ValueError(f"gold labels {missing} are not among the labels {list(labels)}")
    gold_idx = np.asarray([index[g] for g in gold], dtype=np.int64)
    a, b = _indices(preds_a, labels, n, "A"), _indices(preds_b, labels, n, "B")
    if paired_seeds and len(a) != len(b):
        raise ValueError(f"paired seeds need as many runs of A as of B ({len(a)} vs {len(b)})")
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
        rows = inputs[start:stop]
        weights = np.bincount((rows + n * np.arange(stop - start)[:, None]).ravel(),
                              minlength=(stop - start) * n).reshape(stop - start, n)
        m_a = metric_from_confusion(metric, confusion_matrices(gold_idx, a, n_labels, weights))  # (b, S_a)
        m_b = metric_from_confusion(metric, confusion_matrices(gold_idx, b, n_labels, weights))
        pick_a = np.take_along_axis(m_a, seeds_a[start:stop], axis=1).mean(1)
        pick_b = np.take_along_axis(m_b, seeds_b[start:stop], axis=1).mean(1)
        replicates[start:stop] = pick_a - pick_b
    return _summarise(delta, replicates)


def average_replicates(results: Sequence[BootstrapResult]) -> BootstrapResult:
    """The test of the average over tasks: mean of the task differences and of their resampled differences."""
    if not results:
        raise ValueError("no results to average")
    sizes = {r.n_resamples for r in results}
    if len(sizes) != 1:
        raise ValueError(f"results with different numbers of resamples: {sorted(sizes)}")
    delta = float(np.mean([r.delta for r in results]))
    return _summarise(delta, np.mean([r.replicates for r in results], axis=0))


__all__ = ["BootstrapResult", "average_replicates", "compute_metric_from_indices", "confusion_matrices",
           "metric_from_confusion", "paired_bootstrap"]
