"""Refactoring guard: two small grids (BM25 and dense first stage, every method, PGRA with per-query KATE
demonstrations, then `pgra analyze`) must leave the same stage keys, cell keys, cache keys and artifact contents
as the code recorded in ``fixtures/golden_grid.json``.

Contents are compared after normalisation that keeps every id, label, order and key, takes the floats out (other
CPUs round their last bits differently: their count and three sums, of magnitudes, signed and weighted by
position, are compared by the numerics policy of
``tests/numerics.py``) and drops what a machine or a clock decides:
wall-clock times, library versions, the git commit, and the checksums of output files that hold floats (a record
made on an AVX2-only CPU failed on an AVX-512 one for those alone). Keys hash absolute paths, so the grids run in a fixed folder
(``$TMPDIR/pgra-golden``, emptied first) with copies of the tiny models committed in ``fixtures/golden_models``
(made by the session fixtures of ``conftest.py``). A mismatch names the file.

Regenerate the record (only when a change of results is intended, and say so in the commit):
``PGRA_UPDATE_GOLDEN=1 pytest tests/test_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from pgra.analysis.config import analyze_config
from pgra.core.config import from_dict
from pgra.experiment import Experiment
from tests import numerics

GOLDEN = Path(__file__).parent / "fixtures" / "golden_grid.json"
# the tiny OPT, T5 and BERT the grids run, committed: every key hashes a model's files, and models saved anew by
# each test run would change with the installed transformers (its version stamp, new config fields)
MODELS = Path(__file__).parent / "fixtures" / "golden_models"
VOLATILE = {"elapsed_s", "versions", "git_commit", "cost", "wall_s", "seconds", "created", "created_at", "time",
            "host", "hardware", "pid", "started", "timestamp", "elapsed", "lm_fingerprint_time",
            "transformers_version", "ran_by", "environment"}  # a report's environment: where the cells ran
SKIP_FILES = {"cost.json", "train_log.jsonl", "results.html", "results_data.js", ".pgra-lock", "run.log",
              ".pgra-owned.json"}  # ownership records: checksums of reports that hold their folder's path
SKIP_SUFFIXES = {".png", ".safetensors", ".bin", ".pt", ".npy", ".faiss", ".index", ".lock"}


# checksums of output files that hold floats: their last bits differ between CPUs (AVX-512 against AVX2), so the
# hash does; the files themselves are compared above, their floats by the policy. (Input checksums, such as a corpus's
# content_sha256 or an annotation file's, stay compared.)
# (The fingerprint a run records of the data folder it read hashes that folder's file checksums: the same.)
OUTPUT_HASHES = {"sha256", "predictions_sha256", "data_sha256", "inputs_sha256", "train_sha256", "fingerprint",
                 "data_fingerprint"}


def _normal(value, root: str, floats: list[float]):
    """``value`` with its floats taken out into ``floats`` (the numerics policy compares them), hashes of output
    files and volatile fields replaced, and the run's folder named ``<root>``."""
    if isinstance(value, dict):
        if set(value) == {"size", "sha256"}:  # a file record of a manifest: its size moves with a float's digits
            return "<file>"
        return {k: "<hash>" if k in OUTPUT_HASHES else _normal(v, root, floats) for k, v in value.items()
                if k not in VOLATILE}
    if isinstance(value, list):
        return [_normal(v, root, floats) for v in value]
    if isinstance(value, float):
        floats.append(value)
        return "<float>"
    if isinstance(value, str):
        return value.replace(root, "<root>")
    return value


def _digest(path: Path, root: str) -> dict:
    """A file's normalised digest (every id, label, order and key) and its floats' count and sum of magnitudes."""
    text, floats = path.read_text(), []
    if path.suffix == ".json":
        text = json.dumps(_normal(json.loads(text), root, floats), sort_keys=True)
    elif path.suffix == ".jsonl":
        text = "\n".join(json.dumps(_normal(json.loads(x), root, floats), sort_keys=True) for x in text.splitlines())
    else:
        text = text.replace(root, "<root>")
    text = re.sub(r"pgra commit\(s\): [^.]*\.", "pgra commit(s): <commit>.", text)  # results.md
    if path.name == "results.md":  # where the cells ran (hardware, library versions): the machine's, not a result
        text = re.sub(r"## Environment\n.*?(?=\n## |\n\d+ runs; |\Z)", "", text, flags=re.S)
    if path.name == "analysis.md":  # the cost table is wall-clock seconds (its tokens are checked by test_cost)
        text = re.sub(r"## Cost\n.*?(?=\n## |\Z)", "", text, flags=re.S)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    # three sums: of magnitudes, signed (a sign flipped) and weighted by position (two values swapped)
    sums = (sum(abs(x) for x in floats), sum(floats), sum((i + 1) * x for i, x in enumerate(floats)))
    return {"digest": digest, "floats": len(floats), "sums": [float(f"{v:.12g}") for v in sums]}


