# numerics: the analyses' arithmetic on hand-made predictions and printed numbers (counts, shares, means): no model
"""The analyses (pgra analyze): every printed number against a hand count, sweeps that embed nothing twice."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pgra.analysis.calibration import (
    confidence_pairs,
    expected_calibration_error,
    reliability_bins,
    seed_flips,
)
from pgra.analysis.case_study import choose_inputs
from pgra.analysis.config import analyze_config
from pgra.analysis.consistency import consistency_share
from pgra.analysis.differences import overlap_at_d, overlap_table, rank_shift
from pgra.analysis.sweep import sweep_points
from pgra.core.config import from_dict
from pgra.core.errors import InputError
from pgra.experiment import Experiment, ExperimentConfig
from tests import numerics
from tests.conftest import one_error_line
from tests.test_experiment import _config


def _ctx(*ids):
    return [{"id": i, "text": f"t{i}"} for i in ids]


def test_consistency_share_by_hand():
    records = [{"id": "a", "label": "x", "ctxs": _ctx(1, 2, 3)}, {"id": "b", "label": "y", "ctxs": _ctx(2, 4, 5)}]
    pseudo = {"1": "x", "2": "y", "3": "x", "4": "y", "5": "x"}
    # d=2: a -> 1 (x ok), 2 (y no); b -> 2 (y ok), 4 (y ok): 3 of 4
    assert consistency_share(records, 2, pseudo) == {"share": 0.75, "consistent": 3, "evidence": 4, "inputs": 2}
    # d=3 adds 3 (x ok for a) and 5 (x no for b): 4 of 6
    assert consistency_share(records, 3, pseudo)["share"] == pytest.approx(4 / 6)


def test_overlap_and_disagreement_by_hand():
    assert overlap_at_d([1, 2, 3], ["3", "9", "1"], 3) == pytest.approx(2 / 3)
    pairs = [({"evidence": [1, 2], "prediction": "x"}, {"evidence": [1, 2], "prediction": "x"}),  # 2/2, agree
             ({"evidence": [1, 2], "prediction": "x"}, {"evidence": [2, 7], "prediction": "y"}),  # 1/2, differ
             ({"evidence": [1, 2], "prediction": "y"}, {"evidence": [5, 7], "prediction": "x"}),  # 0/2, differ
             ({"evidence": [3, 4], "prediction": "y"}, {"evidence": [4, 8], "prediction": "y"})]  # 1/2, agree
    t = overlap_table(pairs, 2)
    assert [(r["shared"], r["inputs"], r["differing"]) for r in t["rows"]] == [(0, 1, 1), (1, 2, 1), (2, 1, 0)]
    assert t["rows"][1]["share_differing"] == 0.5 and t["differing"] == 2 and t["pairs"] == 4
    assert t["mean_overlap"] == pytest.approx((1 + 0.5 + 0 + 0.5) / 4)
    assert t["mean_overlap_agreeing"] == pytest.approx(0.75) and t["mean_overlap_differing"] == pytest.approx(0.25)


def test_rank_shift_by_hand():
    records = [{"ctxs": [{"id": 1, "retrieval_rank": 1}, {"id": 2, "retrieval_rank": 5}, {"id": 3, "retrieval_rank": 2}]},
               {"ctxs": [{"id": 4, "retrieval_rank": 3}, {"id": 5, "retrieval_rank": 5}]}]
    s = rank_shift(records, 2)  # the top 2 of each: ranks 1, 5 and 3, 5
    assert s["histogram"] == {1: 1, 3: 1, 5: 2} and s["kept"] == 4
    assert s["mean_rank"] == pytest.approx(3.5) and s["promoted"] == pytest.approx(0.75)


def test_calibration_error_brier_and_flips_by_hand():
    lines = [{"label": "a", "prediction": "a", "scores": {"a": 0.9, "b": 0.1}},   # conf .9, right
             {"label": "b", "prediction": "a", "scores": {"a": 0.8, "b": 0.2}},   # conf .8, wrong
             {"label": "b", "prediction": "b", "scores": {"a": 1.0, "b": 3.0}},   # normalised: conf .75, right
             {"label": "a", "prediction": "a", "scores": {"a": 1.0, "b": 0.0}},   # conf 1.0 (last bin), right
             {"label": "a", "prediction": "b"}]                                   # no scores: left out
    pairs = confidence_pairs(lines)
    assert [(c, ok) for c, ok, _ in pairs] == [(0.9, True), (0.8, False), (0.75, True), (1.0, True)]
    # Brier: (.1^2+.1^2), (.8^2+.8^2), (.25^2+.25^2), 0
    assert [b for *_, b in pairs] == pytest.approx([0.02, 1.28, 0.125, 0.0])
    bins = reliability_bins(pairs, 4)  # [0,.25) [.25,.5) [.5,.75) [.75,1]: everything in the last bin
    assert [b["inputs"] for b in bins] == [0, 0, 0, 4] and bins[0]["accuracy"] is None
    assert bins[3]["confidence"] == pytest.approx(3.45 / 4) and bins[3]["accuracy"] == 0.75
    assert expected_calibration_error(pairs, 4) == pytest.approx(abs(0.75 - 3.45 / 4))
    # 10 bins: .75 -> [.7,.8); .8 -> [.8,.9); .9 and 1.0 -> [.9,1]: |1-.75|/4 + |0-.8|/4 + |1-.95|*2/4
    assert [b["inputs"] for b in reliability_bins(pairs, 10)][7:] == [1, 1, 2]
    assert expected_calibration_error(pairs, 10) == pytest.approx(0.25 / 4 + 0.8 / 4 + 0.05 * 2 / 4)
    assert expected_calibration_error([], 10) is None
    # seeds: input x flips (a/a/b), y never does, z only under two seeds (left out)
    flips = seed_flips([{"x": "a", "y": "a", "z": "a"}, {"x": "a", "y": "a"}, {"x": "b", "y": "a", "z": "b"}])
    assert flips["inputs"] == 2 and flips["flipped"] == 1 and flips["share"] == 0.5
    assert flips["pairwise"] == pytest.approx((0 + 0.5 + 0.5) / 3)


def test_leave_one_out_variants_and_effects_by_hand():
    from pgra.analysis.attribution import effects, leave_one_out, sample_ids, summarise

    rec = {"id": "q", "text": "t", "label": "x", "ctxs": _ctx(1, 2, 3)}
    variants = leave_one_out(rec, 2)
    assert [[c["text"] for c in v["ctxs"]] for v in variants] == [["t1", "t2"], ["", "t2"], ["t1", ""], ["", ""]]
    assert len({v["id"] for v in variants}) == 4 and rec["ctxs"][0]["text"] == "t1"  # the record is untouched
    lines = [{"scores": {"x": p, "y": 1 - p}} for p in (0.8, 0.5, 0.9, 0.4)]
    e = effects(rec, lines, 2)
    assert e["full"] == 0.8 and e["none"] == 0.4 and e["effects"] == pytest.approx([0.3, -0.1])
    rows = [{"input": "q", "evidence": "1", "first_stage_rank": 3, "reranker_rank": 1, "verdict": "promoted",
             "effect": 0.3, "full": 0.8, "none": 0.4},
            {"input": "q", "evidence": "2", "first_stage_rank": 1, "reranker_rank": 2, "verdict": "kept",
             "effect": -0.1, "full": 0.8, "none": 0.4},
            {"input": "r", "evidence": "5", "first_stage_rank": 1, "reranker_rank": 1, "verdict": "kept",
             "effect": 0.2, "full": 0.6, "none": 0.5}]
    s = summarise(rows)
    assert s["inputs"] == 2 and s["sentences"] == 3 and s["mean_effect"] == pytest.approx(0.4 / 3)
    assert s["all_evidence_effect"] == pytest.approx((0.4 + 0.1) / 2)
    assert s["by_first_stage_rank"]["1"] == {"sentences": 2, "mean_effect": pytest.approx(0.05)}
    assert s["by_verdict"]["promoted"]["mean_effect"] == 0.3 and s["by_reranker_rank"]["1"]["sentences"] == 2
    # two seeds of one input: each seed's all-evidence effect counts
    two = summarise([{**rows[2], "seed": 1}, {**rows[2], "seed": 2, "full": 0.9, "none": 0.5}])
    assert two["all_evidence_effect"] == pytest.approx((0.1 + 0.4) / 2) and two["input_seed_pairs"] == 2
    assert two["inputs"] == 1
    assert sample_ids(list("abcdef"), 3, 0) == sample_ids(list("abcdef"), 3, 0)
    assert sample_ids(list("abc"), 0, 0) == list("abc") and len(sample_ids(list("abcdef"), 3, 1)) == 3


def test_case_study_choice_and_sweep_points():
    inputs = [f"q{i}" for i in range(10)]
    chosen = choose_inputs([], inputs, 3, seed=0, preferred=["q7", "q2"])
    assert {"q7", "q2"} <= set(chosen) and len(chosen) == 3 and chosen == sorted(chosen, key=inputs.index)
    assert chosen == choose_inputs([], inputs, 3, seed=0, preferred=["q7", "q2"])  # seeded
    assert choose_inputs(["q4", "q1"], inputs, 3, 0, []) == ["q4", "q1"]
    with pytest.raises(InputError, match="case study ids"):
        choose_inputs(["nope"], inputs, 3, 0, [])
    assert sweep_points([4, 8], [2, 3], k0=8, d0=3, k_max=8) == [(8, 2), (8, 3), (4, 3)]
    with pytest.raises(InputError, match="retrieve.k"):
        sweep_points([16], [2], k0=8, d0=3, k_max=8)
    with pytest.raises(InputError, match="below the experiment's d"):
        sweep_points([2], [2], k0=8, d0=3, k_max=8)
    with pytest.raises(InputError, match="rerank.k"):
        sweep_points([8], [9], k0=8, d0=3, k_max=8)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture()
def finished(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, monkeypatch):
    """A finished grid (no_retrieval, fid, pgra; one seed) whose reranker read only the first 4 of 8 candidates;
    every text the reranker's LM embeds is recorded (``embedded``)."""
    from pgra.rerank.prompt_guided.embedder import LMEmbedder

    embedded: list[tuple[str, str]] = []
    real = LMEmbedder.embed

    def spy(self, texts, prefix, *args, **kw):
        embedded.extend((prefix, t) for t in texts)
        return real(self, texts, prefix, *args, **kw)

    monkeypatch.setattr(LMEmbedder, "embed", spy)
    cfg = _config(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, methods=["no_retrieval", "fid", "pgra"],
                  seeds=[1])
    cfg["rerank"]["k"] = 4
    cfg["reader"]["n_passages"] = cfg["rerank"]["top_d"] = 2
    assert not Experiment(from_dict(ExperimentConfig, cfg)).run()
    return cfg, embedded


