"""The bad-input matrix: each kind of bad input, on every command, is exit code 2 with exactly one `error:` line
naming the file, line or field, no traceback, and the finished artifacts (index, candidates) left untouched."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from pgra.cli import main


def _snapshot(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in folders for p in sorted(d.rglob("*")) if p.is_file()}


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


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
    ("data without manifest", lambda w: ["rerank", "--candidates", str(w["tmp"]), "--out", str(w["tmp"] / "o")],
     "manifest.json"),
    ("truncated candidates", lambda w: ["train", "--data", str(_copy_truncated(w)), "--out", str(w["tmp"] / "o"),
                                        "--max-steps", "1"], "train.jsonl"),
    ("truncated index", lambda w: ["search", "--index", str(_copy_index_truncated(w)), "--query", "sun"], "bm25/"),
    ("index of other settings", lambda w: ["build-index", "--corpus", str(w["corpus"]), "--out", str(w["index"]),
                                           "--retriever", "bm25", "bm25.k1=1.2"], lambda w: str(w["index"])),
]


@pytest.fixture()
def world(tmp_path, corpus_txt, sky_task, candidates) -> dict:
    return {"tmp": tmp_path, "corpus": corpus_txt, "task": sky_task, "cands": candidates,
            "index": tmp_path / "bm25"}


def test_the_matrix_has_thirty_kinds():
    assert len({name for name, _, _ in CASES}) == len(CASES) >= 30


@pytest.mark.parametrize(("name", "argv", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line_and_touches_nothing(name, argv, expected, world, capsys):
    before = _snapshot(world["index"], world["cands"])
    capsys.readouterr()
    args = argv(world)
    expected = expected if not callable(expected) else expected(world)
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
    assert _snapshot(world["index"], world["cands"]) == before, name
