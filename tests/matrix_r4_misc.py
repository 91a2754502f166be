"""Bad-input matrix cases of reliability round 4 (issue 53), misc surfaces: (name, argv builder, expected text of the
one `error:` line), appended to tests/test_bad_input_matrix.py's CASES. Builders write under ``w["tmp"]`` only."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = []


def _write(w: dict, name: str, text: str) -> Path:
    path = w["tmp"] / name
    path.write_text(text, encoding="utf-8")
    return path


def _index_naming(w: dict, name: str) -> Path:
    """A copy of the world's index whose manifest lists the file ``name`` (with the size of a real file)."""
    d = w["tmp"] / "forged-index"
    shutil.copytree(w["index"], d)
    secret = _write(w, "secret.txt", "not the index's\n")
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"][name] = {"size": secret.stat().st_size}
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def _no_fp16_device(w: dict) -> None:
    """This machine as one without a GPU (the case holds on any machine)."""
    w["mp"].setattr("pgra.runtime.training.fp16_device_present", lambda: False)


def _train_fp16(w: dict) -> list[str]:
    _no_fp16_device(w)
    return ["train", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"), "--max-steps", "1",
            "mixed_precision=fp16"]


def _experiment(w: dict, *extra: str) -> list[str]:
    return ["experiment", "--out", str(w["tmp"] / "o"), f"tasks=[{w['task']}]", "seeds=[1]",
            "index.retriever=bm25", f"index.corpus={w['corpus']}", f"index.out={w['tmp'] / 'idx'}", *extra]


def _reader(w: dict) -> Path:
    """A local folder whose config transformers reads (a T5's): the grid's model check passes it, offline too."""
    d = w["tmp"] / "reader"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text('{"model_type": "t5"}\n')
    return d


def _experiment_fp16(w: dict) -> list[str]:
    _no_fp16_device(w)
    return _experiment(w, "methods=[no_retrieval]", f"reader.model={_reader(w)}", "reader.mixed_precision=fp16")


CASES += [
    # 1. ivfpq (and opq, and the bounded build) on a corpus smaller than its codebooks: before the encoder loads
    ("build-index ivfpq on 24 sentences", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out",
                                                     str(w["tmp"] / "o"), "--index-type", "ivfpq"],
     "field 'dense.faiss.pq_nbits': ivfpq needs at least 256 corpus sentences"),
    ("build-index ivfpq opq on 24 sentences", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out",
                                                         str(w["tmp"] / "o"), "--index-type", "ivfpq",
                                                         "dense.faiss.pq_nbits=4", "dense.faiss.opq=true",
                                                         "dense.bounded_memory=true"],
     "field 'dense.faiss.opq'"),
    ("build-index ivfpq train_size=100", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out",
                                                    str(w["tmp"] / "o"), "--index-type", "ivfpq",
                                                    "dense.faiss.train_size=100"],
     "field 'dense.faiss.train_size': ivfpq needs at least 256 training vectors"),
    # 2. an index manifest listing a file outside its folder
    ("search: index manifest lists ../secret.txt", lambda w: ["search", "--index", str(_index_naming(w, "../secret.txt")),
                                                              "--query", "sun"],
     "(field 'files'): lists the file '../secret.txt', which is not inside its folder"),
    ("retrieve: index manifest lists an absolute path",
     lambda w: ["retrieve", "--task", str(w["task"]), "--index", str(_index_naming(w, str(w["tmp"] / "secret.txt"))),
                "--out", str(w["tmp"] / "o")],
     "which is not inside its folder"),
    # 3. a key set twice in a YAML pgra reads from a user: a config, a task YAML, a targets file
    ("config: duplicate key", lambda w: ["build-index", "--config", str(_write(
        w, "c.yaml", f"corpus: {w['corpus']}\nretriever: bm25\ncorpus: other.txt\n")), "--out", str(w["tmp"] / "o")],
     "c.yaml:3 (field 'corpus'): duplicate key 'corpus' (first set on line 1)"),
    ("task yaml: duplicate key", lambda w: ["retrieve", "--task", str(_write(
        w, "dup-task.yaml", w["task"].read_text() + "labels: [a, b]\n")), "--index", str(w["index"]), "--out",
        str(w["tmp"] / "o")],
     "(field 'labels'): duplicate key 'labels'"),
    ("report --compare: duplicate key", lambda w: ["report", str(w["tmp"]), "--compare", str(_write(
        w, "targets.yaml", "methods:\n  fid: {sst2: 70}\n  fid: {sst2: 71}\n"))],
     "targets.yaml:3 (field 'fid'): duplicate key 'fid'"),
    ("report --compare: a recursive alias", lambda w: ["report", str(w["tmp"]), "--compare", str(_write(
        w, "targets.yaml", "methods: &a {fid: *a}\n"))],
     "holds itself (a recursive alias"),
    ("report --compare: tolerance 9**400", lambda w: ["report", str(w["tmp"]), "--compare", str(_write(
        w, "targets.yaml", "methods: {fid: {sst2: 70}}\ntolerance: " + "9" * 400 + "\n"))],
     "(field 'tolerance'): a tolerance is a number"),
    # 4. fp16 mixed precision where no GPU runs it (training would silently be fp32)
    ("train mixed_precision=fp16 without a GPU", _train_fp16, "field 'mixed_precision': fp16 mixed precision needs a GPU"),
    ("experiment reader.mixed_precision=fp16 without a GPU", _experiment_fp16, "field 'reader.mixed_precision'"),
    # 5. the models a grid needs, before its stages run
    ("experiment reader.model missing", lambda w: _experiment(w, "methods=[fid]", f"reader.model={w['tmp'] / 'none'}"),
     "field 'reader.model': the reader"),
    ("experiment rerank.lm missing", lambda w: _experiment(w, "methods=[pgra]", f"reader.model={_reader(w)}",
                                                           f"rerank.lm={w['tmp'] / 'none'}"),
     "field 'rerank.lm': the prompt_guided reranker's LM"),
]
