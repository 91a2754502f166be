"""FiD's and the PGRA paper's JSON format: read and written beside pgra's JSONL; `pgra fid import` gives a
folder `pgra train` reads, `pgra fid export` writes a folder's splits back."""

from __future__ import annotations

import json

import pytest
import yaml

from pgra.cli import main
from pgra.core.errors import InputError
from pgra.data.interchange import read_fid, read_records, write_fid
from pgra.storage.ownership import claim_folder
from tests import numerics
from tests.conftest import TASK, _records, one_error_line

WORDS = {w: lab for lab, w in TASK.reader_words.items()}  # sun -> sky, city -> town


def test_round_trip_through_fid_json(tmp_path):
    recs = _records(6)
    recs[0]["ctxs"][1]["title"] = "Sky"  # a passage title survives
    recs[1].pop("label")                 # and an unlabelled input
    path = tmp_path / "dev.json"
    assert write_fid(path, recs, TASK.reader_words) == 6
    items = json.loads(path.read_text())
    assert items[0]["question"] == recs[0]["text"] and items[0]["answers"] == ["sun"] and items[0]["target"] == "sun"
    assert items[0]["ctxs"][1] == {"id": 1, "title": "Sky", "text": recs[0]["ctxs"][1]["text"], "score": 0.1}
    assert "answers" not in items[1]
    assert read_fid(path, TASK.labels, WORDS) == recs


def _fid_items(n: int, style: str) -> list[dict]:
    """Examples as FiD's own files hold them (``answers``, string scores, no ids) or as the paper's code writes
    its targets (``target`` with T5 sentinels)."""
    items = []
    for r in _records(n):
        word = TASK.reader_words[r["label"]]
        item = {"question": r["text"],
                "ctxs": [{"title": "", "text": c["text"], "score": str(c["score"]), **({"id": str(c["id"])})}
                         for c in r["ctxs"]]}
        if style == "fid":
            item["answers"] = [word]
        else:
            item["target"] = f"<extra_id_0> {word} <extra_id_1>"
        items.append(item)
    return items


def test_import_feeds_pgra_train_and_exports_back(tmp_path, sky_task, tiny_t5):
    spec = yaml.safe_load(sky_task.read_text())
    sky_task.write_text(yaml.safe_dump({**spec, "reader_words": TASK.reader_words}))  # answers as sun / city
    for split, n, style in (("train", 8, "fid"), ("dev", 4, "paper"), ("test", 4, "fid")):
        (tmp_path / f"{split}.json").write_text(json.dumps(_fid_items(n, style)))
    data = tmp_path / "imported"
    assert main(["fid", "import", "--task", str(sky_task), "--out", str(data),
                 *(x for s in ("train", "dev", "test") for x in (f"--{s}", str(tmp_path / f"{s}.json")))]) == 0
    train = list(read_records(data / "train.jsonl"))
    assert [r["label"] for r in train] == [r["label"] for r in _records(8)] and train[0]["id"] == 0
    assert train[0]["ctxs"][0] == {"id": "0", "text": _records(1)[0]["ctxs"][0]["text"], "score": 0.1}
    assert [r["label"] for r in read_records(data / "dev.jsonl")] == ["sky", "town"] * 2
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["kind"] == "candidates" and manifest["index"] is None and manifest["task"]["name"] == "sky"

    run = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(run), "--model", str(tiny_t5), "max_steps=2",
                 "batch_size=4", "eval_every=1", "n_passages=2", "show_progress=false"]) == 0
    assert json.loads((run / "metrics.json").read_text())["results"]["test"]["examples"] == 4

    back = tmp_path / "back"
    assert main(["fid", "export", "--data", str(data), "--out", str(back)]) == 0
    assert sorted(p.name for p in back.glob("[a-z]*.json")) == ["dev.json", "manifest.json", "test.json", "train.json"]
    assert read_fid(back / "train.json", TASK.labels, WORDS) == train
    assert json.loads((back / "dev.json").read_text())[1]["answers"] == ["city"]


@pytest.mark.parametrize("content, where", [
    ({"question": "x"}, "a FiD file is a JSON array"),
    ([{"answers": ["sky"]}], ":1 (field 'question')"),
    ([{"question": "x", "answers": ["sky"]}, {"question": "y", "answers": ["ocean"]}], ":2 (field 'answers')"),
    ([{"question": "x", "target": "sky", "ctxs": [{"text": "a", "score": "high"}]}], ":1 (field 'ctxs')"),
    ([{"question": " ", "target": "sky"}], ":1 (field 'text')"),
])
def test_bad_fid_files_are_one_error_line(tmp_path, sky_task, capsys, content, where):
    bad = tmp_path / "train.json"
    bad.write_text(json.dumps(content))
    (tmp_path / "dev.json").write_text(json.dumps(_fid_items(2, "fid")))
    line = one_error_line(["fid", "import", "--task", str(sky_task), "--train", str(bad), "--dev",
                           str(tmp_path / "dev.json"), "--out", str(tmp_path / "out")], capsys)
    assert str(bad) in line and where in line
    assert not (tmp_path / "out").exists()  # nothing written


