"""Bad-input matrix cases of reliability round 4 (issue 53), fid surfaces: (name, argv builder, expected text of the
one `error:` line), appended to tests/test_bad_input_matrix.py's CASES. Builders write under ``w["tmp"]`` only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = []

GOOD = '{"question": "x", "answers": ["sky"]}'


def _import(w: dict, train: str, dev: str = f"[{GOOD}]") -> list[str]:
    """`pgra fid import` of ``train`` (FiD JSON text) and ``dev`` into a new ``--out``."""
    (w["tmp"] / "train.json").write_text(train, encoding="utf-8")
    (w["tmp"] / "dev.json").write_text(dev, encoding="utf-8")
    return ["fid", "import", "--task", str(w["task"]), "--train", str(w["tmp"] / "train.json"), "--dev",
            str(w["tmp"] / "dev.json"), "--out", str(w["tmp"] / "o")]


def imported(w: dict, edit: Callable[[str, list[dict]], None] | None = None) -> Path:
    """The matrix's candidates through `fid export` and `fid import` (no index in their manifest); ``edit(split,
    items)`` changes the FiD items before the import."""
    from pgra.cli import main

    fid, out = w["tmp"] / "fid", w["tmp"] / "imported"
    assert main(["fid", "export", "--data", str(w["cands"]), "--out", str(fid)]) == 0
    for split in ("train", "dev", "test"):
        items = json.loads((fid / f"{split}.json").read_text())
        if edit is not None:
            edit(split, items)
        (fid / f"{split}.json").write_text(json.dumps(items))
    assert main(["fid", "import", "--task", str(w["task"]), "--out", str(out),
                 *(x for s in ("train", "dev", "test") for x in (f"--{s}", str(fid / f"{s}.json")))]) == 0
    return out


def _rerank(cands: Path, w: dict, reranker: str, *extra: str) -> list[str]:
    return ["rerank", "--candidates", str(cands), "--out", str(w["tmp"] / "o"), "--reranker", reranker, "top_d=2",
            *extra]


def _retexted(w: dict) -> Path:
    """Imported candidates with one evidence id's text changed wherever it is carried: no longer the text the
    corpus holds for that id."""
    chosen: list[Any] = []

    def edit(split: str, items: list[dict]) -> None:
        if not chosen:
            chosen.append(items[0]["ctxs"][0]["id"])
        for ctx in (c for item in items for c in item["ctxs"] if c["id"] == chosen[0]):
            ctx["text"] = "A sentence of another corpus."

    return imported(w, edit)


def _two_texts(split: str, items: list[dict]) -> None:
    """Two passages of one id with different texts."""
    if split == "test":
        items[1]["ctxs"][1] = {**items[1]["ctxs"][1], "id": items[0]["ctxs"][0]["id"], "text": "Another text."}


def _run_folder(w: dict) -> list[str]:
    from pgra.storage.ownership import claim_folder

    run = w["tmp"] / "run"
    claim_folder(run, "reader")
    (run / "train_log.jsonl").write_text("{}\n")
    return ["fid", "export", "--data", str(w["cands"]), "--out", str(run)]


CASES += [
    # fid export claims its folder: another artifact's manifest, or a folder pgra made for another stage
    ("fid export --out an index", lambda w: ["fid", "export", "--data", str(w["cands"]), "--out", str(w["index"])],
     "holds a 'index' artifact"),
    ("fid export --out a reader's folder", _run_folder, "is pgra's 'reader' folder"),
    # what a FiD file may hold: read as pgra's parse_json reads, scores finite, every item answered
    ("fid import: a 5,000-digit id",
     lambda w: _import(w, '[{"id": ' + "9" * 5000 + ', "question": "x", "answers": ["sky"]}]'),
     "train.json: invalid JSON (Exceeds the limit"),
    ("fid import: nested too deeply", lambda w: _import(w, "[" * 50_000 + "]" * 50_000), "nested too deeply"),
    ("fid import: a NaN score",
     lambda w: _import(w, '[{"question": "x", "answers": ["sky"], "ctxs": [{"text": "a", "score": NaN}]}]'),
     "train.json:1 (field 'ctxs'): ctxs[0].score must be a finite number"),
    ("fid import: an Infinity score as a string",
     lambda w: _import(w, '[{"question": "x", "answers": ["sky"], "ctxs": [{"text": "a", "score": "inf"}]}]'),
     "ctxs[0].score must be a finite number"),
    ("fid import: an example without an answer", lambda w: _import(w, f'[{GOOD}, {{"question": "y"}}]'),
     "train.json:2 (field 'answers'): the example has no answer"),
    ("fid import: a dev example without an answer", lambda w: _import(w, f"[{GOOD}]", '[{"question": "y"}]'),
     "dev.json:1 (field 'answers')"),
    # imported candidates rerank by their own texts; mmr needs an index, --index must be their corpus
    ("rerank mmr on imported candidates", lambda w: _rerank(imported(w), w, "mmr"), "pass --index"),
    ("rerank imported candidates --index of another corpus",
     lambda w: _rerank(_retexted(w), w, "random", "--index", str(w["index"])),
     "has another text in the corpus of index"),
    ("rerank imported candidates: one id, two texts", lambda w: _rerank(imported(w, _two_texts), w, "random"),
     "test.jsonl:2 (field 'ctxs'): ctxs[1] (id"),
]
