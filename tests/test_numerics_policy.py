"""The numerics policy (tests/numerics.py) holds over the whole suite: every float comparison goes through its
helper or says why it may be exact or arithmetic, and no tolerance below its floor is written by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests import numerics

TESTS = Path(__file__).resolve().parent
LIBRARY = {"approx", "allclose", "assert_allclose", "assert_close", "isclose", "assert_array_almost_equal",
           "assert_almost_equal", "assert_approx_equal"}
TOLERANCES = {"abs", "rel", "atol", "rtol", "abs_tol", "rel_tol"}
WHY = re.compile(r"#\s*(exact|numerics):\s*\S")  # a comment that says why, e.g. "# exact: the same kernels"


def _library_call(node: ast.Call, helper_names: set[str]) -> str | None:
    """The name of a float comparison from pytest, numpy, torch or math, else None (the policy's helper is not)."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in LIBRARY:
        return None if isinstance(func.value, ast.Name) and func.value.id == "numerics" else func.attr
    if isinstance(func, ast.Name) and func.id in LIBRARY and func.id not in helper_names:
        return func.id
    return None


def _constant(node: ast.expr, names: dict[str, float] | None = None) -> float | None:
    """A number written in the source: a literal, a negated one, or a module-level name bound to one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _constant(node.operand, names)
        return None if value is None else -value
    if isinstance(node, ast.Name) and names:
        return names.get(node.id)
    return None


def _module_constants(tree: ast.Module) -> dict[str, float]:
    """The module's names bound once, at the top level, to a number (``TOL = 1e-12``)."""
    out: dict[str, float] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _constant(node.value)
            if value is not None:
                out[node.targets[0].id] = value
    return out


def _below_floor(value: float | None) -> bool:
    return value is not None and 0 < abs(value) < numerics.FLOOR


def _hand_tolerance(node: ast.Compare, lines: list[str], name: str, file_says: bool,
                    names: dict[str, float]) -> list[str]:
    """A tolerance written by hand in a comparison: any number below the floor in it (``abs(a - b) < 1e-12``,
    ``1e-12 > abs(a - b)``, ``a <= b + TOL``), or ``abs(a - b) < 1e-5`` (either way round) outside the policy."""
    where = f"{name}:{node.lineno} <"
    inside_calls = {id(n) for c in ast.walk(node) if isinstance(c, ast.Call) and _library_call(c, set())
                    for n in ast.walk(c)}  # a comparison call's own tolerance is judged as the call's
    if any(_below_floor(_constant(n, names)) for n in ast.walk(node)
           if isinstance(n, ast.expr) and id(n) not in inside_calls):
        return [f"{where}: a tolerance below the policy's floor ({numerics.FLOOR:.3g}) written by hand"]
    if len(node.ops) != 1 or not isinstance(node.ops[0], ast.Lt | ast.LtE | ast.Gt | ast.GtE):
        return []
    small, measured = (node.comparators[0], node.left) if isinstance(node.ops[0], ast.Lt | ast.LtE) \
        else (node.left, node.comparators[0])
    bound = _constant(small, names)
    if bound is None or not 0 < bound <= 1e-3 or not any(
            isinstance(n, ast.Call) and "abs" in (getattr(n.func, "id", None), getattr(n.func, "attr", None))
            for n in ast.walk(measured)):
        return []
    span = "\n".join(lines[max(0, node.lineno - 2):node.end_lineno])
    return [] if WHY.search(span) or file_says else [f"{where}: a tolerance written by hand; use tests.numerics"]


def violations(source: str, name: str) -> list[str]:
    """What breaks the policy in one test file's source."""
    tree = ast.parse(source)
    lines = source.splitlines()
    helper_names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and n.module == "tests.numerics" for a in n.names}
    names = _module_constants(tree)
    header = "\n".join(line for line in lines[:40] if line.startswith("#"))
    file_says = bool(re.search(r"^#\s*numerics:\s*\S", header, re.M))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += _hand_tolerance(node, lines, name, file_says, names)
        if not isinstance(node, ast.Call) or (call := _library_call(node, helper_names)) is None:
            continue
        where = f"{name}:{node.lineno} {call}"
        span = "\n".join(lines[max(0, node.lineno - 2):node.end_lineno])
        tols = {k.arg: _constant(k.value, names) for k in node.keywords if k.arg in TOLERANCES}
        decimal = next((_constant(k.value, names) for k in node.keywords if k.arg in ("decimal", "significant")), None)
        if decimal is not None:  # numpy's assert_almost_equal: |a - b| < 1.5 * 10**-decimal
            tols["decimal"] = 1.5 * 10 ** -decimal
        if any(_below_floor(v) for v in tols.values()):
            found.append(f"{where}: a tolerance below the policy's floor ({numerics.FLOOR:.3g}) written by hand; "
                         "use tests.numerics (its dtype and depth)")
        elif tols and all(v == 0 for v in tols.values()) and not re.search(r"#\s*exact:\s*\S", span):
            found.append(f"{where}: an exact float comparison without its '# exact:' comment")
        elif not WHY.search(span) and not file_says:
            found.append(f"{where}: use tests.numerics, or say why in a '# numerics:' or '# exact:' comment on "
                         "the call or at the top of the file (arithmetic that rounds alike on every CPU)")
    return found


