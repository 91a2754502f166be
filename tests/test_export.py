"""`pgra export`: a trained PGRA run as a folder that loads and predicts the same in a new process after the run,
its index and its LM are deleted and the folder is moved."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.config import from_dict
from pgra.errors import InputError
from pgra.experiment import Experiment, ExperimentConfig
from tests.conftest import one_error_line
from tests.test_experiment import _config

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["The moon is bright tonight.", "The river runs by the old town.", "Stars fill the sky."]
PREDICT = ("import json, sys, pgra\n"
           "pipe = pgra.Pipeline.load(sys.argv[1])\n"
           "print(json.dumps(pipe.predict(json.loads(sys.argv[2]))))\n")


def _digest(out: list[dict]) -> list[tuple]:
    return [(o["prediction"], [str(e["id"]) for e in o["evidence"]]) for o in out]


def test_exported_run_loads_and_predicts_the_same_elsewhere(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5,
                                                             capsys):
    from pgra.pipeline import Pipeline

    lm = shutil.copytree(tiny_opt, tmp_path / "lm")  # deleted below, like the run and its index
    grid = _config(tmp_path, corpus_txt, sky_task, lm, tiny_t5, methods=["pgra"], seeds=[1], report=False)
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    run = Path(grid["out"]) / "sky" / "pgra" / "seed-1"
    want = Pipeline.load(run).predict(TEXTS)

    assert main(["export", "--run", str(run), "--out", str(tmp_path / "export"), "--copy-index", "--copy-lm"]) == 0
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "pointer")]) == 0  # no copies
    for gone in (grid["out"], grid["index"]["out"], lm, tmp_path / "cache"):
        shutil.rmtree(gone)
    moved = Path(shutil.move(str(tmp_path / "export"), str(tmp_path / "elsewhere" / "sky-pgra")))

    card = (moved / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: pgra\nlicense: apache-2.0\n") and "| sky | sky |" in card
    assert "| 1 | test |" in card and "Guo, Zhicheng" in card and "copied into lm/" in card
    assert (moved / "best" / "model.safetensors").is_file() and (moved / "index").is_dir()
    spec = json.loads((moved / "export.json").read_text())
    assert spec["index"]["copied"] and spec["reranked"]["copied_lm"] and spec["k"] == 8

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PREDICT, str(moved), json.dumps(TEXTS)], capture_output=True,
                          text=True, cwd=tmp_path / "elsewhere", env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert _digest(got) == _digest(want)
    for g, w in zip(got, want, strict=True):
        assert all(abs(g["scores"][lab] - p) < 1e-5 for lab, p in w["scores"].items())

    # the export without copies names what is missing and where to point it
    with pytest.raises(InputError, match="index=PATH"):
        Pipeline.load(tmp_path / "pointer")
    assert "field 'run'" in one_error_line(["export", "--run", str(run), "--out", str(tmp_path / "again")], capsys)
