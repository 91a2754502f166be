"""The public Python API: every exported name resolves, and importing pgra (or its CLI) stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pgra
from pgra.core.errors import InputError


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


class _Predictor:
    task, n_passages = None, 0

    def predict(self, records):
        return [{"prediction": r["text"][:1], "scores": {}} for r in records]

    def evidence_of(self, rec, line):
        return []


def test_predict_takes_one_str_as_one_text_and_refuses_a_bad_batch_size():
    """Finding 7: a str is one text (one prediction, not one per character); batch_size 0, -1 or a bool and a
    text that is not a str are InputErrors naming the field (before: [] or a prediction per character)."""
    from pgra.serving.pipeline import Pipeline

    pipe = Pipeline(_Predictor())
    one = pipe.predict("Stars fill the sky.")
    assert isinstance(one, dict) and one["text"] == "Stars fill the sky."
    assert [o["text"] for o in pipe.predict(("a b", "c"), batch_size=1)] == ["a b", "c"]
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(InputError, match="field 'batch_size'"):
            pipe.predict(["a"], batch_size=bad)
    for texts in (None, 5, ["a", 3], [b"a"]):
        with pytest.raises(InputError, match="field 'text'"):
            pipe.predict(texts)
    with pytest.raises(InputError, match="input 1 is empty"):
        pipe.predict(" ")
