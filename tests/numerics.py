"""The suite's numerics policy (docs/tests-and-benchmarks.md, *Numerics policy*), carried by one module.

* **Exact** (``==``, byte for byte): integers, ids, labels, counts, strings and order; floats only where both sides
  come from the same kernels on the same inputs in the same shapes (one machine, one batch composition, one thread
  count), or from arithmetic that rounds the same on every CPU. Such a comparison says why in a ``# exact:`` comment.
* **Within the policy**: floats that pass through batched or vectorised kernels (BLAS, oneDNN, SIMD reductions,
  faiss, libm) differ with the instruction set, the batch a row was computed in and the thread count. They are
  compared by :func:`assert_close` / :func:`close`: ``|actual - expected| <= tolerance(dtype, depth) * scale`` with
  ``scale`` the largest magnitude expected (normwise, so a value near zero that came out of cancellation is judged
  against the values it came from). ``tolerance = eps(dtype) * depth`` is the first-order bound on ``depth``
  chained roundings (a reduction of n terms rounds up to n times), twice the unit roundoff each: a bound, not a
  number tuned on one CPU.
* **Rankings** are compared by score (:func:`assert_same_ranking`): two ids may swap, or one leave a top-k at its
  cut, only where their scores are tied within the policy. Swaps are never counted.

``tests/test_numerics_policy.py`` fails on an absolute or relative tolerance below :data:`FLOOR` written outside
this module, and on an exact float comparison (``atol=0``) without its ``# exact:`` comment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

# machine epsilon (2x the unit roundoff) of each dtype a kernel may round to
EPS = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
FLOOR = EPS["float32"]  # the smallest tolerance a test may write by hand: fp32 at depth 1

# depths of the suite's usual computations (roundings on the longest chain)
TINY_MODEL = 2 * 64  # the tiny random models of conftest.py: 2 layers whose longest reduction has 64 terms
TINY_SEQ2SEQ = 4 * 64  # the tiny T5 / bert2bert readers: 2 encoder + 2 decoder layers, longest reduction 64
MINILM = 6 * 1536  # MiniLM-L6 / bert2bert-MiniLM: 6 layers, intermediate size 1536
SMOLLM2 = 30 * 1536  # SmolLM2-135M: 30 layers, intermediate size 1536


def trained(steps: int, depth: int) -> int:
    """The depth of a value after ``steps`` training steps of a model of ``depth``: each step's rounding feeds the
    next one's weights."""
    return steps * depth


def tolerance(dtype: str = "float32", depth: int = 1) -> float:
    """The relative (normwise) tolerance for a result of ``depth`` chained roundings in ``dtype``."""
    if dtype not in EPS:
        raise ValueError(f"unknown dtype {dtype!r}: one of {', '.join(EPS)}")
    if depth < 1:
        raise ValueError("depth counts roundings: at least 1")
    return EPS[dtype] * depth


def _array(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, on any device and in any dtype
        x = x.detach().float().cpu().numpy() if str(x.dtype) in ("torch.bfloat16", "torch.float16") \
            else x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _bound(expected: np.ndarray, dtype: str, depth: int, scale: float = 0.0) -> float:
    largest = float(np.max(np.abs(expected))) if expected.size else 0.0
    return tolerance(dtype, depth) * max(largest, scale, np.finfo(np.float64).tiny)


def assert_close(actual: Any, expected: Any, *, dtype: str = "float32", depth: int = 1, scale: float = 0.0,
                 what: str = "") -> None:
    """``actual`` equals ``expected`` within the policy's tolerance (scalars, sequences, numpy arrays or tensors;
    the shapes must match). ``scale``: the magnitude the values were computed from, where it exceeds the largest
    expected value (a difference of two shares is judged at the shares' scale, 1). ``what`` names the values."""
    a, e = _array(actual), _array(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} against {e.shape}"
    assert not np.isnan(a).any() and not np.isnan(e).any(), f"{what}: NaN"
    bound = _bound(e, dtype, depth, scale)
    worst = float(np.max(np.abs(a - e))) if a.size else 0.0
    assert worst <= bound, (f"{what}: differs by {worst:.3g}, more than the policy's {bound:.3g} "
                            f"({dtype}, depth {depth})")


def close(expected: Any, *, dtype: str = "float32", depth: int = 1, scale: float = 0.0) -> Any:
    """``pytest.approx`` at the policy's tolerance, for ``assert value == close(expected, ...)`` (``expected``: a
    number, a sequence or an array; ``scale`` as in :func:`assert_close`)."""
    bound = _bound(_array(expected), dtype, depth, scale)
    if hasattr(expected, "detach") or isinstance(expected, np.ndarray):
        expected = _array(expected)
    return pytest.approx(expected, rel=0, abs=bound)


def flat(weights: dict[str, Any]) -> np.ndarray:
    """A model's weights (a state dict of tensors) as one vector, by name: trained weights are compared as one
    whole, at the scale of the model's largest weight (an optimizer's step moves a weight whose gradient cancelled
    to within rounding by as much as one whose gradient did not)."""
    return np.concatenate([_array(weights[k]).ravel() for k in sorted(weights)])


def assert_same_ranking(ids: Sequence[Any], scores: Sequence[float], ref_ids: Sequence[Any],
                        ref_scores: Sequence[float], *, dtype: str = "float32", depth: int = 1, scale: float = 0.0,
                        what: str = "") -> None:
    """Two best-first rankings (one row's top k) agree under the policy: their scores position by position, and
    every id that stands elsewhere (or only in one of them) has a score tied within the policy with the score at
    the place the other ranking puts it (or, for an id the other left out, with the other's last, its cut)."""
    assert len(ids) == len(ref_ids), f"{what}: {len(ids)} against {len(ref_ids)} ids"
    assert_close(scores, ref_scores, dtype=dtype, depth=depth, scale=scale, what=f"{what} scores")
    bound = _bound(_array(ref_scores), dtype, depth, scale)
    where = {i: p for p, i in enumerate(ref_ids)}
    for p, (i, s) in enumerate(zip(ids, scores, strict=True)):
        if ref_ids[p] == i:
            continue
        other = ref_scores[where[i]] if i in where else ref_scores[-1]
        assert abs(float(s) - float(other)) <= 2 * bound, (
            f"{what}: id {i!r} at {p} scores {s}, the other ranking's place for it {other}: not a tie")


def assert_same_rankings(rows: Sequence[Sequence[dict]], ref_rows: Sequence[Sequence[dict]], *,
                         dtype: str = "float32", depth: int = 1, id_key: str = "id", score_key: str = "score",
                         what: str = "") -> None:
    """:func:`assert_same_ranking` for every row of two lists of ranked candidates (``[{"id", "score"}, ...]``)."""
    assert len(rows) == len(ref_rows), f"{what}: {len(rows)} rows against {len(ref_rows)}"
    for n, (row, ref) in enumerate(zip(rows, ref_rows, strict=True)):
        assert_same_ranking([c[id_key] for c in row], [c[score_key] for c in row], [c[id_key] for c in ref],
                            [c[score_key] for c in ref], dtype=dtype, depth=depth, what=f"{what} row {n}")
