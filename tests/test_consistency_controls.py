# numerics: shares are ratios of counts and the bootstrap is numpy arithmetic on them (no model, no kernel choice)
"""Label consistency as a measured quantity: the reranker's top d against the first stage's, a random d of the top
k (the floor) and the oracle (the ceiling), each with a (clustered) bootstrap interval over the inputs."""

from __future__ import annotations

import numpy as np
import pytest

from pgra.analysis.consistency import control_counts
from pgra.evaluation.significance import input_weights, share_bootstrap


def _inputs(n: int, k: int, seed: int) -> tuple[list[dict], list[set[str]]]:
    """``n`` inputs of ``k`` candidates each; about 40% of the candidates are label-consistent."""
    rng = np.random.default_rng(seed)
    first, consistent = [], []
    for i in range(n):
        ids = [f"{i}-{j}" for j in range(k)]
        first.append({"id": str(i), "ctxs": [{"id": c} for c in ids]})
        consistent.append({c for c in ids if rng.random() < 0.4})
    return first, consistent


def _ranking(rec: dict, order: list[int]) -> list[dict]:
    return [{"id": rec["ctxs"][j]["id"], "retrieval_rank": j + 1} for j in order]


def test_an_oracle_reranker_reaches_the_ceiling_and_a_random_one_sits_at_the_floor():
    k, d = 16, 4
    first, consistent = _inputs(600, k, seed=1)
    rng = np.random.default_rng(2)
    oracle = [_ranking(r, sorted(range(k), key=lambda j: (r["ctxs"][j]["id"] not in ok, j)))
              for r, ok in zip(first, consistent, strict=True)]
    shuffled = [_ranking(r, list(rng.permutation(k))) for r in first]
    counts = control_counts(first, [oracle, shuffled], consistent, k, d)
    weights = input_weights(1000, len(first), seed=0)
    ceiling = share_bootstrap(counts["oracle"], counts["kept"], weights)
    floor = share_bootstrap(counts["random"], counts["kept"], weights)
    assert (counts["reranker0"] == counts["oracle"]).all()  # exact: counts
    assert share_bootstrap(counts["reranker0"], counts["kept"], weights).delta == ceiling.delta
    # a random reranker: the floor (its expectation, no draw noise: a narrower interval) lies within its interval,
    # and its paired difference from the floor is not significant; the oracle's is far above it
    rand = share_bootstrap(counts["reranker1"], counts["kept"], weights)
    assert rand.ci_low <= floor.delta <= rand.ci_high
    assert floor.ci_high - floor.ci_low < rand.ci_high - rand.ci_low
    assert floor.delta < ceiling.delta
    over = share_bootstrap(counts["reranker1"] - counts["random"], counts["kept"], weights)
    assert over.ci_low <= 0 <= over.ci_high and over.p_value > 0.05
    assert share_bootstrap(counts["reranker0"] - counts["random"], counts["kept"], weights).p_value < 0.01


def test_counts_by_hand():
    """Two inputs, k=4 of 5 candidates, d=2. Input 0: consistent c1, c3 (and c4, beyond k); input 1: c2 only."""
    first = [{"id": "0", "ctxs": [{"id": f"a{j}"} for j in range(5)]},
             {"id": "1", "ctxs": [{"id": f"b{j}"} for j in range(5)]}]
    consistent = [{"a1", "a3", "a4"}, {"b2"}]
    # the reranker ranks a4 (beyond k: dropped), a3, a0 ... and b2, b1 ...
    ranked = [[{"id": "a4", "retrieval_rank": 5}, {"id": "a3", "retrieval_rank": 4}, {"id": "a0", "retrieval_rank": 1}],
              [{"id": "b2", "retrieval_rank": 3}, {"id": "b1", "retrieval_rank": 2}]]
    c = control_counts(first, [ranked], consistent, 4, 2)
    assert c["kept"].tolist() == [2, 2]
    assert c["first"].tolist() == [1, 0]  # a0 a1 | b0 b1
    assert c["random"].tolist() == [2 * 2 / 4, 2 * 1 / 4]  # d x consistent among the first k / k
    assert c["oracle"].tolist() == [2, 1]
    assert c["full"].tolist() == [1, 0]  # input 0's first 4 hold 2 consistent sentences, input 1's one
    assert c["reranker0"].tolist() == [1, 1]  # a3 a0 | b2 b1
    # k=1 < d: one sentence kept
    c1 = control_counts(first, [ranked], consistent, 1, 2)
    assert c1["kept"].tolist() == [1, 1] and c1["oracle"].tolist() == [0, 0] and c1["reranker0"].tolist() == [0, 0]


