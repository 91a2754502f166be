"""The bad-input matrix: each kind of bad input, on every command, is exit code 2 with exactly one short `error:`
line naming the file, line or field, no traceback, and no file outside the stage's own new output touched (every
file of the test's world, finished artifacts included, keeps its bytes and its modification time)."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pgra.cli import main
from tests import matrix_b as B
from tests import (
    matrix_r4_export,
    matrix_r4_fid,
    matrix_r4_locks,
    matrix_r4_misc,
    matrix_r4_rerank,
    matrix_r5_bundles,
    matrix_r5_plugins,
)

MAX_ERROR_LINE = 1500  # characters: no error echoes a huge value (a YAML bomb, a 100 kB argument) back


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every file under ``root``: (size, modification time, SHA-256 or None when unreadable)."""
    files = {}
    for p in sorted(root.rglob("*")):
        try:
            if not p.is_file() or p.is_symlink():
                continue
            st = p.stat()
            try:
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            except OSError:  # a file the case made unreadable
                digest = None
            files[str(p)] = (st.st_size, st.st_mtime_ns, digest)
        except OSError:
            continue
    return files


def _out_of(args: list[str]) -> Path | None:
    return Path(args[args.index("--out") + 1]) if "--out" in args else None


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _folder(w: dict, name: str, files: dict[str, str]) -> Path:
    """A folder ``tmp/name`` holding ``files`` (name -> text)."""
    d = w["tmp"] / name
    d.mkdir(parents=True, exist_ok=True)
    for file, text in files.items():
        (d / file).write_text(text, encoding="utf-8")
    return d


def _task_yaml(w: dict, **change) -> Path:
    spec = yaml.safe_load(w["task"].read_text())
    for key, value in change.items():
        node = spec
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    path = w["tmp"] / "bad-task.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _data_folder(w: dict, line: str) -> Path:
    """A candidates-like folder whose train.jsonl has ``line`` as its 2nd line (no files in the manifest)."""
    d = w["tmp"] / "bad-data"
    d.mkdir()
    manifest = json.loads((w["cands"] / "manifest.json").read_text())
    manifest.pop("files")
    (d / "manifest.json").write_text(json.dumps(manifest))
    good = (w["cands"] / "train.jsonl").read_text().splitlines()
    for split in ("train", "dev", "test"):
        (d / f"{split}.jsonl").write_text("\n".join([good[0], line, *good[1:]]) + "\n")
    return d


def _copy_truncated(w: dict) -> Path:
    d = w["tmp"] / "cut-cands"
    d.mkdir()
    for p in w["cands"].iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    (d / "train.jsonl").write_bytes((d / "train.jsonl").read_bytes()[:-50])
    return d


def _copy_index_truncated(w: dict) -> Path:
    import shutil

    d = w["tmp"] / "cut-index"
    shutil.copytree(w["index"], d)
    victim = sorted((d / "bm25").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:-9])
    return d


def _copy(w: dict, src: Path, name: str) -> Path:
    d = w["tmp"] / name
    shutil.copytree(src, d)
    return d


def _with_manifest(w: dict, src: Path, name: str, text: str) -> Path:
    """A copy of the artifact ``src`` whose manifest.json holds ``text``."""
    d = _copy(w, src, name)
    (d / "manifest.json").write_text(text)
    return d


def _model(w: dict) -> Path:
    """A folder given as a local model (the overlap check refuses before anything loads it)."""
    return _folder(w, "m", {"config.json": "{}\n"})


