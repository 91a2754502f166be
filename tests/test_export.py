"""`pgra export`: a trained PGRA run as a folder that loads and predicts the same in a new process after the run,
its index and its LM are deleted and the folder is moved."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

import pgra
from pgra.cli import main
from pgra.core.config import from_dict
from pgra.core.errors import InputError
from pgra.experiment import Experiment, ExperimentConfig
from tests import numerics
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
    from pgra.serving.pipeline import Pipeline

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
        assert g["scores"] == {lab: numerics.close(p, depth=numerics.TINY_SEQ2SEQ, scale=1) for lab, p in w["scores"].items()}

    # the export without copies names what is missing and where to point it
    with pytest.raises(InputError, match="index=PATH"):
        Pipeline.load(tmp_path / "pointer")
    assert "field 'run'" in one_error_line(["export", "--run", str(run), "--out", str(tmp_path / "again")], capsys)


# ------------------------------------------------------------------ issue 53: exports of a run made by hand (no training)

RESULTS = {"test": {"accuracy": 0.5, "examples": 6}}


def fake_run(root: Path, name: str = "seed-1", n_passages: int = 0) -> Path:
    """A finished reader run as `pgra train` leaves it, without training: its manifest, best/ (a tiny safetensors
    file and fid_config.json) and metrics.json, under ``root/name``."""
    import numpy as np
    from safetensors.numpy import save_file

    run = root / name
    (run / "best").mkdir(parents=True)
    save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(run / "best" / "model.safetensors"))
    (run / "best" / "fid_config.json").write_text(json.dumps({"n_passages": n_passages, "max_length": 32}))
    (run / "metrics.json").write_text(json.dumps({"task": "sky", "metric": "accuracy", "results": RESULTS}))
    task = {"name": "sky", "labels": ["sky", "town"], "metric": "accuracy", "reader_words": {"sky": "sun"}}
    (run / "manifest.json").write_text(json.dumps({"kind": "reader", "task": task, "model": "tiny",
                                                   "config": {"seed": 1}, "results": RESULTS}))
    return run


def sibling_cell(run: Path, seed: int = 2, value: object = 0.75) -> Path:
    """``cell.json`` of another seed of the run's experiment cell, its test accuracy ``value``."""
    cell = run.parent / f"seed-{seed}" / "cell.json"
    cell.parent.mkdir(parents=True)
    cell.write_text(json.dumps({"task": "sky", "method": "fid", "seed": seed, "metric": "accuracy",
                                "results": {"test": {"accuracy": value, "examples": 6}}}))
    return cell


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith(".pgra-")}


def test_export_of_a_made_run_writes_the_folder(tmp_path, capsys):
    run = fake_run(tmp_path / "exp" / "sky" / "fid")
    sibling_cell(run)
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    wheel = f"wheel/pgra-{pgra.__version__}-py3-none-any.whl"
    assert set(_files(out)) == {"best/model.safetensors", "best/fid_config.json", "metrics.json", "README.md",
                                "manifest.json", "export.json", wheel}
    assert "| 2 | test | 75.0 | 6 |" in (out / "README.md").read_text()
    card = (out / "README.md").read_text()
    assert f"pip install transformers=={version('transformers')} " in card and f'pip install "./{wheel}[cpu]"' in card
    with zipfile.ZipFile(out / wheel) as built:  # the pgra that made it: this checkout's code, byte for byte
        assert built.read("pgra/serving/export.py") == (ROOT / "pgra" / "serving" / "export.py").read_bytes()
        assert "pgra = pgra.cli:main" in built.read(f"pgra-{pgra.__version__}.dist-info/entry_points.txt").decode()
    assert [p.name for p in out.iterdir() if p.name.startswith(".export.")] == []  # no staging folder left


