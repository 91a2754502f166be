"""FiD's and the PGRA paper's JSON format: read and written beside pgra's JSONL; `pgra fid import` gives a
folder `pgra train` reads, `pgra fid export` writes a folder's splits back."""

from __future__ import annotations

import json

import pytest
import yaml

from pgra.cli import main
from pgra.interchange import read_fid, read_records, write_fid
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
