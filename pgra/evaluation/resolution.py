"""What a comparison can resolve: Holm-adjusted p-values, the minimum detectable effect (MDE) and the planning
arithmetic of test inputs and seeds (differences and standard errors are fractions)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

DEFAULT_ALPHA = 0.05
DEFAULT_POWER = 0.8
# Planning assumptions, not measurements (a user can override them; the report measures the real spread: its SE
# comes from the bootstrap replicates over inputs and seeds). DEFAULT_DISAGREEMENT: the share of test inputs on
# which two methods differ in correctness; readers near the paper's accuracies (about 90% on most tasks,
# configs/paper/targets.yaml) are each wrong on about 10% of the inputs, and half of those errors shared gives
# 5% + 5%. DEFAULT_SEED_STD: one method's standard deviation over seeds, 0.5 points; the paper's Table 2 gives means
# of 3 runs without their spread (its Table 8 gives PGRA's alone), so this is assumed.
DEFAULT_DISAGREEMENT = 0.10
DEFAULT_SEED_STD = 0.005
# the paper's average gain of PGRA over FiD: 82.4 - 81.8 points (Table 2's average column, configs/paper/targets.yaml)
PAPER_GAIN = 0.006
# how far past its closed form inputs_needed / seeds_needed step for rounding before giving up
_MAX_STEPS = 1000


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values, in the input order (each in [0, 1], else a ValueError)."""
    ps = [float(p) for p in p_values]
    for p in ps:
        if math.isnan(p) or not 0.0 <= p <= 1.0:
            raise ValueError(f"p-values must lie in [0, 1], got {p}")
    m = len(ps)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: ps[i])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def _z_sum(alpha: float, power: float) -> float:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if not 0.0 < power < 1.0:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    normal = NormalDist()
    return normal.inv_cdf(1.0 - alpha / 2.0) + normal.inv_cdf(power)