@pytest.mark.parametrize("target", ["token", "folder"])
def test_a_link_out_of_best_is_refused_never_copied(tmp_path, capsys, target):
    """Finding 1: a link in best/ to a file (the Hub token) or folder outside the run is named, nothing written."""
    secret = tmp_path / "home" / "token"
    secret.parent.mkdir()
    secret.write_text("hf_secret")
    run = fake_run(tmp_path / "exp")
    (run / "best" / "tokenizer.json").symlink_to(secret if target == "token" else secret.parent)
    line = one_error_line(["export", "--run", str(run), "--out", str(tmp_path / "out")], capsys)
    assert "best/tokenizer.json is a symbolic link to" in line and "field 'run'" in line, line
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError, match="symbolic link"):
        pgra.export_run(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_link_inside_the_run_is_copied_as_its_file(tmp_path):
    run = fake_run(tmp_path / "exp")
    (run / "notes.txt").write_text("kept")
    (run / "best" / "notes.txt").symlink_to(run / "notes.txt")  # inside the run: its content is exported
    out = pgra.export_run(run, tmp_path / "out")
    assert not (out / "best" / "notes.txt").is_symlink() and (out / "best" / "notes.txt").read_text() == "kept"


def test_a_link_out_of_the_copied_index_is_refused(tmp_path, capsys, candidates):
    """Finding 1 with --copy-index: a planted link in the index folder is named; without the copy it is unread."""
    run = fake_run(tmp_path / "exp", n_passages=2)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "data": str(candidates)}))
    secret = tmp_path / "token"
    secret.write_text("hf_secret")
    (tmp_path / "bm25" / "token").symlink_to(secret)
    line = one_error_line(["export", "--run", str(run), "--out", str(tmp_path / "out"), "--copy-index"], capsys)
    assert "bm25/token is a symbolic link to" in line and "field 'copy_index'" in line, line
    assert not (tmp_path / "out").exists()
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "out")]) == 0  # a pointer: nothing copied
    assert not (tmp_path / "out" / "index").exists()


def _read_reranked_by(run: Path, lm: Path, reranked: Path, candidates: Path) -> None:
    """Make ``run`` a reader run over a reranked folder whose reranking LM is ``lm``."""
    from pgra.storage.artifacts import write_manifest

    reranked.mkdir()
    (reranked / "demonstrations.json").write_text("[]")
    write_manifest(reranked, {"kind": "reranked", "lm": str(lm), "lm_fingerprint": "x", "top_d": 2, "k": 4,
                              "candidates": {"path": str(candidates)}})
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "data": str(reranked)}))


def test_a_link_out_of_the_copied_lm_is_refused(tmp_path, capsys, candidates):
    run = fake_run(tmp_path / "exp", n_passages=2)
    lm = tmp_path / "lm"
    lm.mkdir()
    (lm / "config.json").write_text("{}")
    (lm / "token").symlink_to(tmp_path / "nowhere")  # dangling: refused as well
    _read_reranked_by(run, lm, tmp_path / "reranked", candidates)
    line = one_error_line(["export", "--run", str(run), "--out", str(tmp_path / "out"), "--copy-lm"], capsys)
    assert "lm/token is a symbolic link to" in line and "field 'copy_lm'" in line, line
    (lm / "token").unlink()
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "out"), "--copy-lm"]) == 0
    assert (tmp_path / "out" / "lm" / "config.json").is_file() and (tmp_path / "out" / "reranked").is_dir()


def test_a_hub_cache_snapshot_is_copied_with_its_blobs(tmp_path, candidates):
    """--copy-lm of an LM in the Hugging Face cache: its snapshot's files are links to ``../../blobs/``, inside the
    model's cache folder, so they are copied as files; a link out of that folder is still refused."""
    run = fake_run(tmp_path / "exp", n_passages=2)
    model = tmp_path / "hub" / "models--org--lm"
    (model / "blobs").mkdir(parents=True)
    (model / "blobs" / "abc").write_text("{}")
    lm = model / "snapshots" / "rev1"
    lm.mkdir(parents=True)
    (lm / "config.json").symlink_to("../../blobs/abc")
    _read_reranked_by(run, lm, tmp_path / "reranked", candidates)
    out = pgra.export_run(run, tmp_path / "out", copy_lm=True)
    copied = out / "lm" / "config.json"
    assert copied.is_file() and not copied.is_symlink() and copied.read_text() == "{}"
    (tmp_path / "secret").write_text("token")
    (lm / "token").symlink_to(tmp_path / "secret")
    with pytest.raises(InputError, match="token is a symbolic link"):
        pgra.export_run(run, tmp_path / "out2", copy_lm=True)