def test_intervals_hold_the_point_and_shrink_with_more_inputs():
    widths = []
    for n in (50, 800):
        first, consistent = _inputs(n, 16, seed=3)
        counts = control_counts(first, [], consistent, 16, 4)
        res = share_bootstrap(counts["first"], counts["kept"], input_weights(1000, n, seed=0))
        assert res.ci_low <= res.delta <= res.ci_high
        widths.append(res.ci_high - res.ci_low)
    assert widths[1] < widths[0] / 2  # 16x the inputs: about a quarter of the width


def test_the_clustered_bootstrap_resamples_whole_clusters():
    clusters = ["art1", "art1", "art2", "art3", "art2"]
    w = input_weights(7, 5, seed=4, clusters=clusters)
    # by hand: the 3 articles (in order of first appearance) drawn with replacement, each input weighs its article's
    draws = np.random.default_rng(4).integers(3, size=(7, 3))
    per_article = np.stack([(draws == g).sum(1) for g in range(3)], axis=1)
    assert (w == per_article[:, [0, 0, 1, 2, 1]]).all()  # exact: counts
    assert (w.sum(1) == [2 * a + 2 * b + c for a, b, c in per_article]).all()
    # without clusters: the inputs' own draw (paired_bootstrap's)
    plain = np.random.default_rng(4).integers(5, size=(7, 5))
    assert (input_weights(7, 5, seed=4) == np.stack([(plain == i).sum(1) for i in range(5)], axis=1)).all()
    # a share over clustered inputs: every replicate is the share of a union of whole articles
    numer, denom = np.array([1.0, 0.0, 2.0, 1.0, 0.0]), np.full(5, 2.0)
    res = share_bootstrap(numer, denom, w)
    assert res.delta == 4 / 10
    assert res.replicates.tolist() == pytest.approx(((w @ numer) / (w @ denom)).tolist(), nan_ok=True)
    with pytest.raises(ValueError, match="cluster values"):
        input_weights(3, 4, clusters=["a"])