def minimum_detectable_effect(se: float, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> float:
    """The smallest true difference a two-sided test at ``alpha`` finds with ``power``: (z_{1-alpha/2} + z_power) se."""
    se = float(se)
    if math.isnan(se) or se < 0:
        raise ValueError(f"the standard error must be >= 0, got {se}")
    return _z_sum(alpha, power) * se


def bootstrap_se(replicates: Sequence[float] | np.ndarray) -> float:
    """The standard error of a difference: its bootstrap replicates' standard deviation (ddof=1)."""
    values = np.asarray(replicates, dtype=np.float64).ravel()
    if values.size < 2:
        raise ValueError(f"a standard error needs at least 2 replicates, got {values.size}")
    if not np.all(np.isfinite(values)):
        raise ValueError("bootstrap replicates must be finite")
    return float(np.std(values, ddof=1))


def _check_plan(disagreement: float, seed_std: float) -> None:
    if math.isnan(disagreement) or not 0.0 <= disagreement <= 1.0:
        raise ValueError(f"disagreement must lie in [0, 1], got {disagreement}")
    if math.isnan(seed_std) or seed_std < 0:
        raise ValueError(f"seed_std must be >= 0, got {seed_std}")


def _check_count(n: int, name: str) -> None:
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {n}")


def planned_se(n_inputs: int, n_seeds: int, disagreement: float = DEFAULT_DISAGREEMENT,
               seed_std: float = DEFAULT_SEED_STD) -> float:
    """The planned standard error of two seeded methods' accuracy difference:
    ``sqrt(disagreement / n_inputs + 2 seed_std^2 / n_seeds)`` (the input term's ``-delta^2 / n`` neglected; the
    two methods' seeds independent)."""
    _check_count(n_inputs, "n_inputs")
    _check_count(n_seeds, "n_seeds")
    _check_plan(disagreement, seed_std)
    return math.sqrt(disagreement / n_inputs + 2.0 * seed_std ** 2 / n_seeds)


def _check_effect(effect: float) -> None:
    if math.isnan(effect) or effect <= 0:
        raise ValueError(f"the effect must be > 0, got {effect}")


def _smallest(fits: Callable[[int], bool], first: float) -> int | None:
    """The smallest n >= 1 with ``fits(n)``, stepping from the closed-form ``first`` past rounding either way; None
    when ``first`` is beyond a float or rounding keeps the MDE above the effect."""
    if not math.isfinite(first):
        return None
    n = max(math.ceil(first), 1)
    for _ in range(_MAX_STEPS):
        if fits(n):
            break
        n += 1
    else:
        return None
    while n > 1 and fits(n - 1):
        n -= 1
    return n


def _needed(effect: float, fixed: float, scale: float, mde_at: Callable[[int], float], alpha: float,
            power: float) -> int | None:
    """The smallest n with ``mde_at(n) <= effect`` (variance ``fixed + scale / n``); None: none suffices."""
    room = (effect / _z_sum(alpha, power)) ** 2 - fixed  # what the term in n may take of the variance
    if room < 0 or (room == 0 and scale > 0):
        return None
    return _smallest(lambda n: mde_at(n) <= effect, scale / room if room else 1.0)


def inputs_needed(effect: float, n_seeds: int, disagreement: float = DEFAULT_DISAGREEMENT,
                  seed_std: float = DEFAULT_SEED_STD, alpha: float = DEFAULT_ALPHA,
                  power: float = DEFAULT_POWER) -> int | None:
    """The fewest test inputs whose planned MDE at ``n_seeds`` is at most ``effect`` (None: none suffices)."""
    _check_effect(effect)
    _check_count(n_seeds, "n_seeds")
    _check_plan(disagreement, seed_std)
    return _needed(effect, 2.0 * seed_std ** 2 / n_seeds, disagreement, lambda n: minimum_detectable_effect(
        planned_se(n, n_seeds, disagreement, seed_std), alpha, power), alpha, power)


def seeds_needed(effect: float, n_inputs: int, disagreement: float = DEFAULT_DISAGREEMENT,
                 seed_std: float = DEFAULT_SEED_STD, alpha: float = DEFAULT_ALPHA,
                 power: float = DEFAULT_POWER) -> int | None:
    """The fewest seeds whose planned MDE at ``n_inputs`` is at most ``effect`` (None: none suffices)."""
    _check_effect(effect)
    _check_count(n_inputs, "n_inputs")
    _check_plan(disagreement, seed_std)
    return _needed(effect, disagreement / n_inputs, 2.0 * seed_std ** 2, lambda s: minimum_detectable_effect(
        planned_se(n_inputs, s, disagreement, seed_std), alpha, power), alpha, power)


def plan_resolution(n_inputs: int, n_seeds: int, effect: float = PAPER_GAIN,
                    disagreement: float = DEFAULT_DISAGREEMENT, seed_std: float = DEFAULT_SEED_STD,
                    alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> dict[str, Any]:
    """What ``n_inputs`` test inputs and ``n_seeds`` seeds resolve between two seeded methods; what ``effect`` needs."""
    se = planned_se(n_inputs, n_seeds, disagreement, seed_std)
    return {"n_inputs": n_inputs, "n_seeds": n_seeds, "se": se,
            "mde": minimum_detectable_effect(se, alpha, power), "effect": effect,
            "inputs_needed": inputs_needed(effect, n_seeds, disagreement, seed_std, alpha, power),
            "seeds_needed": seeds_needed(effect, n_inputs, disagreement, seed_std, alpha, power),
            "disagreement": disagreement, "seed_std": seed_std, "alpha": alpha, "power": power}


def resolution_lines(plans: dict[str, dict[str, Any] | str]) -> list[str]:
    """The dry run's "Resolution" section: per task its :func:`plan_resolution`, or why it has none."""
    first = next((p for p in plans.values() if isinstance(p, dict)), None)
    if first is None:
        return ["Resolution:"] + [f"  {task}: {why}" for task, why in plans.items()]
    lines = [f"Resolution (planned, between two seeded methods, accuracy, two-sided alpha {first['alpha']:g}, power "
             f"{first['power']:g}; assumed: they differ in correctness on {100 * first['disagreement']:g}% of the test "
             f"inputs and each has {100 * first['seed_std']:g} points std over seeds; the report measures both):"]
    for task, plan in plans.items():
        if isinstance(plan, str):
            lines.append(f"  {task}: {plan}")
            continue
        s = plan["n_seeds"]
        need_n = (f"{plan['inputs_needed']:,} test inputs at {s} seed(s)" if plan["inputs_needed"] is not None
                  else f"no number of test inputs at {s} seed(s)")
        need_s = (f"{plan['seeds_needed']:,} seed(s) at {plan['n_inputs']:,} inputs"
                  if plan["seeds_needed"] is not None else f"no number of seeds at {plan['n_inputs']:,} inputs")
        note = f" ({plan['note']})" if plan.get("note") else ""
        lines.append(f"  {task}: {plan['n_inputs']:,} test inputs x {s} seed(s): minimum detectable effect "
                     f"{100 * plan['mde']:.2f} points; to detect +{100 * plan['effect']:g} points: {need_n}, or {need_s}"
                     f"{note}")
    return lines


__all__ = ["DEFAULT_ALPHA", "DEFAULT_DISAGREEMENT", "DEFAULT_POWER", "DEFAULT_SEED_STD", "PAPER_GAIN",
           "bootstrap_se", "holm", "inputs_needed", "minimum_detectable_effect", "plan_resolution", "planned_se",
           "resolution_lines", "seeds_needed"]
