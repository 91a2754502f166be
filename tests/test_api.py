"""The public Python API: every exported name resolves, and importing pgra (or its CLI) stays light."""

from __future__ import annotations

import subprocess
import sys

import pgra


def test_every_exported_name_resolves_and_has_a_docstring():
    for name in pgra.__all__:
        obj = getattr(pgra, name)
        if callable(obj) and name not in ("InputError", "PgraError"):
            assert obj.__doc__, f"pgra.{name} has no docstring"
    assert set(pgra.__all__) <= set(dir(pgra))
    for name in ("Index", "DenseEncoder", "LMEmbedder", "Reader"):  # the three-line examples
        assert "pgra." in getattr(pgra, name).__doc__


def test_import_pgra_and_its_cli_do_not_import_torch():
    code = "import sys, pgra, pgra.cli; pgra.cli.build_parser('train'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