# ---------------------------------------------------------------- issue 53: what a FiD file may hold

def _bad_import(tmp_path, sky_task, capsys, train: str | bytes, dev: str | None = None, test: str | None = None):
    """`pgra fid import` of a train file (raw JSON text) beside good splits: its one error line (nothing written)."""
    files = {"train": train, "dev": dev if dev is not None else f"[{GOOD}]", "test": test}
    args = []
    for split, content in files.items():
        if content is not None:
            path = tmp_path / f"{split}.json"
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
            args += [f"--{split}", str(path)]
    line = one_error_line(["fid", "import", "--task", str(sky_task), "--out", str(tmp_path / "out"), *args], capsys)
    assert not (tmp_path / "out").exists()  # nothing written
    return line


GOOD = '{"question": "x", "answers": ["sky"]}'


@pytest.mark.parametrize("content, where", [
    ('[{"id": ' + "9" * 5000 + ', "question": "x", "answers": ["sky"]}]', "train.json: invalid JSON (Exceeds the limit"),
    ("[" * 100_000 + "]" * 100_000, "train.json: invalid JSON (nested too deeply)"),
    ('[{"question": "x", "answers": ["sky"], "ctxs": ' + "[" * 5000 + "]" * 5000 + "}]", "nested too deeply"),
    ('[{"question": "x", "answers": ["sky"], "ctxs": [{"text": "a", "score": NaN}]}]',
     "train.json:1 (field 'ctxs'): ctxs[0].score must be a finite number, not nan"),
    (f'[{GOOD}, {{"question": "y", "answers": ["sky"], "ctxs": [{{"text": "a", "score": -Infinity}}]}}]',
     "train.json:2 (field 'ctxs'): ctxs[0].score must be a finite number, not -inf"),
    ('[{"question": "x", "answers": ["sky"], "ctxs": [{"text": "a", "score": "nan"}]}]', "must be a finite number"),
    ('[{"question": "x", "answers": ["sky"], "ctxs": [{"text": "a", "score": "1e999"}]}]', "must be a finite number"),
    ('[{"question": "x", "answers": ["sky"], "ctxs": [{"text": "a", "score": 1' + "0" * 400 + "}]}]",
     "must be a finite number"),
    ('[{"question": "x", "answers": ["sky"], "ctxs": [{"text": "a", "title": ["T"]}]}]', "ctxs[0].title must be a string"),
    (f'[{GOOD}, {{"question": "y"}}]', "train.json:2 (field 'answers'): the example has no answer"),
    (f'[{GOOD}, {{"question": "y", "answers": [], "target": null}}]', "train.json:2 (field 'answers')"),
])
def test_unreadable_fid_files_are_one_error_line(tmp_path, sky_task, capsys, content, where):
    line = _bad_import(tmp_path, sky_task, capsys, content)
    assert where in line, line
    with pytest.raises(InputError):  # the Python API: pgra's own error, not a ValueError or a RecursionError
        read_fid(tmp_path / "train.json", ["sky", "town"], {"sun": "sky"}, require_labels=True)


@pytest.mark.parametrize("split", ["dev", "test"])
def test_an_example_without_an_answer_is_refused_in_every_split(tmp_path, sky_task, capsys, split):
    """`pgra train` learns from train and scores dev and test (it failed with KeyError: 'label' after training):
    every imported split is labelled, as the task loaders require."""
    items = [{"question": f"q{i}", "answers": ["sky"]} for i in range(3)]
    del items[2]["answers"]
    line = _bad_import(tmp_path, sky_task, capsys, f"[{GOOD}]", **{split: json.dumps(items)})
    assert f"{split}.json:3 (field 'answers'): the example has no answer" in line


def test_read_fid_reads_unlabelled_items_unless_labels_are_required(tmp_path):
    path = tmp_path / "test.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"question": "x"}]).encode())  # a byte order mark is dropped
    assert read_fid(path) == [{"id": 0, "text": "x"}]
    with pytest.raises(InputError, match=r"test\.json:1 \(field 'answers'\): the example has no answer"):
        read_fid(path, require_labels=True)


