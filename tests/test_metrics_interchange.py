# numerics: metrics of hand-made labels and their mean and deviation, in Python floats
import json
import time

import pytest

from pgra.core.errors import InputError, PgraError
from pgra.data.interchange import example_record, read_records, write_records
from pgra.results.metrics import compute_metric, mean_std
from pgra.tasks import Example


def test_metrics():
    gold = ["1", "1", "0", "0", "1"]
    pred = ["1", "0", "0", "1", "1"]
    assert compute_metric("accuracy", gold, pred) == pytest.approx(0.6)
    # MCC by hand: tp=2 tn=1 fp=1 fn=1 -> (2*1 - 1*1) / sqrt(3*3*2*2) = 1/6
    assert compute_metric("mcc", gold, pred) == pytest.approx(1 / 6)
    # macro-F1: F1(1) = 2/3, F1(0) = 1/2
    assert compute_metric("macro_f1", gold, pred) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert compute_metric("mcc", ["0", "1"], ["1", "1"]) == 0.0
    with pytest.raises(ValueError, match="2 gold labels but 1"):
        compute_metric("accuracy", ["0", "1"], ["0"])
    m, s = mean_std([0.8, 0.9, 1.0])
    assert m == pytest.approx(0.9) and s == pytest.approx(0.1)
    assert mean_std([0.5]) == (0.5, 0.0)


def test_interchange_roundtrip_and_validation(tmp_path):
    path = tmp_path / "q.jsonl"
    recs = [example_record(Example("a", "text a", "1"), [{"id": 3, "text": "ev", "score": 0.5}]),
            example_record(Example("b", "text b"))]
    assert write_records(path, recs) == 2
    assert list(read_records(path, labels=["0", "1"])) == recs
    assert "label" not in recs[1] and "ctxs" not in recs[1]
    path.write_text(json.dumps({"id": "a", "text": "x", "label": "7"}) + "\n")
    with pytest.raises(InputError, match=r"q\.jsonl:1 \(field 'label'\): unknown label '7'"):
        list(read_records(path, labels=["0", "1"]))
    path.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    with pytest.raises(InputError, match=r"q\.jsonl:2 \(field 'id'\): duplicate"):
        list(read_records(path))
    path.write_text('{"id": "a", "text": "x", "ctxs": [{"score": 1}]}\n')
    with pytest.raises(InputError, match=r"field 'ctxs'"):
        list(read_records(path))


def test_download_fails_fast_offline(tmp_path, monkeypatch):
    from pgra.data.download import download

    monkeypatch.setenv("PGRA_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(PgraError, match=r"offline\?.*original/SST-2/train\.tsv"):
        download(["lmbff"], tmp_path)
    with pytest.raises(PgraError, match=r"wiki1m_for_simcse\.txt"):
        download(["wiki1m"], tmp_path)
    assert time.monotonic() - start < 5
    assert not any(tmp_path.iterdir())
    (tmp_path / "wiki1m_for_simcse.txt").write_text("x\n")
    assert download(["wiki1m"], tmp_path) == [tmp_path / "wiki1m_for_simcse.txt"]  # present: no network needed
