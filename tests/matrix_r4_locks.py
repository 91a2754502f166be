"""Bad-input matrix cases of reliability round 4 (issue 53), locks surfaces: (name, argv builder, expected text of the
one `error:` line), appended to tests/test_bad_input_matrix.py's CASES. Builders write under ``w["tmp"]`` only."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = []


def _grid(w: dict, out: Path) -> list[str]:
    """``pgra experiment`` over the world's task, with a BM25 index under tmp."""
    return ["experiment", "--out", str(out), f"tasks={w['task']}", "methods=knn_vote",
            f"index.corpus={w['corpus']}", f"index.out={w['tmp'] / 'grid-index'}", "index.retriever=bm25"]


def _lock_with_huge_pid(w: dict) -> list[str]:
    """An output folder whose `.pgra-lock` was edited by hand (a pid past any process id: was an OverflowError)."""
    out = w["tmp"] / "locked"
    out.mkdir()
    (out / ".pgra-lock").write_text(json.dumps({"pid": 10**30, "host": socket.gethostname(), "command": "pgra x",
                                                "started": time.time()}))
    return ["build-index", "--corpus", str(w["corpus"]), "--out", str(out), "--retriever", "bm25"]


def _lock_with_infinite_start(w: dict) -> list[str]:
    out = w["tmp"] / "locked"
    out.mkdir()
    (out / ".pgra-lock").write_text('{"pid": 4242, "host": "node-17", "command": "pgra x", "started": Infinity}')
    return ["build-index", "--corpus", str(w["corpus"]), "--out", str(out), "--retriever", "bm25"]


def _no_slurm(w: dict) -> list[str]:
    """``--launcher slurm`` on a machine without Slurm (no sbatch or srun on PATH): was submitit's RuntimeError."""
    empty = w["tmp"] / "no-slurm-bin"
    empty.mkdir()
    w["mp"].setenv("PATH", str(empty))
    return [*_grid(w, w["tmp"] / "o"), "--launcher", "slurm", "--workers", "2"]


def _other_settings(w: dict) -> list[str]:
    """A live job (pid 1, this host) runs the folder with knn_vote.k=7; this one asks k=3."""
    from pgra.core.config import from_dict
    from pgra.experiment import Experiment, ExperimentConfig

    out = w["tmp"] / "shared"
    argv = [*_grid(w, out), "knn_vote.k=3"]
    cfg = from_dict(ExperimentConfig, {"out": str(out), "tasks": [str(w["task"])], "methods": ["knn_vote"],
                                       "index": {"corpus": str(w["corpus"]), "out": str(w["tmp"] / "grid-index"),
                                                 "retriever": "bm25"}, "knn_vote": {"k": 7}})
    settings = Experiment(cfg).shared_settings()
    out.mkdir()
    (out / ".pgra-owned.json").write_text(json.dumps({"pgra": "owned", "kind": "experiment"}))
    (out / ".job-0123456789ab.claim").write_text(json.dumps({
        "pid": 1, "host": socket.gethostname(), "command": "pgra experiment", "started": time.time(),
        "stale_after": 600.0, "settings": settings}))
    return argv


CASES += [
    ("lock file with a huge pid", _lock_with_huge_pid, "field 'pid'"),
    ("lock file with an infinite start time", _lock_with_infinite_start, "field 'started'"),
    ("experiment --launcher slurm without Slurm", _no_slurm, "no Slurm"),
    ("experiment on a folder a live job runs with other settings", _other_settings,
     "field 'knn_vote.k': "),
]