def _lines(path) -> list[dict]:
    import json

    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_labelled_pool_and_the_controls_table_end_to_end(tmp_path, sky_task, tiny_opt, tiny_t5, capsys):
    """`pgra tasks pool` writes the task's training inputs as a plain corpus and their labels beside it; a grid
    retrieves from it like any corpus; `pgra analyze` scores consistency with the true labels (no no-retrieval
    reader) and writes the controls table, every number of which is recounted here from the files."""
    import json

    import yaml

    from pgra.analysis.consistency import FIRST_STAGE
    from pgra.cli import main
    from pgra.core.config import from_dict
    from pgra.experiment import Experiment, ExperimentConfig
    from tests.test_experiment import _config

    pool = tmp_path / "pool"
    assert main(["tasks", "pool", str(sky_task), "--out", str(pool)]) == 0
    corpus, sidecar = pool / "corpus.txt", pool / "corpus.labels.json"
    train = {r["text"]: r["label"] for r in _lines(tmp_path / "skydata" / "train.jsonl")}
    lines = corpus.read_text().splitlines()
    labels = json.loads(sidecar.read_text())["labels"]
    assert set(lines) <= set(train) and len(lines) == len(labels) >= 10  # train less the carved dev inputs
    assert not any(label in corpus.read_text() for label in ("sky\n", "town\n"))  # texts only
    assert labels == [train[t] for t in lines]
    # the test inputs come from two sources (a column of the data the loader ignores)
    test_file = tmp_path / "skydata" / "test.jsonl"
    test_file.write_text("".join(json.dumps({**r, "article": r["id"][0]}) + "\n" for r in _lines(test_file)))

    cfg = _config(tmp_path, corpus, sky_task, tiny_opt, tiny_t5, methods=["fid", "pgra"], seeds=[1])
    cfg["rerank"]["k"] = 4
    cfg["reader"]["n_passages"] = cfg["rerank"]["top_d"] = 2
    assert not Experiment(from_dict(ExperimentConfig, cfg)).run()
    cfg_file = tmp_path / "exp.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))
    args = ["analyze", "--config", str(cfg_file), "analysis.analyses=consistency", "analysis.consistency.k=2,4,8",
            "analysis.consistency.d=1,2", "analysis.consistency.group_field=article",
            f"analysis.consistency.rerank_lms=[{tiny_opt}]", "analysis.consistency.resamples=200"]
    assert main([*args, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"sky/rank the first 8 candidates of test with {tiny_opt.name}" in printed
    assert not (tmp_path / "exp" / "analysis").exists()
    assert main(args) == 0
    analysis = tmp_path / "exp" / "analysis"
    data = json.loads((analysis / "analysis.json").read_text())
    controls = data["tables"]["consistency_controls"]
    assert {(r["k"], r["d"]) for r in controls} == {(2, 1), (2, 2), (4, 1), (4, 2), (8, 1), (8, 2)}
    assert not (analysis / "sky" / "pseudo_labels.json").exists()  # no labeller ran
    cands = {r["id"]: r for r in _lines(tmp_path / "exp" / "sky" / "candidates" / "test.jsonl")}
    ranked = {r["id"]: r for r in _lines(analysis / "sky" / f"rerank-{tiny_opt.name}-top8" / "test.jsonl")}
    own = {r["id"]: r for r in _lines(tmp_path / "exp" / "sky" / "reranked" / "test.jsonl")}

    def ok(rec, ctx):
        return labels[int(ctx["id"])] == rec["label"]

    for r in controls:
        k, d = r["k"], r["d"]
        assert r["labels"] == "corpus" and r["inputs"] == len(cands) and r["clusters"] == 2
        first = [ok(x, c) for x in cands.values() for c in x["ctxs"][:d]]
        assert r["first"] == pytest.approx(sum(first) / len(first))
        hits = [sum(ok(x, c) for c in x["ctxs"][:k]) for x in cands.values()]
        assert r["oracle"] == pytest.approx(sum(min(d, h) for h in hits) / (d * len(hits)))
        assert r["full_inputs"] == pytest.approx(sum(h >= d for h in hits) / len(hits))
        assert r["random"] == pytest.approx(sum(d * h / k for h in hits) / (d * len(hits)))
        mine = [ok(cands[i], c) for i, x in ranked.items()
                for c in [c for c in x["ctxs"] if c["retrieval_rank"] <= k][:d]]
        assert r["reranker"] == pytest.approx(sum(mine) / len(mine))
        for name in ("reranker", "first", "random", "oracle"):
            assert r[f"{name}_low"] <= r[name] <= r[f"{name}_high"]
        assert r["random"] <= r["oracle"] and 0 < r["over_floor_p"] <= 1 and 0 < r["over_first_p"] <= 1
        assert r["over_first"] == pytest.approx(r["reranker"] - r["first"])  # the same kept evidence: one share
    # at the experiment's own k and d the reranker's top d is the PGRA reader's evidence, and the main table agrees
    at = next(r for r in controls if (r["k"], r["d"]) == (4, 2))
    pgra = [ok(own[i], c) for i in own for c in own[i]["ctxs"][:2]]
    assert at["reranker"] == pytest.approx(sum(pgra) / len(pgra))
    main_rows = {r["source"]: r for r in data["tables"]["consistency"]}
    assert main_rows[FIRST_STAGE]["share"] == pytest.approx(at["first"])
    # the further LM's row of the main table is read off the controls' ranking of the first 8 (no rerank of its own):
    # the same LM as the experiment's, so the same top 2 of the first 4 as the experiment's reranked stage
    extra = [r for r in data["tables"]["consistency"] if r["lm"] == str(tiny_opt)]
    assert len(extra) == 2 and extra[0]["consistent"] == extra[1]["consistent"] == sum(pgra)
    assert not (analysis / "sky" / f"rerank-{tiny_opt.name}").exists()
    md = (analysis / "analysis.md").read_text()
    assert "## Label consistency with controls" in md and f"| sky | {tiny_opt.name} | 4 | 2 | corpus |" in md
    # the paper's Figure 4 layout, one figure per task and d, named by analysis.json (so a bundle carries it)
    drawn = {f["file"] for f in data["figures"]}
    assert {"consistency_size_sky_d1.png", "consistency_size_sky_d2.png"} <= drawn
    assert all((analysis / name).stat().st_size > 0 for name in drawn)
    # a column no row of the data has (a task without sources beside one with them): every input its own cluster
    assert main([*args[:-2], "analysis.consistency.group_field=nope"]) == 0
    again = json.loads((analysis / "analysis.json").read_text())["tables"]["consistency_controls"]
    assert {r["clusters"] for r in again} == {len(cands)}
    assert [r["reranker"] for r in again] == [r["reranker"] for r in controls]  # the same ranking, reused


def test_the_readers_ceiling_re_reads_with_oracle_and_anti_oracle_evidence(tmp_path, corpus_txt, sky_task, tiny_opt,
                                                                           tiny_t5, monkeypatch):
    """The FiD cell re-reads the test split with its own evidence (its own predictions again), the candidates whose
    (pseudo-)label agrees with the gold label first, and those that disagree first; the differences are the
    report's paired bootstrap."""
    import json

    import yaml

    from pgra.analysis.ceiling import ordered_evidence
    from pgra.cli import main
    from pgra.core.config import from_dict
    from pgra.evaluation.significance import paired_bootstrap
    from pgra.experiment import Experiment, ExperimentConfig
    from pgra.methods.reader_method import ReaderPredictor
    from tests.test_analysis import hashed_labels
    from tests.test_experiment import _config

    cfg = _config(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, methods=["no_retrieval", "fid", "pgra"],
                  seeds=[1])
    cfg["rerank"]["k"] = 6
    cfg["reader"]["n_passages"] = cfg["rerank"]["top_d"] = 2
    assert not Experiment(from_dict(ExperimentConfig, cfg)).run()
    cfg_file = tmp_path / "exp.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))
    label_of = hashed_labels(monkeypatch, ["sky", "town"])
    read: dict[str, list] = {}
    real = ReaderPredictor.predict

    def spy(self, records):
        lines = real(self, records)
        read.setdefault("calls", []).append((records, lines))
        return lines

    monkeypatch.setattr(ReaderPredictor, "predict", spy)
    assert main(["analyze", "--config", str(cfg_file), "analysis.analyses=ceiling"]) == 0
    row = json.loads((tmp_path / "exp" / "analysis" / "analysis.json").read_text())["tables"]["ceiling"][0]
    assert (row["task"], row["method"], row["seed"], row["k"], row["d"]) == ("sky", "fid", 1, 6, 2)
    own, oracle, anti = read["calls"]
    cands = _lines(tmp_path / "exp" / "sky" / "candidates" / "test.jsonl")
    # its own evidence: the first stage's top d, and the cell's own predictions again
    assert [[c["id"] for c in r["ctxs"]] for r in own[0]] == [[c["id"] for c in r["ctxs"][:2]] for r in cands]
    cell_preds = {x["id"]: x["prediction"] for x in _lines(tmp_path / "exp" / "sky" / "fid" / "seed-1" /
                                                            "predictions_test.jsonl")}
    assert [x["prediction"] for x in own[1]] == [cell_preds[r["id"]] for r in cands]
    # oracle: agreeing candidates of the first 6 first, in first-stage order; anti-oracle: the others first
    for recs, agree in ((oracle[0], True), (anti[0], False)):
        for r, c in zip(recs, cands, strict=True):
            top = c["ctxs"][:6]
            want = ([x for x in top if (label_of(x["id"]) == c["label"]) == agree]
                    + [x for x in top if (label_of(x["id"]) == c["label"]) != agree])[:2]
            assert [x["id"] for x in r["ctxs"]] == [x["id"] for x in want]
    labels = {str(x["id"]): label_of(x["id"]) for c in cands for x in c["ctxs"]}
    assert [x["id"] for x in ordered_evidence(cands[0], labels, 6, 2, True)] == [x["id"] for x in oracle[0][0]["ctxs"]]
    gold = [c["label"] for c in cands]
    preds = {n: [x["prediction"] for x in lines] for n, (_, lines) in zip(("own", "oracle", "anti"), read["calls"], strict=True)}
    assert row["own"] == sum(g == p for g, p in zip(gold, preds["own"], strict=True)) / len(gold)  # exact: a count
    want = paired_bootstrap(gold, [preds["oracle"]], [preds["own"]], ["sky", "town"], "accuracy", 10000)
    assert (row["oracle_delta"], row["oracle_p"], row["oracle_ci"]) == (want.delta, want.p_value,
                                                                         [want.ci_low, want.ci_high])
    assert "## The reader's ceiling" in (tmp_path / "exp" / "analysis" / "analysis.md").read_text()


def test_a_pool_refuses_what_it_cannot_write_and_its_labels_belong_to_one_task(tmp_path, sky_task, capsys):
    from pgra.analysis.consistency import CorpusLabels
    from pgra.cli import main
    from pgra.core.errors import InputError
    from tests.conftest import one_error_line

    assert "needs --out DIR" in one_error_line(["tasks", "pool", str(sky_task)], capsys)
    line = one_error_line(["tasks", "pool", str(sky_task), "--out", str(tmp_path / "p"), "--split", "test2"], capsys)
    assert "has no split 'test2'" in line
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "manifest.json").write_text('{"kind": "index"}')  # another stage's folder: refused
    assert "holds a 'index' artifact" in one_error_line(["tasks", "pool", str(sky_task), "--out", str(tmp_path / "mine")],
                                                          capsys)
    assert main(["tasks", "pool", str(sky_task), "--out", str(tmp_path / "p"), "--split", "test"]) == 0
    labels = CorpusLabels(tmp_path / "p" / "corpus.labels.json", "sky")
    assert labels.label({"0": "", "5": ""}) == {"0": "sky", "5": "town"}  # test.jsonl: s7 s8 s9 t7 ...
    with pytest.raises(InputError, match="not a line of the labelled corpus"):
        labels.label({"99": ""})
    with pytest.raises(InputError, match="not 'mr'"):
        CorpusLabels(tmp_path / "p" / "corpus.labels.json", "mr")