def test_every_float_comparison_in_the_suite_follows_the_policy():
    found = [v for path in sorted(TESTS.glob("*.py")) if path.name != "numerics.py"
             for v in violations(path.read_text(encoding="utf-8"), path.name)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source,says", [
    ("import pytest\nassert 1.0 == pytest.approx(1.0, abs=1e-9)\n", "below the policy's floor"),
    ("import numpy as np\nnp.testing.assert_allclose(a, b, atol=1e-12)  # numerics: float64\n", "below"),
    ("import torch\ntorch.testing.assert_close(a, b, atol=0, rtol=0)\n", "without its '# exact:' comment"),
    ("import numpy as np\nnp.testing.assert_allclose(a, b, atol=1e-5)\n", "use tests.numerics"),
    ("from pytest import approx\nassert x == approx(1.0)\n", "use tests.numerics"),
    ("import numpy as np\nassert np.abs(a - b).max() < 1e-4\n", "written by hand; use tests.numerics"),
    ("assert max(abs(x - y) for x, y in pairs) < 1e-9  # numerics: float64\n", "below the policy's floor"),
    ("assert 1e-12 > abs(a - b)\n", "below the policy's floor"),
    ("TOL = 1e-12\nassert abs(a - b) < TOL\n", "below the policy's floor"),
    ("assert a <= b + 1e-12\n", "below the policy's floor"),
    ("import numpy as np\nnp.testing.assert_almost_equal(a, b, decimal=12)  # numerics: x\n", "below"),
    ("import pytest\nTOL = 1e-12\nassert x == pytest.approx(1.0, abs=TOL)\n", "below the policy's floor"),
    ("assert 1e-4 > abs(a - b)\n", "written by hand; use tests.numerics"),
])
def test_the_policy_check_finds_what_it_forbids(source, says):
    found = violations(source, "t.py")
    assert len(found) == 1 and says in found[0], found


@pytest.mark.parametrize("source", [
    "from tests.numerics import assert_close\nassert_close(a, b, depth=4)\n",
    "from tests import numerics\nassert x == numerics.close(1.0, dtype='float64', depth=8)\n",
    "import torch\n# exact: one kernel on one input, twice\ntorch.testing.assert_close(a, b, atol=0, rtol=0)\n",
    "import numpy as np\nnp.testing.assert_allclose(a, b, atol=1e-5)  # numerics: a planted margin of 0.1\n",
    "# numerics: the planner's Python float arithmetic\nimport pytest\nassert x == pytest.approx(2.0)\n",
])
def test_the_policy_check_lets_through_what_it_allows(source):
    assert violations(source, "t.py") == []


def test_the_tolerance_follows_dtype_and_depth():
    assert numerics.tolerance("float32", 1) == numerics.FLOOR == 2.0 ** -23
    assert numerics.tolerance("bfloat16", 4) == 4 * 2.0 ** -7 > numerics.tolerance("float32", 10 ** 4)
    numerics.assert_close([1.0, 2.0], [1.0, 2.0 + 2e-7], depth=2)
    with pytest.raises(AssertionError, match="more than the policy's"):
        numerics.assert_close([1.0, 2.0], [1.0, 2.0 + 1e-5], depth=2)
    # normwise: a value near zero is judged against the largest it came with
    numerics.assert_close([1e-9, 1.0], [2e-9, 1.0], depth=1)


def test_rankings_may_differ_only_at_ties():
    same = numerics.assert_same_ranking
    same([1, 2, 3], [0.9, 0.5, 0.5], [1, 3, 2], [0.9, 0.5, 0.5])  # a tie in either order
    same([1, 2, 4], [0.9, 0.5, 0.4], [1, 2, 3], [0.9, 0.5, 0.4])  # a tie at the cut (3 and 4 at 0.4)
    with pytest.raises(AssertionError, match="not a tie"):
        same([2, 1, 3], [0.9, 0.5, 0.1], [1, 2, 3], [0.9, 0.5, 0.1])
    with pytest.raises(AssertionError):
        same([1, 2, 4], [0.9, 0.5, 0.4], [1, 2, 3], [0.9, 0.5, 0.3])
