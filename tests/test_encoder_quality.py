# numerics: recall and kNN accuracy are counts over planted groups, divided
"""Encoders judged by what they retrieve (pgra eval-encoder, train-simcse's retrieval_eval): same-group recall@k
and kNN accuracy against brute force, planted groups, bad input."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pgra.core.errors import InputError
from pgra.simcse.quality import (
    EvalEncoderConfig,
    RetrievalEvalConfig,
    compare_encoders,
    group_recall,
    knn_accuracy,
    read_groups,
)
from tests.conftest import SENTENCES


def _brute_recall(vecs, rows, groups, k):
    hits = 0
    for r in rows:
        sims = [(float(vecs[r] @ vecs[j]), j) for j in range(len(vecs)) if j != r]
        top = [j for _, j in sorted(sims, key=lambda x: -x[0])[:k]]
        hits += any(groups[j] is not None and groups[j] == groups[r] for j in top)
    return hits / len(rows)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_group_recall_matches_brute_force_on_planted_groups(chunk):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(6, 16))
    groups = [f"g{i % 6}" for i in range(30)] + [None] * 20  # 6 planted groups of 5, 20 distractors
    vecs = np.concatenate([centres[[i % 6 for i in range(30)]] + 0.9 * rng.normal(size=(30, 16)),
                           rng.normal(size=(20, 16))])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = [0, 3, 8, 13, 21, 29]
    got = group_recall(vecs[rows], rows, vecs, groups, [1, 3, 10], chunk=chunk)
    assert got == {f"recall@{k}": pytest.approx(_brute_recall(vecs, rows, groups, k)) for k in (1, 3, 10)}
    # identical vectors within a group: every query finds its group first
    tight = np.concatenate([centres[[i % 6 for i in range(30)]], rng.normal(size=(20, 16))])
    tight /= np.linalg.norm(tight, axis=1, keepdims=True)
    assert group_recall(tight[rows], rows, tight, groups, [1], chunk=chunk) == {"recall@1": 1.0}


def test_knn_accuracy_by_hand():
    task = SimpleNamespace(labels=["a", "b"])
    train = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    train /= np.linalg.norm(train, axis=1, keepdims=True)
    dev = np.array([[1.0, 0.0], [0.0, 1.0], [0.7, 0.7]])
    dev /= np.linalg.norm(dev, axis=1, keepdims=True)
    # k=1: dev 0's nearest, train 0, has its text, so train 1 (a) votes: right; dev 1 -> train 2 (b): right;
    # dev 2 is as near train 1 (a) as train 3 (b): the first in training order (a) votes: wrong
    acc = knn_accuracy(train, ["a", "a", "b", "b"], ["x", "y", "z", "w"], dev, ["a", "b", "b"], ["x", "q", "r"], 1,
                       task)
    assert acc == pytest.approx(2 / 3)
    # k=3 for dev 1: b, b, then a -> b
    assert knn_accuracy(train, ["a", "a", "b", "b"], list("xyzw"), dev[1:2], ["b"], ["q"], 3, task) == 1.0


def test_groups_file_errors_name_file_line_and_field(tmp_path):
    good = tmp_path / "g.jsonl"
    good.write_text('{"text": "A.", "article": "x"}\n{"text": "B.", "article": "x"}\n')
    assert read_groups([str(good)], "text", "article") == (["A.", "B."], ["x", "x"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "A.", "article": "x"}\n{"text": "B."}\n')
    with pytest.raises(InputError, match="line 2") as e:
        read_groups([str(bad)], "text", "article")
    assert e.value.field == "article" and "bad.jsonl" in str(e.value)
    with pytest.raises(InputError, match="nothing to measure"):
        compare_encoders(EvalEncoderConfig(encoders=["x"]))


def test_eval_encoder_on_a_tiny_encoder_equals_brute_force(tmp_path, tiny_bert, sky_task):
    from pgra.cli import main
    from pgra.retrieval.encoder import DenseEncoder

    groups = tmp_path / "groups.jsonl"
    lines = [{"text": s, "article": f"a{i // 3}"} for i, s in enumerate(SENTENCES[:12])]
    groups.write_text("".join(json.dumps(x) + "\n" for x in lines))
    distractors = tmp_path / "d.txt"
    distractors.write_text("\n".join(SENTENCES[12:]) + "\n")
    out = tmp_path.parent / f"{tmp_path.name}-q.json"  # outside every input (data_dir is tmp_path)
    cfg = {"encoders": [str(tiny_bert)], "poolers": ["mean", "cls_before_pooler"], "out": str(out),
           "eval": {"groups": [str(groups)], "distractors": str(distractors), "queries": 5, "k": [1, 4],
                    "task": str(sky_task), "data_dir": str(tmp_path), "knn_k": 3, "max_length": 32}}
    path = tmp_path / "eval.yaml"
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    assert main(["eval-encoder", "--config", str(path)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["pooler"] for r in rows] == ["mean", "cls_before_pooler"]
    texts = SENTENCES[:12] + SENTENCES[12:]
    group_of = [f"a{i // 3}" for i in range(12)] + [None] * len(SENTENCES[12:])
    from pgra.simcse.quality import read_inputs

    rows_q = read_inputs(RetrievalEvalConfig(**{**cfg["eval"]})).query_rows
    assert len(rows_q) == 5 and rows[0]["search_space"] == len(texts)
    for r in rows:
        vecs = DenseEncoder(str(tiny_bert), pooler=r["pooler"], max_length=32).encode(texts)
        assert r["recall@1"] == pytest.approx(_brute_recall(vecs, rows_q, group_of, 1))
        assert r["recall@4"] == pytest.approx(_brute_recall(vecs, rows_q, group_of, 4))
        assert 0 <= r["knn_accuracy"] <= 1 and r["dev_inputs"] > 0


def test_train_simcse_measures_retrieval_before_and_after(tmp_path, tiny_bert):
    from pgra.simcse.config import SimCSEConfig
    from pgra.simcse.train import train_simcse

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES + [f"{s} {i}" for i, s in enumerate(SENTENCES)]) + "\n")
    groups = tmp_path / "groups.jsonl"
    groups.write_text("".join(json.dumps({"text": s, "article": f"a{i // 2}"}) + "\n" for i, s in
                              enumerate(SENTENCES[:10])))
    out = tmp_path / "simcse"
    metrics = train_simcse(SimCSEConfig(corpus=str(corpus), encoder=str(tiny_bert), out=str(out), batch_size=8,
                                        heldout=8, max_steps=3, show_progress=False,
                                        retrieval_eval=RetrievalEvalConfig(groups=[str(groups)], queries=10, k=[1, 3])))
    r = metrics["retrieval"]
    assert [x["pooler"] for x in r["before"]] == [x["pooler"] for x in r["after"]] == ["cls_before_pooler", "mean"]
    assert r["before"][0]["encoder"] == str(tiny_bert) and r["after"][0]["encoder"] == str(out)
    assert r["before"][0]["queries"] == 10 and set(r["after"][1]) >= {"recall@1", "recall@3"}
    assert json.loads((Path(out) / "metrics.json").read_text())["retrieval"] == r