def hashed_labels(monkeypatch, labels: list[str]) -> Callable[[str], str]:
    """Replace the no-retrieval pseudo-labeller by one that labels each evidence id by its hash (a trained tiny
    reader may give every sentence one label, which no choice of folder or d could change); returns it."""
    import hashlib

    from pgra.analysis.consistency import PseudoLabeller

    def label_of(i: str) -> str:
        return labels[int(hashlib.sha1(str(i).encode()).hexdigest(), 16) % len(labels)]

    monkeypatch.setattr(PseudoLabeller, "label", lambda self, sentences: {i: label_of(i) for i in sentences})
    return label_of


def test_sweep_consistency_reads_each_points_own_evidence_at_its_d(finished, monkeypatch):
    from pgra.cli import main

    cfg, _ = finished
    out = Path(cfg["out"])
    cfg_file = out.parent / "experiment.yaml"
    import yaml

    cfg_file.write_text(yaml.safe_dump(cfg))
    task_dir, analysis = out / "sky", out / "analysis"
    label_of = hashed_labels(monkeypatch, sorted({r["label"] for r in _lines(task_dir / "candidates" / "test.jsonl")}))
    assert main(["analyze", "--config", str(cfg_file), "analysis.analyses=sweep", "analysis.sweep.k=2,4,8",
                 "analysis.sweep.d=1"]) == 0
    rows = {(r["k"], r["d"]): r for r in json.loads((analysis / "analysis.json").read_text())["tables"]["sweep"]}
    assert set(rows) == {(8, 2), (4, 2), (2, 2), (4, 1)} and rows[(4, 2)]["experiment_cell"]
    shares = set()
    for (k, d), r in rows.items():
        folder = task_dir / "reranked" if r["experiment_cell"] else \
            analysis / "sweep" / "sky" / f"k{k}-d{d}" / "sky" / "reranked"
        pairs = [(x["label"], label_of(c["id"])) for x in _lines(folder / "test.jsonl") for c in x["ctxs"][:d]]
        assert len(pairs) == d * len(_lines(folder / "test.jsonl"))
        assert r["consistency"] == pytest.approx(sum(g == p for g, p in pairs) / len(pairs)), (k, d)
        shares.add(round(r["consistency"], 6))
    assert len(shares) > 1  # the points' evidence differs, and so does its consistency
    assert (analysis / "sweep_k_consistency.png").stat().st_size > 0
    # a reranked folder left at the experiment's own point (by an earlier sweep of another experiment) is not read
    shutil.copytree(analysis / "sweep" / "sky" / "k8-d2" / "sky" / "reranked",
                    analysis / "sweep" / "sky" / "k4-d2" / "sky" / "reranked")
    assert main(["analyze", "--config", str(cfg_file), "analysis.analyses=sweep", "analysis.sweep.k=2,4,8",
                 "analysis.sweep.d=1"]) == 0
    again = {(r["k"], r["d"]): r for r in json.loads((analysis / "analysis.json").read_text())["tables"]["sweep"]}
    assert again[(4, 2)]["experiment_cell"] and again[(4, 2)]["embedded_texts"] == 0
    assert again[(4, 2)]["consistency"] == rows[(4, 2)]["consistency"] != again[(8, 2)]["consistency"]