def _bomb(w: dict, name: str, head: str = "") -> Path:
    """A "billion laughs": a few hundred bytes of nested aliases that expand to 9**9 values."""
    lines = [head, 'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
    return _write(w["tmp"] / name, "\n".join(lines) + "\n")


def _fifo(w: dict, name: str) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    path = w["tmp"] / name
    os.mkfifo(path)
    return path


def _unreadable(w: dict) -> Path:
    """A corpus file the process may not read: chmod 000, or, for root (who reads any file), a denial
    simulated where pgra opens it."""
    path = _write(w["tmp"] / "locked.txt", "a b\nc d\n")
    if os.geteuid() != 0:
        path.chmod(0)
        return path
    real_open = io.open

    def deny(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, *args, **kwargs)

    w["mp"].setattr("builtins.open", deny)
    w["mp"].setattr("io.open", deny)
    return path


def _readonly_out(w: dict) -> Path:
    """An output folder that cannot be created: under a chmod 555 folder, or, for root, under /sys."""
    if os.geteuid() != 0:
        parent = w["tmp"] / "ro"
        parent.mkdir()
        parent.chmod(0o555)
        w["ro"] = parent / "o"
        return w["ro"]
    target = Path("/sys/pgra-matrix-out")
    try:
        target.mkdir()
    except OSError:
        w["ro"] = target
        return target
    target.rmdir()
    pytest.skip("running as root with a writable /sys: no folder here that root cannot write")


def _full_disk(w: dict) -> None:
    """Every array write fails as on a full disk (ENOSPC, no file name: the error names the output)."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    w["mp"].setattr(np, "save", full)


def _fault(w: dict, spec: str) -> None:
    w["mp"].setenv("PGRA_FAULT", spec)


def _run(w: dict, truncated: bool = True, manifest: str | None = None) -> Path:
    """A reader run folder (manifest + best/) whose best/model.safetensors is cut short."""
    from safetensors.numpy import save_file

    run = w["tmp"] / "run"
    (run / "best").mkdir(parents=True)
    (run / "manifest.json").write_text(manifest or json.dumps({"kind": "reader", "data": str(w["cands"])}))
    (run / "best" / "fid_config.json").write_text("{}")
    weights = run / "best" / "model.safetensors"
    save_file({"w": np.zeros((32, 32), np.float32)}, str(weights))
    if truncated:
        weights.write_bytes(weights.read_bytes()[:-100])
    return run


def _corpus_in(w: dict, folder: str, name: str) -> Path:
    """The fixture corpus copied to ``tmp/folder/name``."""
    d = w["tmp"] / folder
    d.mkdir(parents=True, exist_ok=True)
    return _write(d / name, w["corpus"].read_text())


def _bi(w: dict, corpus: Path | str, out: Path | str, *extra: str) -> list[str]:
    return ["build-index", "--corpus", str(corpus), "--out", str(out), "--retriever", "bm25", *extra]


def _retrieve(w: dict, out: Path | str, *extra: str, task: Path | None = None) -> list[str]:
    return ["retrieve", "--task", str(task or w["task"]), "--index", str(w["index"]), "--out", str(out), *extra]


def _train(w: dict, out: Path | str, *extra: str, data: Path | None = None) -> list[str]:
    return ["train", "--data", str(data or w["cands"]), "--out", str(out), "--max-steps", "1", *extra]


# (name, argv builder, text the error line must contain)
CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = [
    # ranges and choices of every command, from flags, key=value and YAML
    ("retrieve -k -3", lambda w: ["retrieve", "--task", str(w["task"]), "--index", str(w["index"]), "--out",
                                  str(w["tmp"] / "o"), "-k", "-3"], "field 'k'"),
    ("train --n-passages -2", lambda w: ["train", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                         "--n-passages", "-2"], "field 'n_passages'"),
    ("train learning_rate=-1", lambda w: ["train", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                          "learning_rate=-1"], "field 'learning_rate'"),
    ("train --batch-size 0", lambda w: ["train", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                        "--batch-size", "0"], "field 'batch_size'"),
    ("train --max-steps 0", lambda w: ["train", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                       "--max-steps", "0"], "field 'max_steps'"),
    ("train max_steps=ten", lambda w: ["train", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                       "max_steps=ten"], "field 'max_steps'"),
    ("rerank --top-d 0", lambda w: ["rerank", "--candidates", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                    "--top-d", "0"], "field 'top_d'"),
    ("rerank --num-demos -1", lambda w: ["rerank", "--candidates", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                         "--num-demos", "-1"], "field 'num_demos'"),
    ("icl --num-demos -1", lambda w: ["icl", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                      "--num-demos", "-1"], "field 'num_demos'"),
    ("build-index bm25.b=2", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out", str(w["tmp"] / "o"),
                                        "--retriever", "bm25", "bm25.b=2"], "field 'bm25.b'"),
    ("build-index bm25.k1=-1", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out",
                                          str(w["tmp"] / "o"), "--retriever", "bm25", "bm25.k1=-1"], "field 'bm25.k1'"),
    ("build-index nprobe=0", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out", str(w["tmp"] / "o"),
                                        "dense.faiss.nprobe=0"], "field 'dense.faiss.nprobe'"),
    ("search -k 0", lambda w: ["search", "--index", str(w["index"]), "--query", "sun", "-k", "0"], "field 'k'"),
    ("peek -n -1", lambda w: ["peek", str(w["cands"]), "-n", "-1"], "field 'inputs'"),
    ("download-data --timeout 0", lambda w: ["download-data", "lmbff", "--timeout", "0"], "field 'timeout'"),
    ("experiment unknown method", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), "methods=fid,bogus"],
     "field 'methods'"),
    ("experiment knn_vote.k=0", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), "knn_vote.k=0"],
     "field 'knn_vote.k'"),
    # paths that must exist, models that cannot load
    ("build-index --encoder missing", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out",
                                                 str(w["tmp"] / "o"), "--encoder", str(w["tmp"] / "nope")],
     "field 'encoder'"),
    ("build-index --corpus missing", lambda w: ["build-index", "--corpus", str(w["tmp"] / "nope.txt"), "--out",
                                                str(w["tmp"] / "o"), "--retriever", "bm25"], "nope.txt"),
    ("retrieve --index missing", lambda w: ["retrieve", "--task", str(w["task"]), "--index", str(w["tmp"] / "nope"),
                                            "--out", str(w["tmp"] / "o")], "field 'index'"),
    ("rerank --candidates missing", lambda w: ["rerank", "--candidates", str(w["tmp"] / "nope"), "--out",
                                               str(w["tmp"] / "o")], "field 'candidates'"),
    ("rerank --lm missing", lambda w: ["rerank", "--candidates", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                       "--lm", str(w["tmp"] / "nope"), "--cache-dir", str(w["tmp"] / "c")],
     "field 'lm'"),
    ("train --model missing", lambda w: ["train", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                         "--model", str(w["tmp"] / "nope"), "--max-steps", "1"], "field 'model'"),
    ("report missing folder", lambda w: ["report", str(w["tmp"] / "nope")], "field 'directory'"),
    ("evaluate --run missing", lambda w: ["evaluate", "--run", str(w["tmp"] / "nope")], "field 'run'"),
    ("predict --input-file missing", lambda w: ["predict", "--run", str(w["cands"]), "--input-file",
                                                str(w["tmp"] / "nope.txt")], "field 'input_file'"),
    ("search --queries-file missing", lambda w: ["search", "--index", str(w["index"]), "--queries-file",
                                                 str(w["tmp"] / "nope.txt")], "field 'queries_file'"),
    # bad files: corpus lines, config files, task files, data files, damaged artifacts
    ("corpus blank line", lambda w: ["build-index", "--corpus", str(_write(w["tmp"] / "c.txt", "a b\n\nc d\n")),
                                     "--out", str(w["tmp"] / "o"), "--retriever", "bm25"], "c.txt:2"),
    ("corpus bad JSON line", lambda w: ["build-index", "--corpus",
                                        str(_write(w["tmp"] / "c.jsonl", '{"id": 1, "text": "a"}\n{oops\n')),
                                        "--out", str(w["tmp"] / "o"), "--retriever", "bm25"], "c.jsonl:2"),
    ("corpus missing text field", lambda w: ["build-index", "--corpus",
                                             str(_write(w["tmp"] / "c.jsonl", '{"id": 1, "text": "a"}\n{"id": 2}\n')),
                                             "--out", str(w["tmp"] / "o"), "--retriever", "bm25"], "c.jsonl:2"),
    ("corpus duplicate id", lambda w: ["build-index", "--corpus",
                                       str(_write(w["tmp"] / "c.jsonl", '{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n')),
                                       "--out", str(w["tmp"] / "o"), "--retriever", "bm25"], "c.jsonl:2"),
    ("config file missing", lambda w: ["train", "--config", str(w["tmp"] / "nope.yaml")], "nope.yaml"),
    ("config invalid YAML", lambda w: ["train", "--config", str(_write(w["tmp"] / "c.yaml", "a: [1,\n"))], "c.yaml"),
    ("config unknown key", lambda w: ["train", "--config", str(_write(w["tmp"] / "c.yaml", "max_stpes: 3\n"))],
     "field 'max_stpes'"),
    ("config out of range", lambda w: ["rerank", "--config", str(_write(w["tmp"] / "c.yaml", "top_d: -4\n"))],
     "c.yaml (field 'top_d')"),
    ("config base cycle", lambda w: ["train", "--config", str(_write(w["tmp"] / "c.yaml", "base: c.yaml\n"))],
     "field 'base'"),
    ("task dev_fraction=2", lambda w: ["retrieve", "--task", str(_task_yaml(w, **{"data.dev_fraction": 2})),
                                       "--index", str(w["index"]), "--out", str(w["tmp"] / "o")],
     "field 'data.dev_fraction'"),
    ("task unknown key", lambda w: ["retrieve", "--task", str(_task_yaml(w, lables=["a"])), "--index",
                                    str(w["index"]), "--out", str(w["tmp"] / "o")], "field 'lables'"),
    ("data bad JSON line", lambda w: ["train", "--data", str(_data_folder(w, "{oops")), "--out",
                                      str(w["tmp"] / "o"), "--max-steps", "1"], "train.jsonl:2"),
    ("data without manifest", lambda w: ["rerank", "--candidates", str(_folder(w, "plain", {"train.jsonl": "{}\n"})),
                                         "--out", str(w["tmp"] / "o")], "manifest.json"),
    ("truncated candidates", lambda w: ["train", "--data", str(_copy_truncated(w)), "--out", str(w["tmp"] / "o"),
                                        "--max-steps", "1"], "train.jsonl"),
    ("truncated index", lambda w: ["search", "--index", str(_copy_index_truncated(w)), "--query", "sun"], "bm25/"),
    ("index of other settings", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out", str(w["index"]),
                                           "--retriever", "bm25", "bm25.k1=1.2"], lambda w: str(w["index"])),
    # --- issue 27, part A: outputs that overlap inputs, artifacts of another kind, paths from names, bounded YAML,
    # NaN, and OS errors as one line
    ("build-index --out holds the corpus", lambda w: _bi(w, _corpus_in(w, "p/corpus", "x.txt"), w["tmp"] / "p"),
     "field 'corpus'"),
    ("build-index corpus named manifest.json in --out",
     lambda w: _bi(w, _corpus_in(w, "p", "manifest.json"), w["tmp"] / "p"), "field 'corpus'"),
    ("build-index corpus named corpus in --out", lambda w: _bi(w, _corpus_in(w, "p", "corpus"), w["tmp"] / "p"),
     "field 'corpus'"),
    ("build-index --out is the corpus", lambda w: _bi(w, w["corpus"], w["corpus"]), "field 'out'"),
    ("build-index user's corpus/ folder", lambda w: _bi(w, w["corpus"], _folder(w, "p/corpus", {"notes.txt": "mine"}).parent),
     "corpus store"),
    ("build-index user's bm25/ folder", lambda w: _bi(w, w["corpus"], _folder(w, "p/bm25/sub", {"a.npy": "x"}).parents[1]),
     "BM25"),
    ("build-index user's manifest.json", lambda w: _bi(w, w["corpus"], _folder(w, "p", {"manifest.json": "notes\n"})),
     "not a manifest pgra wrote"),
    ("build-index onto candidates", lambda w: _bi(w, w["corpus"], w["cands"]), "'candidates' artifact"),
    ("build-index --encoder is --out", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--encoder",
                                                  str(_model(w)), "--out", str(w["tmp"] / "m")], "field 'dense.encoder'"),
    ("build-index --out is a file", lambda w: _bi(w, w["corpus"], _write(w["tmp"] / "f.txt", "x")), "field 'out'"),
    ("retrieve --out is the index", lambda w: _retrieve(w, w["index"]), "field 'index'"),
    ("retrieve --out inside the index", lambda w: _retrieve(w, w["index"] / "bm25"), "field 'index'"),
    ("retrieve --out holds the task", lambda w: _retrieve(w, w["tmp"]), "field 'task'"),
    ("retrieve --out is the task data", lambda w: _retrieve(w, w["tmp"] / "skydata"), "field 'task'"),
    ("retrieve --out is --data-dir", lambda w: _retrieve(w, _folder(w, "dd", {}), "--data-dir", str(w["tmp"] / "dd")),
     "field 'data_dir'"),
    ("retrieve --out is another index", lambda w: _retrieve(w, _copy(w, w["index"], "idx2")), "'index' artifact"),
    ("retrieve --out is a file", lambda w: _retrieve(w, _write(w["tmp"] / "f.txt", "x")), "field 'out'"),
    ("rerank --out is its candidates", lambda w: ["rerank", "--candidates", str(w["cands"]), "--out", str(w["cands"])],
     "field 'candidates'"),
    ("rerank --out inside the recorded index", lambda w: ["rerank", "--candidates", str(w["cands"]), "--out",
                                                          str(w["index"] / "sub"), "--lm", "nope"], "field 'index'"),
    ("rerank --lm is --out", lambda w: ["rerank", "--candidates", str(w["cands"]), "--lm", str(_model(w)), "--out",
                                        str(w["tmp"] / "m")], "(field 'lm')"),
    ("rerank --cache-dir is a file", lambda w: ["rerank", "--candidates", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                                "--cache-dir", str(_write(w["tmp"] / "f.txt", "x"))], "field 'cache_dir'"),
    ("rerank candidates manifest is a list", lambda w: ["rerank", "--candidates",
                                                        str(_with_manifest(w, w["cands"], "c2", "[]")), "--out",
                                                        str(w["tmp"] / "o")], "not an object"),
    ("train --out is its data", lambda w: _train(w, w["cands"]), "field 'data'"),
    ("train --out inside its data", lambda w: _train(w, w["cands"] / "run"), "field 'data'"),
    ("train --model is --out", lambda w: _train(w, w["tmp"] / "m", "--model", str(_model(w))), "(field 'model')"),
    ("train --out is an index", lambda w: _train(w, _copy(w, w["index"], "idx2")), "'index' artifact"),
    ("train --out is a file", lambda w: _train(w, _write(w["tmp"] / "f.txt", "x")), "field 'out'"),
    ("train data manifest is a list", lambda w: _train(w, w["tmp"] / "o", data=_with_manifest(w, w["cands"], "c2", "[1]")),
     "not an object"),
    ("icl --out is its data", lambda w: ["icl", "--data", str(w["cands"]), "--out", str(w["cands"])], "field 'data'"),
    ("icl --out inside the recorded index", lambda w: ["icl", "--data", str(w["cands"]), "--out",
                                                       str(w["index"] / "sub")], "field 'index'"),
    ("icl splits=3 (a scalar list)", lambda w: ["icl", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                                "splits=3", "--lm", "nope"], "field 'splits'"),
    ("tasks export onto the task's data", lambda w: ["tasks", "export", str(w["task"]), "--out",
                                                     str(w["tmp"] / "skydata")], "field 'out'"),
    ("tasks export onto an index", lambda w: ["tasks", "export", str(w["task"]), "--out", str(w["index"])],
     "'index' artifact"),
    ("tasks export --out is a file", lambda w: ["tasks", "export", str(w["task"]), "--out",
                                                str(_write(w["tmp"] / "f.txt", "x"))], "field 'out'"),
    ("train-simcse --out holds the corpus", lambda w: ["train-simcse", "--corpus", str(_corpus_in(w, "p", "c.txt")),
                                                       "--out", str(w["tmp"] / "p")], "field 'corpus'"),
    ("train-simcse --encoder is --out", lambda w: ["train-simcse", "--corpus", str(w["corpus"]), "--encoder",
                                                   str(_model(w)), "--out", str(w["tmp"] / "m")], "field 'encoder'"),
    ("experiment --out holds its task", lambda w: ["experiment", "--out", str(w["tmp"]), f"tasks={w['task']}"],
     "field 'tasks'"),
    ("experiment --out is data_dir", lambda w: ["experiment", "--out", str(_folder(w, "dd", {})),
                                                f"data_dir={w['tmp'] / 'dd'}"], "field 'data_dir'"),
    ("evaluate --out is its data", lambda w: ["evaluate", "--run", str(_run(w)), "--data", str(w["cands"]), "--out",
                                              str(w["cands"])], "field 'data'"),
    ("evaluate --out is its run", lambda w: ["evaluate", "--run", str(_run(w)), "--out", str(w["tmp"] / "run")],
     "field 'run'"),
    # names that become paths
    ("task name ../../ESCAPED", lambda w: _retrieve(w, w["tmp"] / "o", task=_task_yaml(w, name="../../ESCAPED")),
     "field 'name'"),
    ("task name absolute", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), f"tasks={_task_yaml(w, name='/tmp/x')}",
                                      f"index.out={w['index']}", "--dry-run"], "field 'name'"),
    ("task name ..", lambda w: _retrieve(w, w["tmp"] / "o", task=_task_yaml(w, name="..")), "field 'name'"),
    ("task name with a slash", lambda w: _retrieve(w, w["tmp"] / "o", task=_task_yaml(w, name="a/b")), "field 'name'"),
    ("icl splits=../x", lambda w: ["icl", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                   "splits=dev,../../x"], "field 'splits'"),
    ("evaluate --split ../x", lambda w: ["evaluate", "--run", str(_run(w, truncated=False)), "--split", "../x"],
     "field 'split'"),
    # YAML bounded, values echoed short
    ("config YAML bomb", lambda w: ["train", "--config", str(_bomb(w, "bomb.yaml"))], "bomb.yaml"),
    ("task YAML bomb", lambda w: _retrieve(w, w["tmp"] / "o", task=_bomb(w, "bomb-task.yaml", "name: bomb")),
     "bomb-task.yaml"),
    ("100 kB value", lambda w: _train(w, w["tmp"] / "o", "learning_rate=" + "9x" * 50_000), "field 'learning_rate'"),
    ("100 kB list in a config", lambda w: ["rerank", "--config",
                                          str(_write(w["tmp"] / "c.yaml", "top_d: [" + "1, " * 30_000 + "1]\n"))],
     "field 'top_d'"),
    ("override of invalid YAML", lambda w: _train(w, w["tmp"] / "o", "learning_rate=[1,"), "field 'learning_rate'"),
    ("config key that is a number", lambda w: ["train", "--config", str(_write(w["tmp"] / "c.yaml", "1: 2\n"))],
     "c.yaml"),
    # NaN and infinity
    ("train-simcse --temperature nan", lambda w: ["train-simcse", "--corpus", str(w["corpus"]), "--out",
                                                  str(w["tmp"] / "o"), "--temperature", "nan"], "field 'temperature'"),
    ("build-index bm25.b=nan", lambda w: _bi(w, w["corpus"], w["tmp"] / "o", "bm25.b=nan"), "field 'bm25.b'"),
    ("train learning_rate=nan", lambda w: _train(w, w["tmp"] / "o", "learning_rate=nan"), "field 'learning_rate'"),
    ("train learning_rate=inf", lambda w: _train(w, w["tmp"] / "o", "learning_rate=inf"), "field 'learning_rate'"),
    ("config weight_decay: .inf", lambda w: ["train", "--config", str(_write(w["tmp"] / "c.yaml", "weight_decay: .inf\n"))],
     "field 'weight_decay'"),
    ("task dev_fraction=nan", lambda w: _retrieve(w, w["tmp"] / "o", task=_task_yaml(w, **{"data.dev_fraction": float("nan")})),
     "field 'data.dev_fraction'"),
    # operating-system errors and odd files
    ("unreadable corpus", lambda w: _bi(w, _unreadable(w), w["tmp"] / "o"), "locked.txt"),
    ("read-only --out", lambda w: _bi(w, w["corpus"], _readonly_out(w)), lambda w: str(w["ro"])),
    ("full disk", lambda w: (_full_disk(w), _bi(w, w["corpus"], w["tmp"] / "o"))[1], "No space left"),
    ("corpus is a folder", lambda w: _bi(w, _folder(w, "cdir.txt", {"a.txt": "x"}), w["tmp"] / "o"), "a folder"),
    ("corpus is a FIFO", lambda w: _bi(w, _fifo(w, "fifo.txt"), w["tmp"] / "o"), "FIFO"),
    ("--queries-file is a folder", lambda w: ["search", "--index", str(w["index"]), "--queries-file",
                                              str(_folder(w, "q", {}))], "a folder"),
    ("--input-file is a FIFO", lambda w: ["predict", "--run", str(_run(w, truncated=False)), "--input-file",
                                          str(_fifo(w, "inputs"))], "FIFO"),
    ("config file is a folder", lambda w: ["train", "--config", str(_folder(w, "c.yaml", {}))], "a folder"),
    ("index manifest is a list", lambda w: ["search", "--index", str(_with_manifest(w, w["index"], "idx2", "[1, 2]")),
                                            "--query", "sun"], "not an object"),
    ("index manifest is a number (retrieve)", lambda w: ["retrieve", "--task", str(w["task"]), "--index",
                                                         str(_with_manifest(w, w["index"], "idx2", "7")), "--out",
                                                         str(w["tmp"] / "o")], "not an object"),
    ("run manifest is a list", lambda w: ["evaluate", "--run", str(_run(w, manifest="[]"))], "not an object"),
    ("truncated best/model.safetensors (evaluate)", lambda w: ["evaluate", "--run", str(_run(w))], "model.safetensors"),
    ("truncated best/model.safetensors (predict)", lambda w: ["predict", "--run", str(_run(w)), "--text", "sun"],
     "model.safetensors"),
    ("PGRA_FAULT=x@abc", lambda w: (_fault(w, "train.step@abc"), _train(w, w["tmp"] / "o"))[1], "PGRA_FAULT"),
    ("PGRA_FAULT=@2", lambda w: (_fault(w, "@2"), _bi(w, w["corpus"], w["tmp"] / "o"))[1], "PGRA_FAULT"),
    ("experiment seeds={a: 1}", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), "seeds={a: 1}"], "field 'seeds'"),
    ("experiment seeds=1,1", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), "seeds=1,1"], "field 'seeds'"),
    # --- issue 27, part B ---
    # a manifest that allows a model's own code (builders in tests/matrix_b.py; the code never runs)
    ("search: the index's manifest allows remote code",
     lambda w: ["search", "--index", str(__import__("tests.matrix_b").matrix_b.evil_index(w)), "--query", "sun"],
     "field 'trust_remote_code'"),
    ("retrieve: the index's manifest allows remote code",
     lambda w: ["retrieve", "--task", str(w["task"]), "--index", str(__import__("tests.matrix_b").matrix_b.evil_index(w)),
                "--out", str(w["tmp"] / "o")], "field 'trust_remote_code'"),
    ("predict: the run's manifest allows remote code",
     lambda w: ["predict", "--run", str(__import__("tests.matrix_b").matrix_b.evil_icl_run(w)), "--text", "sun"],
     "field 'trust_remote_code'"),
    ("evaluate: the run's manifest allows remote code",
     lambda w: ["evaluate", "--run", str(__import__("tests.matrix_b").matrix_b.evil_icl_run(w))],
     "field 'trust_remote_code'"),
    # label words as the reader's token ids
    ("train: reader words are both [UNK]",
     lambda w: ["train", "--data", str(__import__("tests.matrix_b").matrix_b.data_with_reader_words(
         w, {"sky": "🙂", "town": "🙃"})), "--model", str(__import__("tests.matrix_b").matrix_b.bert2bert(w)),
         "--out", str(w["tmp"] / "o"), "--max-steps", "1"], "field 'reader_words'"),
    ("train: reader words are the same tokens",
     lambda w: ["train", "--data", str(__import__("tests.matrix_b").matrix_b.data_with_reader_words(
         w, {"sky": "Town", "town": "town"})), "--model", str(__import__("tests.matrix_b").matrix_b.bert2bert(w)),
         "--out", str(w["tmp"] / "o"), "--max-steps", "1"], "field 'reader_words'"),
    # the report recomputes from the predictions it reads
    ("report: predictions edited after the cell",
     lambda w: ["report", str(__import__("tests.matrix_b").matrix_b.changed_cell(w, checksums=False)[0])],
     lambda w: str(w["tmp"] / "b-exp" / "sky" / "fid" / "seed-1" / "predictions_test.jsonl")),
    ("report: predictions truncated (checksum)",
     lambda w: ["report", str(__import__("tests.matrix_b").matrix_b.changed_cell(w, checksums=True)[0])],
     lambda w: str(w["tmp"] / "b-exp" / "sky" / "fid" / "seed-1" / "predictions_test.jsonl")),
    # a test split the data folder does not have
    ("train --test-split bogus",
     lambda w: ["train", "--data", str(w["cands"]), "--model", str(__import__("tests.matrix_b").matrix_b.bert2bert(w)),
                "--out", str(w["tmp"] / "o"), "--max-steps", "1", "--test-split", "bogus"], "field 'test_split'"),
    # --- issue 41 (builders in tests/matrix_b.py) ---
    # files that are not UTF-8: one line naming the file and the line, never a UnicodeDecodeError
    ("search --queries-file not UTF-8", lambda w: ["search", "--index", str(w["index"]), "--queries-file",
                                                   str(B.latin1(w, "q.txt"))], "q.txt:2 (field 'queries_file')"),
    ("predict --input-file not UTF-8", lambda w: ["predict", "--run", str(_run(w, truncated=False)), "--input-file",
                                                  str(B.latin1(w, "in.txt"))], "in.txt:2 (field 'input_file')"),
    ("retrieve --exclude-ids not UTF-8", lambda w: _retrieve(w, w["tmp"] / "o", "--exclude-ids",
                                                            str(B.latin1(w, "ids.txt", b"# ids\n"))),
     "ids.txt:3 (field 'exclude_ids')"),
    ("build-index corpus not UTF-8", lambda w: _bi(w, B.latin1(w, "c.txt"), w["tmp"] / "o"), "c.txt:2"),
    ("config file not UTF-8", lambda w: ["train", "--config", str(B.latin1(w, "c.yaml", b"# note\n"))], "c.yaml"),
    ("task YAML not UTF-8", lambda w: _retrieve(w, w["tmp"] / "o", task=B.latin1(w, "t.yaml", b"# task\n")), "t.yaml"),
    ("task data file not UTF-8", lambda w: _retrieve(w, w["tmp"] / "o", task=B.latin1_task(w)), "train.jsonl:2"),
    ("task CSV data not UTF-8", lambda w: _retrieve(w, w["tmp"] / "o", task=B.latin1_csv_task(w)), "train.csv:3"),
    ("train data not UTF-8", lambda w: _train(w, w["tmp"] / "o", data=B.latin1_data(w)), "train.jsonl:2"),
    ("report: predictions not UTF-8", lambda w: ["report", str(B.cell_with_latin1_predictions(w))],
     "predictions_test.jsonl:2"),
    ("peek a file not UTF-8", lambda w: ["peek", str(B.latin1(w, "p.jsonl", b'{"id": 1, "text": "a", "ctxs": []}\n'))],
     "p.jsonl"),
    # seeds outside 0 .. 2**32 - 1, on every command that takes one (flags, key=value, YAML, lists, nested)
    ("train --seed=-1", lambda w: _train(w, w["tmp"] / "o", "--seed=-1"), "field 'seed'"),
    ("retrieve subsample_seed=-5", lambda w: _retrieve(w, w["tmp"] / "o", "subsample_seed=-5"), "field 'subsample_seed'"),
    ("rerank --seed 2**32", lambda w: ["rerank", "--candidates", str(w["cands"]), "--out", str(w["tmp"] / "o"),
                                       "--seed", str(2**32)], "field 'seed'"),
    ("icl pool_seed=-1", lambda w: ["icl", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"), "pool_seed=-1"],
     "field 'pool_seed'"),
    ("icl --seed=-7", lambda w: ["icl", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"), "--seed=-7"],
     "field 'seed'"),
    ("build-index dense.faiss.seed=-1", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out",
                                                   str(w["tmp"] / "o"), "dense.faiss.seed=-1"], "field 'dense.faiss.seed'"),
    ("experiment seeds=1,-2", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), "seeds=1,-2"], "field 'seeds'"),
    ("experiment rerank.seed=-1", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), "rerank.seed=-1"],
     "field 'rerank.seed'"),
    ("report --seed=-1", lambda w: ["report", str(w["tmp"]), "--seed=-1"], "field 'seed'"),
    ("train-simcse --seed 2**32", lambda w: ["train-simcse", "--corpus", str(w["corpus"]), "--out", str(w["tmp"] / "o"),
                                             "--seed", str(2**32)], "field 'seed'"),
    ("task data.dev_seed=-1", lambda w: _retrieve(w, w["tmp"] / "o", task=_task_yaml(w, **{"data.dev_seed": -1})),
     "field 'data.dev_seed'"),
    ("analyze analysis.case_study.seed=-1", lambda w: ["analyze", "--out", str(w["tmp"] / "o"),
                                                       "analysis.case_study.seed=-1"], "field 'analysis.case_study.seed'"),
    ("eval-encoder eval.seed=-1", lambda w: ["eval-encoder", "encoders=x", "eval.seed=-1"], "field 'eval.seed'"),
    ("config seed: 1e10", lambda w: ["train", "--config", str(_write(w["tmp"] / "c.yaml", "seed: 10000000000\n"))],
     "c.yaml (field 'seed')"),
    # a cell.json edited by hand (the report reads and checks it in one place; unknown fields are kept)
    ("report: cell.json is a list", lambda w: ["report", str(B.edited_cell(w, text="[1, 2]"))], "not an object"),
    ("report: cell.json seed is a string", lambda w: ["report", str(B.edited_cell(w, {"seed": "one"}))], "field 'seed'"),
    ("report: cell.json seed is negative", lambda w: ["report", str(B.edited_cell(w, {"seed": -1}))], "field 'seed'"),
    ("report: cell.json unknown metric", lambda w: ["report", str(B.edited_cell(w, {"metric": "f1"}))], "field 'metric'"),
    ("report: cell.json metric not its task's", lambda w: ["report", str(B.edited_cell(w, {"metric": "mcc"}))],
     "field 'metric'"),
    ("report: cell.json seed_independent 'no'", lambda w: ["report", str(B.edited_cell(w, {"seed_independent": "no"}))],
     "field 'seed_independent'"),
    ("report: cell.json results is a list", lambda w: ["report", str(B.edited_cell(w, {"results": [0.9]}))],
     "field 'results'"),
    ("report: cell.json without a method", lambda w: ["report", str(B.edited_cell(w, {"method": None}))],
     "field 'method'"),
    ("report: cell.json task_spec is a string", lambda w: ["report", str(B.edited_cell(w, {"task_spec": "sky"}))],
     "field 'task_spec'"),
    ("report: cell.json torn", lambda w: ["report", str(B.edited_cell(w, text='{"kind": "cell", "ta'))],
     "corrupted JSON"),
    # empty queries and inputs are refused alike
    ("search --query ''", lambda w: ["search", "--index", str(w["index"]), "--query", ""], "field 'query'"),
    ("search --query of spaces", lambda w: ["search", "--index", str(w["index"]), "--query", "sun", "--query", "  "],
     "field 'query'"),
    ("predict --text ''", lambda w: ["predict", "--run", str(_run(w, truncated=False)), "--text", ""], "field 'text'"),
    # booleans are real YAML booleans, numbers are no booleans
    ("config exclude_query_text: 'no'", lambda w: ["retrieve", "--config",
                                                   str(_write(w["tmp"] / "c.yaml", 'exclude_query_text: "no"\n'))],
     "c.yaml (field 'exclude_query_text')"),
    ("train freeze_encoder=1", lambda w: _train(w, w["tmp"] / "o", "freeze_encoder=1"), "field 'freeze_encoder'"),
    ("experiment report='no'", lambda w: ["experiment", "--out", str(w["tmp"] / "o"), "report='no'"], "field 'report'"),
    ("train batch_size=true", lambda w: _train(w, w["tmp"] / "o", "batch_size=true"), "field 'batch_size'"),
    ("config top_d: yes", lambda w: ["rerank", "--config", str(_write(w["tmp"] / "c.yaml", "top_d: yes\n"))],
     "c.yaml (field 'top_d')"),
    # a full disk while safetensors saves the reader: the same one line as any full disk
    ("train: full disk under safetensors", B.train_on_full_disk, "No space left"),
]
# --- issue 53 (reliability round 4), one module per surface ---
for _round4 in (matrix_r4_export, matrix_r4_fid, matrix_r4_rerank, matrix_r4_locks, matrix_r4_misc):
    CASES += _round4.CASES
CASES += matrix_r5_plugins.CASES  # issue 67 (reliability round 5): plug-ins, options that size memory
CASES += matrix_r5_bundles.CASES  # --- issue 67 (reliability round 5): results bundles as untrusted input ---


@pytest.fixture()
def world(tmp_path, corpus_txt, sky_task, candidates, monkeypatch) -> dict:
    monkeypatch.delenv("PGRA_FAULT", raising=False)
    return {"tmp": tmp_path, "corpus": corpus_txt, "task": sky_task, "cands": candidates,
            "index": tmp_path / "bm25", "mp": monkeypatch}


def test_the_matrix_has_150_kinds():
    assert len({name for name, _, _ in CASES}) == len(CASES) >= 150


@pytest.mark.parametrize(("name", "argv", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line_and_touches_nothing(name, argv, expected, world, capsys):
    capsys.readouterr()
    args = argv(world)
    expected = expected if not callable(expected) else expected(world)
    out_path = _out_of(args)
    new_out = out_path is not None and not out_path.exists()
    before = _snapshot(world["tmp"])
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own usage errors are not what this matrix is about
        pytest.fail(f"{name}: argparse exit {e.code}")
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2, (name, code, err)
    assert len(lines) == 1, (name, err)
    assert "Traceback" not in err + out, (name, err)
    assert expected in lines[0], (name, lines[0])
    assert len(lines[0]) <= MAX_ERROR_LINE, (name, len(lines[0]), lines[0][:300])
    after = _snapshot(world["tmp"])
    assert {p: after.get(p) for p in before} == before, (name, [p for p in before if after.get(p) != before[p]])
    created = [p for p in after if p not in before and not (new_out and Path(p).is_relative_to(out_path))]
    assert not created, (name, created)


def test_the_docs_count_the_matrix_s_kinds_as_it_holds():
    """The pages that give the matrix's size give this one (a figure from the suite, not written by hand)."""
    import re

    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in ("failure-and-recovery.md", "tests-and-benchmarks.md"):
        counts = re.findall(r"(\d[\d,]*) kinds", (docs / page).read_text(encoding="utf-8"))
        assert counts and {int(c.replace(",", "")) for c in counts} == {len(CASES)}, (page, counts, len(CASES))
