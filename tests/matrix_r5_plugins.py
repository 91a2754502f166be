"""Bad-input matrix cases of reliability round 5 (issue 67), plug-ins and options that size memory: (name, argv
builder, expected text of the one `error:` line), appended to tests/test_bad_input_matrix.py's CASES. Builders write
under ``w["tmp"]`` only."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = []


def _experiment(w: dict, *extra: str) -> list[str]:
    return ["experiment", "--out", str(w["tmp"] / "o"), f"tasks=[{w['task']}]", "seeds=[1]",
            "index.retriever=bm25", f"index.corpus={w['corpus']}", f"index.out={w['tmp'] / 'idx'}", *extra]


def _installed(w: dict, name: str, code: str) -> None:
    """A package installed on this process's path (as pip would put it) whose ``pgra.plugins`` entry point
    ``name`` is a module holding ``code``; the plug-ins are found again on the next lookup."""
    from pgra.methods import METHODS
    from pgra.methods.knn_vote import KnnVote

    site = w["tmp"] / f"site-{name}"
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[pgra.plugins]\n{name} = {name}_plugin\n")
    (site / f"{name}_plugin.py").write_text(code)
    mp = w["mp"]
    mp.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ beside it
    mp.syspath_prepend(str(site))
    mp.setattr("pgra.core.registry._plugins_loaded", False)
    mp.setattr(METHODS, "_loaded", False)  # the next method lookup loads the plug-ins
    mp.setitem(METHODS, "knn_vote", KnnVote)  # (put back should a plug-in replace it)


def _plugin_experiment(name: str, code: str) -> Callable[[dict], list[str]]:
    def build(w: dict) -> list[str]:
        _installed(w, name, code)
        return _experiment(w, "methods=[knn_vote]", "--dry-run")
    return build


_METHOD = "from pgra.methods import register_method\nfrom pgra.methods.knn_vote import KnnVote\n"
_RERANKER = ("from pgra.rerank.base import Reranker, register_reranker\n"
             "class Mine(Reranker):\n    name = {name!r}\n    def scores(self, queries, candidates):\n"
             "        return [[0.0] * len(c) for c in candidates]\nregister_reranker(Mine)\n")

CASES += [
    # H4: a plug-in under a built-in's name (a method, a reranker), refused by name before anything runs
    ("plug-in registers the method knn_vote",
     _plugin_experiment("r5knn", _METHOD + "class Mine(KnnVote):\n    pass\nregister_method(Mine)\n"),
     "the plug-in 'r5knn' (r5knn_plugin, entry point group pgra.plugins) is refused: r5knn_plugin:Mine registers "
     "the method 'knn_vote', the name of pgra's own"),
    ("plug-in registers the reranker mmr", _plugin_experiment("r5mmr", _RERANKER.format(name="mmr")),
     "registers the reranker 'mmr', the name of pgra's own (pgra.rerank.mmr:MMR)"),
    # H8: a path-like name
    ("plug-in registers the method ../../escaped",
     _plugin_experiment("r5path", _METHOD + "class Mine(KnnVote):\n    name = '../../escaped'\n"
                                            "register_method(Mine)\n"),
     "the plug-in 'r5path' (r5path_plugin, entry point group pgra.plugins) is refused: r5path_plugin:Mine "
     "registers the method '../../escaped'"),
    # H9: a plug-in that exits (or fails) while imported is its failure, never a quiet exit 0
    ("plug-in calls sys.exit(0) at import", _plugin_experiment("r5exit", "import sys\nsys.exit(0)\n"),
     "the plug-in 'r5exit' (r5exit_plugin, entry point group pgra.plugins) exited while being imported (code 0)"),
    ("plug-in raises at import", _plugin_experiment("r5raise", "raise RuntimeError('no licence key')\n"),
     "the plug-in 'r5raise' (r5raise_plugin, entry point group pgra.plugins) cannot be imported: RuntimeError: "
     "no licence key"),
]


def _local_beyond_the_machine(w: dict) -> list[str]:
    """This machine as one of 2 cores and no GPU: 9 local workers are more than it runs side by side."""
    w["mp"].setattr("pgra.experiment.launch.node_cores", lambda: 2)
    w["mp"].setattr("pgra.experiment.launch.visible_devices", lambda: [])
    return _experiment(w, "methods=[knn_vote]", "--launcher", "local", "--workers", "9")


CASES += [
    # H3: an option that sizes memory has a maximum (the dry run's schedule allocates nothing per worker either)
    ("experiment --dry-run --workers 1e9", lambda w: _experiment(w, "--dry-run", "--workers", "1000000000"),
     "(field \'workers\'): must be at most 1024, got 1000000000"),
    ("experiment --launcher local --dry-run --workers 1e9",
     lambda w: _experiment(w, "--dry-run", "--launcher", "local", "--workers", "1000000000"),
     "(field \'workers\'): must be at most 1024"),
    ("experiment --launcher local: more workers than the machine", _local_beyond_the_machine,
     "field 'workers': --launcher local starts 9 processes on this machine, which runs at most 8 side by side"),
    ("experiment cells_per_gpu=1e9", lambda w: _experiment(w, "--dry-run", "cells_per_gpu=1000000000"),
     "(field \'cells_per_gpu\'): must be at most 64"),
    ("experiment reader.n_passages=1e12", lambda w: _experiment(w, "--dry-run", "reader.n_passages=1000000000000"),
     "(field \'reader.n_passages\'): must be at most 100000"),
    ("experiment retrieve.k=1e12", lambda w: _experiment(w, "--dry-run", "retrieve.k=1000000000000"),
     "(field \'retrieve.k\'): must be at most 100000"),
    ("report --bootstrap 1e12", lambda w: ["report", str(w["tmp"]), "--bootstrap", "1000000000000"],
     "(field \'bootstrap\'): must be at most 100000, got 1000000000000"),
    ("search -k 1e12", lambda w: ["search", "--index", str(w["index"]), "--query", "sun", "-k", "1000000000000"],
     "(field \'k\'): must be at most 100000"),
    ("analyze analysis.calibration.n_bins=1e12",
     lambda w: ["analyze", *_experiment(w, "analysis.calibration.n_bins=1000000000000")[1:]],
     "(field \'analysis.calibration.n_bins\'): must be at most 10000"),
]