def test_analyze_writes_every_table_and_figure(finished, capsys):
    from pgra.cli import main

    cfg, embedded = finished
    out = Path(cfg["out"])
    cfg_file = out.parent / "experiment.yaml"
    import yaml

    cfg_file.write_text(yaml.safe_dump(cfg))
    before = len(embedded)
    assert main(["analyze", "--config", str(cfg_file), "analysis.analyses=consistency,differences,calibration,cost,case_study,sweep",
                 "analysis.sweep.k=2,3,4,8", "analysis.sweep.d=1,2", "analysis.case_study.n=2"]) == 0
    analysis = out / "analysis"
    for name in ("label_consistency.png", "sweep_k.png", "sweep_d.png", "sweep_k_consistency.png", "overlap.png",
                 "rank_shift.png",
                 "reliability_sky.png", "analysis.md", "case_study.md"):
        assert (analysis / name).stat().st_size > 0, name
    assert (analysis / "label_consistency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((analysis / "analysis.json").read_text())
    task_dir = out / "sky"

    # label consistency recomputed from the files: the no-retrieval reader's labels of every evidence sentence
    pseudo = json.loads((analysis / "sky" / "pseudo_labels.json").read_text())["labels"]
    for source, folder in (("first stage (FiD)", "candidates"), ("PGRA (tiny_opt)", "reranked")):
        recs = _lines(task_dir / folder / "test.jsonl")
        pairs = [(r["label"], pseudo[str(c["id"])]) for r in recs for c in r["ctxs"][:2]]
        row = next(r for r in data["tables"]["consistency"] if r["source"].startswith(source.split(" (")[0]))
        assert row["evidence"] == len(pairs) == 2 * len(recs)
        assert row["share"] == pytest.approx(sum(g == p for g, p in pairs) / len(pairs))
    # the pseudo-labels are the no-retrieval reader's own predictions
    from pgra.methods import get_method

    predictor = get_method("no_retrieval").load(task_dir / "no_retrieval" / "seed-1")
    some = list(pseudo.items())[:4]
    texts = {str(c["id"]): c["text"] for r in _lines(task_dir / "candidates" / "test.jsonl") for c in r["ctxs"]}
    assert [x["prediction"] for x in predictor.predict([{"id": i, "text": texts[i]} for i, _ in some])] == \
        [label for _, label in some]

    # overlaps and the rank histogram recomputed from the predictions and the reranked file
    diff = data["tables"]["differences"][0]
    fid = {x["id"]: x for x in _lines(task_dir / "fid" / "seed-1" / "predictions_test.jsonl")}
    pgra = _lines(task_dir / "pgra" / "seed-1" / "predictions_test.jsonl")
    shared = [len(set(map(str, fid[x["id"]]["evidence"])) & set(map(str, x["evidence"]))) for x in pgra]
    assert [r["inputs"] for r in diff["overlap"]["rows"]] == [shared.count(j) for j in range(3)]
    assert diff["overlap"]["differing"] == sum(fid[x["id"]]["prediction"] != x["prediction"] for x in pgra)
    ranks = [c["retrieval_rank"] for r in _lines(task_dir / "reranked" / "test.jsonl") for c in r["ctxs"][:2]]
    assert {int(k): v for k, v in diff["rank_shift"]["histogram"].items()} == {r: ranks.count(r) for r in set(ranks)}
    assert all(1 <= r <= 4 for r in ranks)  # the reranker read the first k=4

    # the sweep: (4, 2) is the experiment's own cell; every other point trained its own reader
    sweep = {(r["k"], r["d"]): r for r in data["tables"]["sweep"]}
    assert set(sweep) == {(8, 2), (4, 2), (3, 2), (2, 2), (4, 1)}
    assert sweep[(4, 2)]["experiment_cell"] and not sweep[(8, 2)]["experiment_cell"]
    main_acc = json.loads((task_dir / "pgra" / "seed-1" / "cell.json").read_text())["results"]["test"]["accuracy"]
    assert sweep[(4, 2)]["mean"] == main_acc
    for (k, d), r in sweep.items():
        if not r["experiment_cell"]:
            cell = analysis / "sweep" / "sky" / f"k{k}-d{d}" / "sky" / "pgra" / "seed-1"
            assert json.loads((cell / "cell.json").read_text())["results"]["test"]["accuracy"] == r["mean"]
            assert all(len(x["evidence"]) == d for x in _lines(cell / "predictions_test.jsonl"))
            reranked = _lines(analysis / "sweep" / "sky" / f"k{k}-d{d}" / "sky" / "reranked" / "test.jsonl")
            assert all(c["retrieval_rank"] <= k for rec in reranked for c in rec["ctxs"])
    # each point's label consistency: its reader's top d, labelled by the same no-retrieval reader
    for (k, d), r in sweep.items():
        folder = task_dir / "reranked" if r["experiment_cell"] else \
            analysis / "sweep" / "sky" / f"k{k}-d{d}" / "sky" / "reranked"
        pairs = [(x["label"], pseudo[str(c["id"])]) for x in _lines(folder / "test.jsonl") for c in x["ctxs"][:d]]
        assert r["consistency"] == pytest.approx(sum(g == p for g, p in pairs) / len(pairs))
    assert "label consistency (%)" in (analysis / "analysis.md").read_text()
    # no text embedded twice: only k=8 (the first point) embedded, and only what k=4 had not
    new = embedded[before:]
    assert new and len(new) == len(set(new)) and not set(new) & set(embedded[:before])
    assert sweep[(8, 2)]["embedded_texts"] == len(new)
    assert all(r["embedded_texts"] == 0 for key, r in sweep.items() if key != (8, 2))

    # calibration recomputed from one cell's predictions
    cal = {r["method"]: r for r in data["tables"]["calibration"]}
    assert set(cal) == {"no_retrieval", "fid", "pgra"} and cal["fid"]["flips"] is None  # one seed
    pairs = confidence_pairs(_lines(task_dir / "pgra" / "seed-1" / "predictions_test.jsonl"))
    assert cal["pgra"]["ece"] == pytest.approx(expected_calibration_error(pairs, 10)) and cal["pgra"]["ece_std"] == 0
    assert cal["pgra"]["inputs"] == len(pairs) == len(pgra)
    assert "## Calibration" in (analysis / "analysis.md").read_text()

    # cost: the table adds up to the stages' and cells' own records
    from pgra.runtime.cost import estimated_flops, parameter_counts

    stage = {s: json.loads((task_dir / s / "cost.json").read_text()) for s in ("candidates", "reranked")}
    reranked = json.loads((task_dir / "reranked" / "manifest.json").read_text())
    assert stage["reranked"]["work"] == [{"model": cfg["rerank"]["lm"], "part": "all", "mode": "forward",
                                          "tokens": reranked["embedding"]["tokens_run"],
                                          "parameters": parameter_counts(cfg["rerank"]["lm"])["all"]}]
    assert stage["candidates"]["work"] == []  # BM25 runs no model
    cell = json.loads((task_dir / "pgra" / "seed-1" / "cell.json").read_text())
    parts = {(w["part"], w["mode"]) for w in cell["cost"]["work"]}
    assert {("encoder", "trained"), ("decoder", "trained"), ("encoder", "forward"), ("decoder", "forward")} <= parts
    row = next(r for r in data["tables"]["cost"] if r["method"] == "pgra")
    assert row["elapsed_s"] == pytest.approx(cell["elapsed_s"] + stage["candidates"]["elapsed_s"] +
                                             stage["reranked"]["elapsed_s"])
    params = {w["model"]: parameter_counts(w["model"]) for w in cell["cost"]["work"] + stage["reranked"]["work"]}
    assert row["flops"] == pytest.approx(estimated_flops(cell["cost"]["work"], params) +
                                         estimated_flops(stage["reranked"]["work"], params))
    # each record carries its model's parameters, written while the folders were there: it prices itself alone
    assert estimated_flops(cell["cost"]["work"], {}) == estimated_flops(cell["cost"]["work"], params)
    assert row["tokens"] == sum(w["tokens"] for w in cell["cost"]["work"] + stage["reranked"]["work"])
    no_ret = next(r for r in data["tables"]["cost"] if r["method"] == "no_retrieval")
    assert no_ret["stages"] == [] and no_ret["stage_elapsed_s"] == 0
    assert (analysis / "cost_sky.png").stat().st_size > 0

    # the case study names inputs with every method's prediction; results.md links every figure
    case = (analysis / "case_study.md").read_text()
    assert case.count("### input") == 2 and "| pgra |" in case and "| no_retrieval |" in case
    results = (out / "results.md").read_text()
    assert "## Figures" in results
    for fig in data["figures"]:
        assert f"(analysis/{fig['file']})" in results
    # a re-run trains and embeds nothing more
    n = len(embedded)
    stamps = {p: p.stat().st_mtime_ns for p in (analysis / "sweep").rglob("cell.json")}
    assert main(["analyze", "--config", str(cfg_file), "analysis.analyses=sweep", "analysis.sweep.k=2,3,4,8",
                 "analysis.sweep.d=1,2"]) == 0
    assert len(embedded) == n and {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # ... and keeps the tables and figures of the analyses it did not run this time
    again = json.loads((analysis / "analysis.json").read_text())
    assert again["tables"]["consistency"] == data["tables"]["consistency"]
    assert [f["file"] for f in again["figures"]] == [f["file"] for f in data["figures"]]
    assert "## Label consistency" in (analysis / "analysis.md").read_text()


def test_attribution_on_saved_checkpoints(finished, monkeypatch):
    from pgra.analysis.attribution import attribute_cell, attribution
    from pgra.analysis.inputs import ExperimentRuns
    from pgra.methods.reader_method import ReaderMethod

    cfg, _ = finished
    cfg = {**cfg, "analysis": {"attribution": {"n": 3}}}
    runs = ExperimentRuns(Experiment(from_dict(ExperimentConfig, cfg)))
    task = runs.cfg.tasks[0]
    out = Path(cfg["out"]) / "sky"
    ids = [r["id"] for r in _lines(out / "candidates" / "test.jsonl")][:3]
    # the real reader: with every sentence read, the gold probability is the one its predictions file printed
    rows = attribute_cell(runs, task, "fid", 1, ids, {})
    printed = {x["id"]: x["scores"][x["label"]] / sum(x["scores"].values())
               for x in _lines(out / "fid" / "seed-1" / "predictions_test.jsonl")}
    assert len(rows) == 3 * 2 and all(r["full"] == pytest.approx(printed[r["input"]], abs=1e-5) for r in rows)
    assert [r["first_stage_rank"] for r in rows] == [1, 2] * 3 and all(r["verdict"] is None for r in rows)

    # a planted decisive sentence: a reader that is sure of the gold label only when it reads that sentence
    decisive = _lines(out / "reranked" / "test.jsonl")[0]["ctxs"][1]["text"]

    spec = runs.task_spec(task)

    class Planted:
        task = spec

        def predict(self, records):
            lines = []
            for r in records:
                texts = [c["text"] for c in r["ctxs"]]
                p = 0.9 if decisive in texts else 0.3 + 0.01 * sum(bool(t) for t in texts)
                other = [lab for lab in self.task.labels if lab != r["label"]][0]
                lines.append({"id": r["id"], "label": r["label"], "prediction": r["label"],
                              "scores": {r["label"]: p, other: 1 - p}})
            return lines

    monkeypatch.setattr(ReaderMethod, "load", classmethod(lambda cls, out, **kw: Planted()))
    table = {r["method"]: r for r in attribution(runs)}
    assert set(table) == {"fid", "pgra"} and table["pgra"]["inputs"] == 3
    rows = attribute_cell(runs, task, "pgra", 1, ids, {})
    text = {str(c["id"]): c["text"] for r in _lines(out / "reranked" / "test.jsonl") for c in r["ctxs"]}
    planted = [r for r in rows if text[r["evidence"]] == decisive]
    assert planted and max(rows, key=lambda r: r["effect"]) in planted
    assert all(r["effect"] == pytest.approx(0.9 - 0.31) for r in planted)  # sure only with it; 0.31 without
    assert all(r["effect"] <= 0.01 + numerics.tolerance(depth=8) for r in rows if r not in planted)  # any other sentence: 0.01 or 0
    # PGRA's verdicts follow the first-stage ranks of its evidence; FiD's, whether the reranker keeps it
    assert all(r["verdict"] == ("promoted" if r["first_stage_rank"] > 2 else "kept") for r in
               attribute_cell(runs, task, "pgra", 1, ids, {"x": []}))


def test_retriever_comparison_and_missing_labeller(finished, tmp_path, tiny_bert, capsys):
    from pgra.analysis.run import analyze

    cfg, _ = finished
    cfg = {**cfg, "analysis": {"analyses": ["retrievers"],
                               "retrievers": {"bert": {"retriever": "dense", "out": str(tmp_path / "dense"),
                                                       "dense": {"encoder": str(tiny_bert), "pooler": "mean"}}}}}
    runs = analyze(from_dict(ExperimentConfig, cfg))
    rows = json.loads((runs.out / "analysis.json").read_text())["tables"]["retrievers"]
    assert {(r["retriever"], r["method"]) for r in rows} == {(a, m) for a in ("bm25", "bert") for m in ("fid", "pgra")}
    other = runs.out / "retrievers" / "bert" / "sky"
    for m in ("fid", "pgra"):
        cell = json.loads((other / m / "seed-1" / "cell.json").read_text())
        row = next(r for r in rows if r["retriever"] == "bert" and r["method"] == m)
        assert row["mean"] == cell["results"]["test"]["accuracy"]
    assert json.loads((other / "candidates" / "manifest.json").read_text())["index"]["retriever"] == "dense"
    assert (runs.out / "retrievers.png").exists()

    # label consistency without a no-retrieval reader: a clear error naming the cell to run
    cfg2 = {**cfg, "methods": ["fid", "pgra"], "out": str(tmp_path / "exp2"),
            "analysis": {"analyses": ["consistency"]}}
    assert not Experiment(from_dict(ExperimentConfig, cfg2)).run()
    with pytest.raises(InputError, match="no_retrieval"):
        analyze(from_dict(ExperimentConfig, cfg2))


def test_analyze_dry_run_prices_what_the_analyses_would_run_and_runs_nothing(finished, tmp_path, tiny_bert, tiny_opt,
                                                                            capsys):
    """`pgra analyze --dry-run`: the sweep's points, the compared retriever's grid and the further reranker LM are
    counted (the sweep's point that is the experiment's own cells is reused, not counted) and priced against the
    grid; nothing runs and nothing is written."""
    from pgra.analysis.run import analyze

    cfg, embedded = finished
    before = len(embedded)
    out = Path(cfg["out"])
    cfg = {**cfg, "dry_run": True,
           "analysis": {"analyses": ["consistency", "sweep", "retrievers", "differences"],
                        "sweep": {"k": [2, 4, 8], "d": [1]}, "consistency": {"rerank_lms": [str(tiny_opt)]},
                        "retrievers": {"bert": {"retriever": "dense", "out": str(tmp_path / "dense"),
                                                "dense": {"encoder": str(tiny_bert), "pooler": "mean"}}}}}
    analyze(from_dict(ExperimentConfig, cfg))
    printed = capsys.readouterr().out
    lines = {line.strip().split(":")[0]: line.strip() for line in printed.splitlines()}
    # points (8, 2), (2, 2), (4, 1) each rerank and train one PGRA reader; (4, 2) is the experiment's own cell
    assert lines["sweep"].startswith("sweep: 3 stage run(s), 3 cell(s) (3 reader(s) to train)")
    assert lines["sweep"].endswith("1 cell(s) are the experiment's own, reused")
    assert lines["sky k=4 d=2"] == "sky k=4 d=2: the experiment's own cells"
    assert lines["retriever bert"].startswith("retriever bert: 2 stage run(s), 2 cell(s) (2 reader(s) to train), "
                                              "1 index(es) to build (not priced)")
    assert lines["consistency"].startswith("consistency: 1 stage run(s), 0 cell(s)")
    assert f"sky/rerank with {Path(tiny_opt).name}: ~" in printed  # priced as the experiment's recorded reranking
    assert lines["differences"].startswith("differences: reads the experiment's files")
    assert "6 stage run(s), 5 cell(s) (5 reader(s) to train)" in lines["analyses in all"]
    assert "x the experiment's grid" in lines["analyses in all"]
    assert not (out / "analysis").exists() and not (tmp_path / "dense").exists() and len(embedded) == before
    # a point's reranking finds the evidence of the experiment's first k=4 candidates in the shared cache: priced at
    # the share of its k beyond them (the recorded reranking's time x 0.5 at k=8, nothing at k=2 or 4)
    from pgra.analysis.config import as_analyze_config
    from pgra.analysis.inputs import ExperimentRuns
    from pgra.analysis.plan import variant_work
    from pgra.analysis.sweep import sweep_variants
    from pgra.experiment.estimate import plan_costs

    runs = ExperimentRuns(Experiment(as_analyze_config(from_dict(ExperimentConfig, cfg))))
    # the recorded reranking as the plan prices it here (x the thread factor of this machine's workers)
    recorded = next(e for e in plan_costs(runs.experiment, as_new=True).stages if e.label == "sky/reranked")
    assert recorded.source.startswith("recorded: sky/reranked") and recorded.seconds > 0
    priced = {label: [e for e in variant_work(runs, v).estimates if e.label == "sky/reranked"]
              for label, v in sweep_variants(runs)}
    assert priced["sky k=4 d=2"] == []  # the experiment's own cells: nothing runs
    assert priced["sky k=8 d=2"][0].seconds == pytest.approx(0.5 * recorded.seconds)
    assert priced["sky k=2 d=2"][0].seconds == priced["sky k=4 d=1"][0].seconds == 0.0
    assert "the rest from its embedding cache" in priced["sky k=8 d=2"][0].source


@pytest.mark.distributed
def test_two_process_analyze_equals_single_process(finished, tmp_path):
    """`torchrun scripts/analyze.py`: the sweep's two points trained side by side (one per rank: their cells are one
    pool) and another reranker LM sharded over two processes; the tables equal those of a single-process re-run
    (which then reuses every run)."""
    import os
    import subprocess
    import sys

    import yaml

    from pgra.analysis.run import analyze
    from tests.conftest import _write_tiny_causal_lm, launch_failure

    cfg, embedded = finished
    other_lm = _write_tiny_causal_lm(tmp_path / "tiny-gpt2", "gpt2")
    cfg = {**cfg, "analysis": {"analyses": ["consistency", "sweep", "differences", "case_study"],
                               "sweep": {"k": [8, 3], "d": []}, "consistency": {"rerank_lms": [str(other_lm)]}}}
    path = tmp_path / "analyze.yaml"
    path.write_text(yaml.safe_dump(cfg))
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(root / "scripts" / "analyze.py"), "--config", str(path)]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, launch_failure(proc)
    analysis = Path(cfg["out"]) / "analysis"
    two = json.loads((analysis / "analysis.json").read_text())["tables"]
    sources = [r["source"] for r in two["consistency"]]
    assert len(sources) == 3 and sources[0] == "first stage (FiD)" and sources[2] == "PGRA (tiny-gpt2)"
    point = analysis / "sweep" / "sky" / "k8-d2" / "sky"
    assert len(_lines(point / "pgra" / "seed-1" / "train_log.jsonl")) == 4
    assert two["sweep"][0]["embedded_texts"] > 0  # k=8 needed rows the experiment (k=4) had not embedded
    assert [(r["k"], r["experiment_cell"]) for r in two["sweep"]] == [(8, False), (3, False)]
    ran_by = {json.loads((analysis / "sweep" / "sky" / f"k{k}-d2" / "sky" / "pgra" / "seed-1" / "cell.json")
                         .read_text())["ran_by"]["worker"] for k in (8, 3)}
    assert ran_by == {"rank 0", "rank 1"}  # not one point after the other on one rank while the other waits
    assert json.loads((point / "reranked" / "cost.json").read_text())["processes"] == 2  # built by both ranks
    extra = _lines(analysis / "sky" / "rerank-tiny-gpt2" / "test.jsonl")
    assert len(extra) == 6 and all(len(r["ctxs"]) == 2 for r in extra)
    n = len(embedded)
    one = json.loads((analyze(from_dict(ExperimentConfig, cfg)).out / "analysis.json").read_text())["tables"]
    assert len(embedded) == n  # nothing run again
    for name in ("consistency", "sweep", "differences"):
        assert one[name] == two[name], name


def test_a_bundles_results_analyses_equal_its_experiments(finished, tmp_path, capsys):
    """`pgra report BUNDLE --analyses ...` computes what `pgra analyze` computes on the experiment, but for what
    needs the stages' data (PGRA's rank shift)."""
    import yaml

    from pgra.cli import main
    from pgra.evaluation.bundle import write_bundle

    cfg, _ = finished
    out = Path(cfg["out"])
    path = tmp_path / "analyze.yaml"
    path.write_text(yaml.safe_dump(cfg))
    names = "differences,calibration,cost"
    assert main(["analyze", "--config", str(path), f"analysis.analyses={names}"]) == 0
    # a figure an earlier run drew that no table draws now (a task no longer analysed) is removed by the next run,
    # even one that keeps the other tables; a PNG analysis.json does not name is never bundled
    record = json.loads((out / "analysis" / "analysis.json").read_text())
    record["figures"].append({"file": "gone.png", "title": "a task no longer analysed"})
    (out / "analysis" / "analysis.json").write_text(json.dumps(record))
    (out / "analysis" / "gone.png").write_bytes(b"\x89PNG")
    assert main(["analyze", "--config", str(path), "analysis.analyses=calibration"]) == 0
    assert not (out / "analysis" / "gone.png").exists() and (out / "analysis" / "overlap.png").is_file()
    (out / "analysis" / "stray.png").write_bytes(b"\x89PNG")
    write_bundle(out, tmp_path / "bundle")  # with what pgra analyze wrote (its tables and figures)
    assert (tmp_path / "bundle" / "analysis" / "overlap.png").is_file()
    assert not (tmp_path / "bundle" / "analysis" / "stray.png").exists()
    assert not (tmp_path / "bundle" / "analysis" / "sky").exists()  # never the analyses' own runs
    line = one_error_line(["report", str(tmp_path / "bundle"), "--analyses", names], capsys)
    assert "give --out DIR" in line  # the bundled analyses are checksummed: never rewritten in place
    assert main(["report", str(tmp_path / "bundle"), "--out", str(tmp_path / "again"), "--analyses", names,
                 "--bootstrap", "100"]) == 0
    experiment = json.loads((out / "analysis" / "analysis.json").read_text())["tables"]
    bundle = json.loads((tmp_path / "again" / "analysis" / "analysis.json").read_text())["tables"]
    assert json.loads((tmp_path / "bundle" / "analysis" / "analysis.json").read_text())["tables"] == experiment
    assert bundle["calibration"] == experiment["calibration"] and bundle["cost"] == experiment["cost"]
    assert experiment["cost"][0]["tokens"] and experiment["differences"][0]["rank_shift"]
    # the work records carry their models' parameters: FLOPs without any model folder (a bundle holds none)
    assert all(r["flops"] for r in bundle["cost"])
    assert bundle["differences"] == [{k: v for k, v in row.items() if k != "rank_shift"}
                                     for row in experiment["differences"]]
    assert bundle["differences"][0]["overlap"]["pairs"] == len(_lines(out / "sky" / "fid" / "seed-1" /
                                                                      "predictions_test.jsonl"))
    assert main(["bundle", str(out), "--out", str(tmp_path / "bundle")]) == 0  # replaced whole


def test_paper_analysis_section_builds_its_variants(tmp_path):
    """The paper config's analyses: every retriever and sweep point is a valid experiment config."""
    from pgra.analysis.variants import variant_config
    from pgra.core.config import load_config

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(analyze_config(), root / "configs" / "paper" / "experiment_table2.yaml")
    assert cfg.analysis.sweep.k == [16, 50, 100, 150] and len(cfg.analysis.consistency.rerank_lms) == 4
    # the counts docs/analyses.md gives for `pgra analyze --dry-run` on this config
    tasks, seeds = len(cfg.tasks), len(cfg.seeds)
    points = len(sweep_points(cfg.analysis.sweep.k, cfg.analysis.sweep.d, cfg.rerank.k or cfg.retrieve.k,
                              cfg.reader.n_passages, cfg.retrieve.k))
    said = " ".join((root / "docs" / "analyses.md").read_text().split())
    for count in (f"{tasks * len(cfg.methods) * seeds} cells", f"sweep's {points} points are {points * tasks * seeds}",
                  f"({(points - 1) * tasks * seeds} once", f"two compared retrievers {2 * 2 * tasks * seeds} FiD",
                  f"{4 * tasks} rerank runs"):
        assert count in said, count
    assert len(cfg.analysis.retrievers) == 2
    for name, spec in cfg.analysis.retrievers.items():
        v = variant_config(cfg, tmp_path / name, ["fid", "pgra"], cfg.seeds, index=spec)
        assert v.index.out == spec["out"] and v.index.retriever == spec["retriever"] and v.methods == ["fid", "pgra"]
    v = variant_config(cfg, tmp_path / "k16", ["pgra"], [1], {"rerank": {"k": 16, "top_d": 8},
                                                              "reader": {"n_passages": 8}})
    from pgra.experiment import cell_settings

    s = cell_settings(v, "sst2", "pgra")
    assert (s.rerank.k, s.rerank.top_d, s.reader.n_passages, s.reader.learning_rate) == (16, 8, 8, 8.0e-5)
    demo = load_config(analyze_config(), root / "configs" / "demo" / "analysis_retrievers.yaml")
    assert demo.analysis.analyses == ["retrievers"] and demo.out == "runs/demo-experiment"
    simcse = variant_config(demo, tmp_path / "simcse", ["fid", "pgra"], [1], index=demo.analysis.retrievers["simcse"])
    assert simcse.index.dense.pooler == "cls_before_pooler" and simcse.index.out == "indexes/demo-simcse"