def test_nan_scores_in_interchange_files_are_refused(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text('{"id": 0, "text": "a", "ctxs": [{"id": 1, "text": "e", "score": Infinity}]}\n')
    with pytest.raises(InputError, match=r"test\.jsonl:1 \(field 'ctxs'\): ctxs\[0\]\.score must be a finite"):
        list(read_records(path))


# ---------------------------------------------------------------- issue 53: fid export claims its folder

def _snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_fid_export_never_replaces_another_pgra_artifact(candidates, tmp_path, capsys):
    """`fid export --out` into an index or a reranked folder replaced its manifest.json (exit 0): refused now,
    nothing touched; its own folder is exported into again."""
    index = tmp_path / "bm25"
    reranked = tmp_path / "reranked"
    assert main(["rerank", "--candidates", str(candidates), "--out", str(reranked), "--reranker", "random",
                 "top_d=2"]) == 0
    for folder, kind in ((index, "index"), (reranked, "reranked"), (candidates, "candidates")):
        before = _snapshot(folder)
        line = one_error_line(["fid", "export", "--data", str(candidates if folder != candidates else reranked),
                               "--out", str(folder)], capsys)
        assert f"holds a '{kind}' artifact" in line and "field 'out'" in line
        assert _snapshot(folder) == before
    assert main(["build-index", "--corpus", str(tmp_path / "corpus.txt"), "--out", str(index),
                 "--retriever", "bm25"]) == 0  # the index is whole and up to date
    out = tmp_path / "fid"
    for _ in range(2):  # its own folder: written again
        assert main(["fid", "export", "--data", str(candidates), "--out", str(out)]) == 0
    assert json.loads((out / "manifest.json").read_text())["kind"] == "fid-export"


def test_fid_export_refuses_a_folder_pgra_made_for_another_stage(candidates, tmp_path, capsys):
    """A folder pgra made for another stage (its record, no manifest yet: a run under way) is not export's."""
    run = tmp_path / "run"
    claim_folder(run, "reader")
    (run / "train_log.jsonl").write_text("{}\n")
    before = _snapshot(run)
    line = one_error_line(["fid", "export", "--data", str(candidates), "--out", str(run)], capsys)
    assert "is pgra's 'reader' folder" in line and "nothing was changed" in line
    assert _snapshot(run) == before


# ---------------------------------------------------------------- issue 53: imported candidates rerank

def import_candidates(candidates, tmp_path, sky_task, edit=None):
    """``candidates`` through `fid export` and `fid import` (``edit(split, items)`` changes the FiD items first):
    a candidates folder with no first-stage index in its manifest."""
    fid = tmp_path / "fid"
    if not fid.exists():
        assert main(["fid", "export", "--data", str(candidates), "--out", str(fid)]) == 0
    if edit is not None:
        for split in ("train", "dev", "test"):
            items = json.loads((fid / f"{split}.json").read_text())
            edit(split, items)
            (fid / f"{split}.json").write_text(json.dumps(items))
    out = tmp_path / "imported"
    assert main(["fid", "import", "--task", str(sky_task), "--out", str(out),
                 *(x for s in ("train", "dev", "test") for x in (f"--{s}", str(fid / f"{s}.json")))]) == 0
    assert json.loads((out / "manifest.json").read_text())["index"] is None
    return out


@pytest.mark.parametrize("reranker", ["prompt_guided", "random"])
def test_imported_candidates_rerank_like_retrieved_ones(candidates, tmp_path, sky_task, tiny_opt, reranker):
    """Every reranker failed on imported candidates (TypeError: 'NoneType' object is not subscriptable), with or
    without --index: they rerank by the texts they carry, or by the corpus of --index they are checked against,
    and pick what the same reranker picks from the retrieved candidates."""
    imported = import_candidates(candidates, tmp_path, sky_task)

    def run(cands, out, *extra):
        assert main(["rerank", "--candidates", str(cands), "--out", str(tmp_path / out), "--reranker", reranker,
                     "k=6", "top_d=3", f"lm={tiny_opt}", f"cache_dir={tmp_path / 'cache'}", "show_progress=false",
                     *extra]) == 0
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        return manifest, {s: list(read_records(tmp_path / out / f"{s}.jsonl")) for s in ("dev", "test")}

    _, want = run(candidates, "retrieved")
    own, got = run(imported, "own-texts")
    assert own["candidates"]["index"]["path"] is None and own["k"] == 6
    indexed, got_indexed = run(imported, "with-index", "--index", str(tmp_path / "bm25"))
    assert indexed["candidates"]["index"]["path"] == str((tmp_path / "bm25").resolve())
    for split, recs in want.items():
        for a, b, c in zip(recs, got[split], got_indexed[split], strict=True):
            ids = [x["id"] for x in a["ctxs"]]
            assert [x["id"] for x in b["ctxs"]] == ids == [x["id"] for x in c["ctxs"]]
            assert [x["score"] for x in b["ctxs"]] == numerics.close([x["score"] for x in a["ctxs"]], depth=numerics.TINY_MODEL, scale=1)
            assert [x["score"] for x in c["ctxs"]] == [x["score"] for x in a["ctxs"]]  # the index's cache rows
            assert b.get("demonstrations") == a.get("demonstrations")