def fingerprint(root: Path) -> dict:
    """Every text artifact under ``root`` (normalised digest) and every cache folder's name (its key)."""
    out: dict = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            if path.parent.name in ("embeddings", "sel", "cache"):
                out[rel + "/"] = "dir"
            continue
        if path.name in SKIP_FILES or path.suffix in SKIP_SUFFIXES or "/checkpoints/" in f"/{rel}":
            continue
        if "/best/" in f"/{rel}":  # the reader's saved weights and configs: the library's format, not a result
            continue
        try:
            out[rel] = _digest(path, str(root))
        except UnicodeDecodeError:
            continue
    return out


def _grid(root: Path, corpus_txt, sky_task, tiny_opt, tiny_t5, tiny_bert, retriever: str) -> dict:
    skills = root / "skills.jsonl"
    skills.write_text('{"input": "The sun is bright.", "skill": "Describing light in the sky."}\n'
                      '{"input": "The town has a market.", "skill": "Describing a place where people live."}\n')
    demos = {"encoder": str(tiny_bert), "pooler": "mean", "cache_dir": str(root / "sel"),
             "annotations": str(skills), "max_new_tokens": 6}
    index = {"corpus": str(corpus_txt), "out": str(root / "index"), "retriever": retriever}
    if retriever == "dense":
        index["dense"] = {"encoder": str(tiny_bert), "pooler": "mean", "shard_size": 7}
    return {
        "out": str(root / "exp"), "tasks": [str(sky_task)], "seeds": [1], "reference": "fid",
        "methods": ["no_retrieval", "fid", "pgra", "knn_vote", "linear_probe", "icl_random", "icl_kate",
                    "icl_skill_knn"],
        "index": index, "retrieve": {"k": 8},
        "rerank": {"lm": str(tiny_opt), "top_d": 3, "num_demos": 2, "cache_dir": str(root / "cache"),
                   "max_tokens_per_batch": 700, "demo_selection": "kate" if retriever == "dense" else "paper",
                   "demos": demos},
        "reader": {"model": str(tiny_t5), "n_passages": 3, "max_length": 48, "batch_size": 4, "max_steps": 4,
                   "eval_every": 2, "eval_batch_size": 8, "learning_rate": 1e-3},
        "knn_vote": {"k": 3}, "linear_probe": {"encoder": str(tiny_bert)},
        "icl": {"lm": str(tiny_opt), "num_demos": 2, "demos": demos, "splits": ["test"],
                "max_tokens_per_batch": 700},
        "analysis": {"analyses": ["consistency", "differences", "case_study", "calibration", "leakage", "attribution", "cost"],
                     "attribution": {"n": 3}},
        "show_progress": False, "report": True,
    }


def _run() -> dict:
    import shutil
    import tempfile

    import yaml

    from pgra.cli import main
    from tests.conftest import write_corpus, write_sky_task

    home = Path(tempfile.gettempdir()) / "pgra-golden"  # keys hash paths: the same ones every time
    shutil.rmtree(home, ignore_errors=True)  # (the test holds the lock on pgra-golden.lock meanwhile)
    models = {name: shutil.copytree(MODELS / name, home / "models" / name) for name in ("opt", "t5", "bert")}
    corpus_txt, sky_task = write_corpus(home), write_sky_task(home)
    record: dict = {}
    for retriever in ("bm25", "dense"):
        root = home / retriever
        root.mkdir()
        grid = _grid(root, corpus_txt, sky_task, models["opt"], models["t5"], models["bert"], retriever)
        assert Experiment(from_dict(analyze_config(), grid)).run() == []  # as `pgra experiment` reads it
        path = root / "exp.yaml"
        path.write_text(yaml.safe_dump(grid))
        assert main(["analyze", "--config", str(path)]) == 0
        record.update({f"{retriever}/{k}": v for k, v in fingerprint(root).items()
                       if not k.startswith(("exp.yaml", "skills.jsonl"))})
    return record


def test_the_grids_leave_the_recorded_keys_and_artifacts():
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "pgra-golden.lock", "w") as lock:  # one run at a time uses the folder
        fcntl.flock(lock, fcntl.LOCK_EX)
        got = _run()
    if os.environ.get("PGRA_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want), {"new": sorted(set(got) - set(want)), "gone": sorted(set(want) - set(got))}
    changed = sorted(k for k in want if not _same(got[k], want[k]))
    assert not changed, f"artifacts whose content changed: {changed}"


# the floats of the grids' files: scores and probabilities of tiny models trained for at most 16 steps
GOLDEN_DEPTH = numerics.trained(16, numerics.TINY_SEQ2SEQ)


def _same(got, want) -> bool:
    """A file's ids, labels, order and keys equal (the digest), and its floats as many, their sums (of magnitudes,
    signed, weighted by position) within the numerics policy (tests/numerics.py), each at the scale of the
    magnitudes it adds: other CPUs round the last bits of a float differently."""
    if not isinstance(want, dict):  # a cache folder's name
        return got == want
    if (got["digest"], got["floats"]) != (want["digest"], want["floats"]):
        return False
    magnitude = want["sums"][0]
    scales = (magnitude, magnitude, magnitude * want["floats"])
    return all(g == numerics.close(w, depth=GOLDEN_DEPTH, scale=scale)
               for g, w, scale in zip(got["sums"], want["sums"], scales, strict=True))
