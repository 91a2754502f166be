"""Shared Hypothesis settings and strategies of the property-based (fuzz) tests: tests/test_fuzz_*.py.

Every property there says the same thing of one input reader: any input gives a result or an InputError (one
``error:`` line through the CLI), never another exception, and writes nothing outside the stage's output.
The settings are derandomized (the same examples on every run, so CI is reproducible) and bounded so that all
the fuzz tests together take seconds.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import string
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# derandomize: a fixed sequence of examples (no database, no random seed); deadline=None: a loaded CI machine
# is slow now and then, which is not a failure
FUZZ = settings(max_examples=int(os.environ.get("PGRA_FUZZ_EXAMPLES", "40")), deadline=None, derandomize=True,
                database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# strings a loader treats specially somewhere: YAML/JSON look-alikes, booleans, null words, paths that escape a
# folder, separators, a byte order mark, placeholders of a template
TRICKY = ["", " ", "none", "null", "~", "yes", "no", "on", "off", "true", "1", "0", "-1", "1e5", "1.5", ".inf",
          "nan", "[]", "{}", "a,b", ",", "=", "a=b", ".", "..", "../x", "/", "/etc/passwd", "a/b", "\\", "\x00",
          "\ufeff", "{text}", "{mask}", "{evidence}", "{0}", "{", "}", "x" * 300, "é", "\n", "\t", "#", "&a", "*a",
          "!!python/object:os.system", "base", "label", "text", "id"]

names = st.one_of(st.sampled_from(TRICKY), st.text(alphabet=string.ascii_letters + string.digits + "._-/",
                                                    max_size=12))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
                    st.floats(allow_nan=True, allow_infinity=True), names, st.text(max_size=20))


def values(keys: st.SearchStrategy[Any] = names) -> st.SearchStrategy[Any]:
    """Nested lists and mappings of scalars, mapping keys drawn from ``keys`` (or any scalar)."""
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(keys, scalars), inner, max_size=4)), max_leaves=12)


def snapshot(folder: Path) -> dict[str, int]:
    """Every path under ``folder`` with its size (what a run wrote there shows up as a difference)."""
    return {str(p.relative_to(folder)): (p.stat().st_size if p.is_file() else -1) for p in folder.rglob("*")}


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``pgra ARGV`` in this process: (exit code, stdout, stderr). Any exception other than the CLI's own
    handling escapes (the property fails with it)."""
    from pgra.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's usage error (an override that looks like a flag): exit 2, one line
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_clean_exit(code: int, err: str) -> None:
    """Exit 0, or exit 2 with exactly one ``error:`` line and no traceback."""
    assert "Traceback" not in err, err
    if code != 0:
        assert code == 2, (code, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert len([line for line in lines if re.match(r"(pgra [a-z-]+: )?error: ", line)]) == 1, err