def test_an_export_reruns_into_its_own_folder_and_refuses_any_other(tmp_path, capsys):
    """Finding 2: the same export again replaces its folder (a copy no longer asked for goes); a run's folder,
    an experiment's or a user's is still refused."""
    run = fake_run(tmp_path / "exp")
    out = pgra.export_run(run, tmp_path / "out")
    (out / "index").mkdir()  # as a --copy-index export left it
    (out / "index" / "x").write_text("old")
    first = _files(out)
    del first["index/x"]
    (run / "metrics.json").write_text(json.dumps({"metric": "accuracy", "results": {"test": {"accuracy": 0.9}}}))
    assert main(["export", "--run", str(run), "--out", str(out)]) == 0
    again = _files(out)
    assert set(again) == set(first) and again["metrics.json"] != first["metrics.json"]
    assert "90.0" in again["README.md"].decode()

    other = fake_run(tmp_path / "other")  # a run: its record says 'reader' (or its manifest does)
    from pgra.storage.ownership import claim_folder

    claim_folder(other, "reader")
    before = _files(other)
    assert "not an export" in one_error_line(["export", "--run", str(run), "--out", str(other)], capsys)
    (other / ".pgra-owned.json").unlink()
    assert "holds a 'reader' artifact" in one_error_line(["export", "--run", str(run), "--out", str(other)], capsys)
    assert _files(other) == before


def test_an_export_into_the_experiment_is_refused_from_python_too(tmp_path):
    """Finding 5: export_run refuses an out that holds the run (the experiment folder, which pgra owns)."""
    from pgra.storage.ownership import claim_folder

    exp = tmp_path / "exp"
    claim_folder(exp, "experiment")  # as `pgra experiment` claims its folder before it runs
    run = fake_run(exp / "sky" / "fid")
    before = _files(exp)
    with pytest.raises(InputError, match="holds the input"):
        pgra.export_run(run, exp)
    with pytest.raises(InputError, match="is the input"):
        pgra.export_run(run, run)
    assert _files(exp) == before and not (exp / "export.json").exists()


@pytest.mark.parametrize(("damage", "says"), [
    ("sibling-string", "seed-2/cell.json (field 'results.test.accuracy'): must be a number, got 'high'"),
    ("sibling-nan", "(field 'results.test.accuracy'): must be a number, got nan"),
    ("sibling-seed", "seed-2/cell.json (field 'seed')"),
    ("metrics-string", "metrics.json (field 'results.test.accuracy'): must be a number"),
    ("fid-missing", "fid_config.json (field 'n_passages'): missing"),
    ("fid-string", "fid_config.json (field 'n_passages'): must be a whole number"),
    ("task", "manifest.json (field 'task')"),
    ("truncated", "model.safetensors: 100 bytes, its header says"),
])
def test_a_damaged_run_is_one_error_line_and_no_folder(tmp_path, capsys, damage, says):
    """Findings 3 and 4: a hand-edited sibling cell, metrics or fid_config, or a truncated weights file: one
    line naming the file and field, and no folder (before: a traceback and a partial folder, or exit 0)."""
    run = fake_run(tmp_path / "exp")
    fid = run / "best" / "fid_config.json"
    if damage.startswith("sibling"):
        cell = sibling_cell(run, value={"sibling-string": "high", "sibling-nan": float("nan")}.get(damage, 0.5))
        if damage == "sibling-seed":
            cell.write_text(cell.read_text().replace('"seed": 2', '"seed": "two"'))
    elif damage == "metrics-string":
        (run / "metrics.json").write_text(json.dumps({"metric": "accuracy", "results": {"test": {"accuracy": "x"}}}))
    elif damage.startswith("fid"):
        fid.write_text(json.dumps({"max_length": 32} if damage == "fid-missing" else {"n_passages": "2"}))
    elif damage == "task":
        manifest = json.loads((run / "manifest.json").read_text())
        (run / "manifest.json").write_text(json.dumps({**manifest, "task": "sky"}))
    else:
        weights = run / "best" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    line = one_error_line(["export", "--run", str(run), "--out", str(tmp_path / "out")], capsys)
    assert says in line, line
    assert not (tmp_path / "out").exists()


