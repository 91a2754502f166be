"""Classification metrics chosen by the task (accuracy; Matthews correlation for CoLA; macro-F1)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..tasks.spec import METRICS


def accuracy(gold: Sequence[str], pred: Sequence[str]) -> float:
    _check(gold, pred)
    return sum(g == p for g, p in zip(gold, pred, strict=True)) / len(gold)


def mcc(gold: Sequence[str], pred: Sequence[str]) -> float:
    _check(gold, pred)
    from sklearn.metrics import matthews_corrcoef  # here: importing sklearn costs every pgra process 1-2 s

    return float(matthews_corrcoef(list(gold), list(pred)))


def macro_f1(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str] | None = None) -> float:
    _check(gold, pred)
    from sklearn.metrics import f1_score

    return float(f1_score(list(gold), list(pred), labels=list(labels) if labels else None, average="macro",
                          zero_division=0))


def compute_metric(name: str, gold: Sequence[str], pred: Sequence[str],
                   labels: Sequence[str] | None = None) -> float:
    """The task metric ``name`` (one of accuracy, mcc, macro_f1), as a fraction (not percent)."""
    if name == "accuracy":
        return accuracy(gold, pred)
    if name == "mcc":
        return mcc(gold, pred)
    if name == "macro_f1":
        return macro_f1(gold, pred, labels)
    raise ValueError(f"unknown metric '{name}', use one of {METRICS}")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value) over seeds."""
    if not values:
        raise ValueError("no values")
    m = sum(values) / len(values)
    if len(values) == 1:
        return m, 0.0
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _check(gold: Sequence[str], pred: Sequence[str]) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels but {len(pred)} predictions")
    if not gold:
        raise ValueError("no examples to score")