def test_a_failed_write_leaves_no_partial_folder_and_keeps_the_old_export(tmp_path, capsys, monkeypatch):
    import errno

    import pgra.serving.export as export

    run = fake_run(tmp_path / "exp")
    real = export.write_text

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(export, "write_text", full)
    assert "No space left" in one_error_line(["export", "--run", str(run), "--out", str(tmp_path / "new")], capsys)
    assert not (tmp_path / "new").exists()  # before: best/ and metrics.json were left in it
    monkeypatch.setattr(export, "write_text", real)
    out = pgra.export_run(run, tmp_path / "out")
    kept = _files(out)
    monkeypatch.setattr(export, "write_text", full)
    assert "No space left" in one_error_line(["export", "--run", str(run), "--out", str(out)], capsys)
    assert _files(out) == kept and not [p for p in out.iterdir() if p.name.startswith(".export.")]


def _exported(tmp_path: Path) -> Path:
    return pgra.export_run(fake_run(tmp_path / "exp"), tmp_path / "out")


@pytest.mark.parametrize(("edit", "says"), [
    (lambda s: [s], "holds a JSON list, not an object"),
    (lambda s: {**s, "kind": "reader"}, "(field 'kind'): not a pgra export"),
    (lambda s: {k: v for k, v in s.items() if k != "index"}, "(field 'index'): missing"),
    (lambda s: {**s, "index": "idx"}, "(field 'index'): must be null or an object"),
    (lambda s: {**s, "n_passages": True}, "(field 'n_passages'): must be a whole number"),
    (lambda s: {**s, "index": {"copied": "yes"}}, "(field 'index.copied'): must be true or false"),
    (lambda s: {**s, "index": {"copied": False, "path": "/x", "corpus_content_sha256": "a"}},
     "(field 'k'): missing"),
    (lambda s: {**s, "index": {"copied": False, "path": "/x", "corpus_content_sha256": "a"}, "k": 3,
                "exclude_query_text": False, "excluded": [1]}, "(field 'excluded'): must be a list"),
    (lambda s: {**s, "index": {"copied": False, "path": "", "corpus_content_sha256": "a"}},
     "(field 'index.path'): must be a path"),
    (lambda s: {**s, "index": {"copied": False, "path": "/x", "corpus_content_sha256": "a"}, "k": 3,
                "exclude_query_text": False, "excluded": [], "reranked": {"lm": "m", "copied_lm": True,
                                                                          "top_d": "2", "k": 4}},
     "(field 'reranked.top_d'): must be a whole number from 1"),
    (lambda s: {**s, "reranked": {"lm": "m"}}, "(field 'reranked'): a reranking needs an index"),
])
def test_a_hand_edited_export_json_is_one_error_line(tmp_path, capsys, edit, says):
    """Finding 6: `pgra predict` (and Pipeline.load) refuse a hand-edited export.json naming the file and field,
    before any model loads (before: a KeyError or AttributeError traceback)."""
    from pgra.serving.pipeline import Pipeline

    out = _exported(tmp_path)
    spec = json.loads((out / "export.json").read_text())
    (out / "export.json").write_text(json.dumps(edit(spec)))
    line = one_error_line(["predict", "--run", str(out), "--text", "The moon."], capsys)
    assert "export.json" in line and says in line, line
    with pytest.raises(InputError, match="export.json"):
        Pipeline.load(out)


def test_a_copied_index_that_links_out_of_the_export_is_refused(tmp_path):
    from pgra.serving.export import read_export

    out = _exported(tmp_path)
    spec = json.loads((out / "export.json").read_text())
    (out / "export.json").write_text(json.dumps({**spec, "index": {"copied": True, "path": "/x",
                                                                  "corpus_content_sha256": "a"}}))
    (out / "index").symlink_to(tmp_path / "exp")
    with pytest.raises(InputError, match="would lie outside"):
        read_export(out)

