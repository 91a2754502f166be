# numerics: means, standard deviations and p-values of hand-made accuracies: Python and numpy float64 arithmetic
"""`pgra report` on synthetic runs: means, standard deviations, p-values and flags checked by hand."""

import json
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.core.config import to_dict
from pgra.core.errors import InputError
from pgra.evaluation.merge import merged_cells
from pgra.evaluation.report import build_report, format_markdown
from pgra.evaluation.significance import paired_bootstrap
from pgra.tasks import get_task
from tests.conftest import one_error_line

GOLD = ["1", "0"] * 5  # ten test inputs


def _preds(n_right: int) -> list[str]:
    """Right on the first ``n_right`` inputs, wrong on the rest."""
    return [g if i < n_right else ("0" if g == "1" else "1") for i, g in enumerate(GOLD)]


def _cell(root: Path, task: str, method: str, seed: int, n_right: int, still=False, text_of=None,
          fixed: bool | None = None) -> None:
    """A finished cell; ``fixed``: its ``seed_independent`` flag (None: written before the flag existed)."""
    d = root / task / method / f"seed-{seed}"
    d.mkdir(parents=True)
    lines = [{"id": f"t{i}", "text": (text_of or (lambda i: f"input {i}"))(i), "label": g, "prediction": p,
              "scores": {"0": float(p == "0"), "1": float(p == "1")}, "evidence": []}
             for i, (g, p) in enumerate(zip(GOLD, _preds(n_right), strict=True))]
    (d / "predictions_test.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    dev = [{**x, "id": f"d{i}", "prediction": "1"} for i, x in enumerate(lines[:4])]  # 2 of 4 right
    (d / "predictions_dev.jsonl").write_text("".join(json.dumps(x) + "\n" for x in dev))
    spec = get_task(task)
    (d / "cell.json").write_text(json.dumps({
        "kind": "cell", "task": task, "task_spec": to_dict(spec), "method": method, "seed": seed,
        "metric": "accuracy", "results": {"test": {"accuracy": n_right / 10, "examples": 10},
                                          "dev": {"accuracy": 0.5, "examples": 4}},
        "still_improving": still if method != "knn_vote" else None, "settings": {"m": method},
        "config": {"seed": seed}, "git_commit": "abc123", "versions": {"pgra": "0.1.0"},
        "data": {"sha256": {"test": "x"}}, "steps": 10, "best_step": 10 if still else 5,
        **({} if fixed is None else {"seed_independent": fixed})}))


@pytest.fixture()
def runs(tmp_path) -> Path:
    root = tmp_path / "exp"
    for seed, (fid, pgra) in zip((1, 2, 3), ((6, 8), (7, 9), (8, 7)), strict=True):
        _cell(root, "sst2", "fid", seed, fid)
        _cell(root, "sst2", "pgra", seed, pgra, still=seed == 2)
        _cell(root, "cr", "fid", seed, 5)
        _cell(root, "cr", "pgra", seed, 6)
    _cell(root, "sst2", "knn_vote", 1, 4)
    return root


def test_report_numbers_equal_a_hand_computation(runs, capsys):
    report = build_report(runs, n_resamples=2000, seed=5)
    s = report["summary"]
    assert s["fid"]["sst2"]["mean"] == pytest.approx(0.7) and s["fid"]["sst2"]["std"] == pytest.approx(0.1)
    assert s["pgra"]["sst2"]["mean"] == pytest.approx(0.8) and s["pgra"]["sst2"]["std"] == pytest.approx(0.1)
    assert s["pgra"]["sst2"]["n"] == 3 and s["pgra"]["sst2"]["still_improving"] == 1
    assert s["pgra"]["average"]["mean"] == pytest.approx((0.8 + 0.6) / 2)
    knn_summary = s["knn_vote"]["sst2"]
    assert knn_summary["mean"] == pytest.approx(0.4) and knn_summary["std"] == 0 and knn_summary["n"] == 1
    assert "average" not in s["knn_vote"]  # not run on every task
    # p-values: the bootstrap on the same predictions, seeds paired in seed order
    test = report["significance"]["pgra"]["sst2"]
    want = paired_bootstrap(GOLD, [_preds(8), _preds(9), _preds(7)], [_preds(6), _preds(7), _preds(8)], ["0", "1"],
                            "accuracy", n_resamples=2000, seed=5)
    assert test["delta"] == pytest.approx(0.1) and test["p_value"] == want.p_value and test["paired_seeds"]
    knn = report["significance"]["knn_vote"]["sst2"]
    assert not knn["paired_seeds"] and knn["delta"] == pytest.approx(0.4 - 0.7)
    rows = [r for r in report["rows"] if r["split"] == "test"]
    assert len(rows) == 13 and {"task", "method", "seed", "split", "metric", "value"} <= set(rows[0])

    assert main(["report", str(runs), "--bootstrap", "2000", "--seed", "5", "--min-inputs", "10"]) == 0
    md = (runs / "results.md").read_text()
    assert "| fid | 70.0 ± 10.0 (3) | 50.0 ± 0.0 (3) | 60.0 |" in md
    assert "| pgra | 80.0 ± 10.0 (3) ↑1/3 | 60.0 ± 0.0 (3) | 70.0 |" in md
    assert f"+10.0 (p={want.p_value:.3f}, Holm " in md and "still improving" in md
    saved = json.loads((runs / "results.json").read_text())
    assert saved["cells"][0]["git_commit"] == "abc123" and saved["bootstrap"]["n_resamples"] == 2000
    assert saved["environment"]["cells"] == 13 and saved["environment"]["git_commits"] == [
        {"value": "abc123", "cells": 13}]
    assert "- versions: pgra" not in md and "## Environment" in md


def test_seed_independent_run_is_deterministic_and_pairs_with_every_seed(runs):
    import shutil

    shutil.rmtree(runs / "sst2" / "knn_vote")  # the fixture's kNN vote, written again as a seed-independent run
    _cell(runs, "sst2", "knn_vote", 1, 4, fixed=True)
    _cell(runs, "sst2", "knn_vote", 2, 4)  # an older run's cell at another seed (no flag): left out
    report = build_report(runs, n_resamples=2000, seed=5)
    knn = report["summary"]["knn_vote"]["sst2"]
    assert knn["seed_independent"] and knn["n"] == 1 and knn["seeds"] == [1] and knn["mean"] == pytest.approx(0.4)
    assert not report["summary"]["fid"]["sst2"]["seed_independent"]
    assert [c["path"].endswith("seed-2") for c in report["ignored_cells"]] == [True]
    assert {(r["method"], r["seed"]) for r in report["rows"] if r["method"] == "knn_vote"} == {("knn_vote", 1)}
    # the one run is repeated for each of the reference's three seeds, so the seeds pair
    fid = [_preds(6), _preds(7), _preds(8)]
    test = report["significance"]["knn_vote"]["sst2"]
    want = paired_bootstrap(GOLD, [_preds(4)] * 3, fid, ["0", "1"], "accuracy", n_resamples=2000, seed=5)
    assert test["paired_seeds"] and test["seed_independent"] == {"method": True, "reference": False}
    assert test["delta"] == pytest.approx(0.4 - 0.7) == pytest.approx(knn["mean"] - report["summary"]["fid"]["sst2"]
                                                                      ["mean"])
    assert test["p_value"] == want.p_value and 0 < test["p_value"] <= 1
    # and the other way round: a seed-independent reference
    back = build_report(runs, reference="knn_vote", n_resamples=2000, seed=5)["significance"]["fid"]["sst2"]
    want = paired_bootstrap(GOLD, fid, [_preds(4)] * 3, ["0", "1"], "accuracy", n_resamples=2000, seed=5)
    assert back["paired_seeds"] and back["delta"] == pytest.approx(0.3) and back["p_value"] == want.p_value
    assert main(["report", str(runs), "--bootstrap", "200"]) == 0
    md = (runs / "results.md").read_text()
    assert "| knn_vote | 40.0 (det.) | – | – |" in md and "± 0.0 (1)" not in md
    assert "(det.) deterministic: the seed cannot change" in md and "1 cell(s) of seed-independent" in md


def test_readers_below_the_linear_probe_are_marked(runs):
    from pgra.evaluation.report import BELOW_FLOOR, FLOOR_METHOD

    assert FLOOR_METHOD == "linear_probe"
    for seed, n_right in ((1, 7), (2, 8)):  # mean 75.0 on sst2: between fid (70.0) and pgra (80.0); no cr row
        _cell(runs, "sst2", "linear_probe", seed, n_right)
    report = build_report(runs, n_resamples=200)
    s = report["summary"]
    assert s["fid"]["sst2"]["below_linear_probe"] is True and s["pgra"]["sst2"]["below_linear_probe"] is False
    assert "below_linear_probe" not in s["knn_vote"]["sst2"]  # not a trained reader (40.0, below the probe)
    assert "below_linear_probe" not in s["fid"]["cr"] and "below_linear_probe" not in s["linear_probe"]["sst2"]
    md = format_markdown(report)
    assert f"| fid | 70.0 ± 10.0 (3) {BELOW_FLOOR} | 50.0 ± 0.0 (3) | 60.0 |" in md
    assert "| pgra | 80.0 ± 10.0 (3) ↑1/3 | 60.0 ± 0.0 (3) | 70.0 |" in md
    assert "| linear_probe | 75.0 ± 7.1 (2) | – | – |" in md and md.count(BELOW_FLOOR) == 2  # the row and the note
    assert (f"{BELOW_FLOOR} below the linear probe on frozen embeddings (linear_probe): the reader is under-trained "
            "or the task's signal is in the sentence embedding alone") in md
    # a trained reader below the probe while still improving: both marks
    _cell(runs, "sst2", "no_retrieval", 1, 5, still=True)
    md = format_markdown(build_report(runs, n_resamples=200))
    assert f"| no_retrieval | 50.0 ± 0.0 (1) {BELOW_FLOOR} ↑ |" in md
    # without a linear_probe row: no mark, no entry
    import shutil

    shutil.rmtree(runs / "sst2" / "linear_probe")
    report = build_report(runs, n_resamples=200)
    assert BELOW_FLOOR not in format_markdown(report) and "below_linear_probe" not in report["summary"]["fid"]["sst2"]


def test_runs_on_different_inputs_are_refused(runs, capsys):
    _cell(runs, "sst2", "fid", 9, 6, text_of=lambda i: f"other input {i}")
    with pytest.raises(InputError, match="different test inputs of task sst2"):
        merged_cells([runs])
    assert main(["report", str(runs)]) == 2
    assert "never compared" in capsys.readouterr().err
    assert main(["report", str(runs / "nothing")]) == 2


def test_demonstration_diagnostics_by_hand(tmp_path):
    from pgra.evaluation.diagnostics import demonstration_diagnostics, format_histogram

    lines = [  # gold, prediction, demonstration labels
        {"label": "1", "prediction": "1", "demo_labels": ["1", "1", "0"]},  # majority 1 = prediction; gold in
        {"label": "0", "prediction": "1", "demo_labels": ["1", "1", "1"]},  # majority 1 = prediction; gold not in
        {"label": "0", "prediction": "0", "demo_labels": ["1", "0"]},       # tie: prediction among tied; gold in
        {"label": "1", "prediction": "0", "demo_labels": ["1", "1", "0", "1"]},  # against the majority; gold in
        {"label": "1", "prediction": "1", "demo_labels": []},                # no demonstrations: not counted
    ]
    d = demonstration_diagnostics(lines, ["0", "1"])
    assert d["inputs"] == 4 and d["demos_per_input"] == 12 / 4
    assert d["label_histogram"] == {"0": 3 / 12, "1": 9 / 12}
    assert d["majority_agreement"] == 3 / 4 and d["gold_in_demos"] == 3 / 4
    assert format_histogram(d["label_histogram"]) == "1 75%, 0 25%"
    assert demonstration_diagnostics([{"label": "1", "prediction": "1", "evidence": []}], ["0", "1"]) is None

    root = tmp_path / "exp"
    for seed, cost in ((1, 100), (2, 300)):
        _cell(root, "sst2", "icl_kate", seed, 6)
        d = root / "sst2" / "icl_kate" / f"seed-{seed}"
        preds = [json.loads(x) for x in (d / "predictions_test.jsonl").read_text().splitlines()]
        for x in preds:  # every input shown two demonstrations: the gold label and "0"
            x["demo_labels"] = [x["label"], "0"]
        (d / "predictions_test.jsonl").write_text("".join(json.dumps(x) + "\n" for x in preds))
        cell = json.loads((d / "cell.json").read_text())
        cell["lm_cost"] = {"lm_calls": 10 * seed, "lm_tokens": cost}
        (d / "cell.json").write_text(json.dumps(cell))
    _cell(root, "sst2", "fid", 1, 7)
    report = build_report(root, n_resamples=200)
    e = report["diagnostics"]["icl_kate"]["sst2"]
    assert e["lm_calls"] == 15 and e["lm_tokens"] == 200 and e["demonstrations"]["gold_in_demos"] == 1.0
    # predictions right on the first 6 of GOLD = 1,0,1,0,1,0 then wrong (0->1, 1->0): majority is "0" or tied
    assert e["demonstrations"]["label_histogram"] == {"0": 15 / 20, "1": 5 / 20}
    assert e["demonstrations"]["majority_agreement"] == 8 / 10  # inputs 7 and 9: gold 0 (majority), predicted 1
    assert "fid" not in report["diagnostics"]
    assert main(["report", str(root), "--bootstrap", "200"]) == 0
    md = (root / "results.md").read_text()
    assert "## Demonstrations and LM cost" in md
    assert "| icl_kate | sst2 | 2.0 | 0 75%, 1 25% |" in md and "| 15 | 200 |" in md



def test_report_recomputes_from_the_predictions_and_refuses_changed_files(runs, capsys):
    """The report's numbers come from the predictions files: an older cell (no checksums) whose file no longer
    gives its recorded results, or a cell whose file's SHA-256 differs from the recorded one, is refused by
    name; nothing reports the numbers cell.json remembered."""
    import hashlib

    cell = runs / "sst2" / "fid" / "seed-1"
    preds = cell / "predictions_test.jsonl"
    good = preds.read_text()
    lines = good.splitlines()
    # an edit that keeps the inputs but flips the first (right) prediction: 5/10 instead of the recorded 6/10
    first = json.loads(lines[0])
    first["prediction"] = "0" if first["label"] == "1" else "1"
    preds.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    line = one_error_line(["report", str(runs), "--bootstrap", "200"], capsys)
    assert str(preds) in line and "accuracy 0.5000" in line and "changed after the cell finished" in line
    assert not (runs / "results.md").exists()
    # the same cell with checksums recorded: a truncated file is refused by its checksum
    preds.write_text(good)
    record = json.loads((cell / "cell.json").read_text())
    record["predictions_sha256"] = {s: hashlib.sha256((cell / f"predictions_{s}.jsonl").read_bytes()).hexdigest()
                                    for s in ("dev", "test")}
    (cell / "cell.json").write_text(json.dumps(record))
    assert build_report(runs, n_resamples=200)["summary"]["fid"]["sst2"]["mean"] == pytest.approx(0.7)
    preds.write_text("\n".join(lines[:-3]) + "\n")
    line = one_error_line(["report", str(runs), "--bootstrap", "200"], capsys)
    assert str(preds) in line and "SHA-256 differs" in line
    # a predictions file of a recorded split that is gone
    preds.write_text(good)
    (cell / "predictions_dev.jsonl").unlink()
    line = one_error_line(["report", str(runs), "--bootstrap", "200"], capsys)
    assert str(cell / "predictions_dev.jsonl") in line and "missing" in line


def test_md_text_keeps_any_text_on_its_line_as_text():
    """Text inside a markdown line (results.md's `--compare` source and file): no markup, no HTML, no line break."""
    from pgra.core.markdown import md_text

    assert md_text("a|b\nc\r\nd\u2028e\x85f") == "a\\|b c d e f"
    assert md_text("<b>x</b> & <!-- y") == "&lt;b&gt;x&lt;/b&gt; &amp; &lt;!-- y"
    assert md_text("[l](javascript:x) *b* _i_ `c` ~s~ \\") == "\\[l\\](javascript:x) \\*b\\* \\_i\\_ \\`c\\` \\~s\\~ \\\\"
    assert md_text(3.5) == "3.5"


def test_resolution_and_holm_columns_equal_a_hand_computation(runs):
    """The MDE is 2.80 x the spread of the very replicates the p-value came from; Holm's adjusted p-values are
    those of the table's family (every task x method) and of each task's, worked out by hand."""
    import numpy as np

    report = build_report(runs, n_resamples=2000, seed=5, min_inputs=10)
    want = paired_bootstrap(GOLD, [_preds(8), _preds(9), _preds(7)], [_preds(6), _preds(7), _preds(8)], ["0", "1"],
                            "accuracy", n_resamples=2000, seed=5)
    test = report["significance"]["pgra"]["sst2"]
    se = float(np.std(want.replicates, ddof=1))
    assert test["se"] == pytest.approx(se) and test["mde"] == pytest.approx((1.959964 + 0.841621) * se, rel=1e-6)
    assert test["below_resolution"] == (abs(test["delta"]) < test["mde"])
    # the table's family: pgra on sst2 and cr, knn_vote on sst2 (3 comparisons), sorted ascending by hand
    tests = report["significance"]
    members = [("pgra", "sst2"), ("pgra", "cr"), ("knn_vote", "sst2")]
    raw = sorted((tests[m][t]["p_value"], (m, t)) for m, t in members)
    running, adjusted = 0.0, {}
    for i, (p, who) in enumerate(raw):
        running = max(running, min(1.0, (3 - i) * p))
        adjusted[who] = running
    for m, t in members:
        assert tests[m][t]["p_holm_all"] == pytest.approx(adjusted[(m, t)])
    # cr's family has one member (its p-value unadjusted); sst2's two
    assert tests["pgra"]["cr"]["p_holm_task"] == pytest.approx(tests["pgra"]["cr"]["p_value"])
    lo, hi = sorted([tests["pgra"]["sst2"]["p_value"], tests["knn_vote"]["sst2"]["p_value"]])
    assert max(tests["pgra"]["sst2"]["p_holm_task"], tests["knn_vote"]["sst2"]["p_holm_task"]) == \
        pytest.approx(max(min(1, 2 * lo), hi))
    md = format_markdown(report)
    assert "## What the grid can resolve" in md and f"| pgra | {100 * test['mde']:.1f} |" in md
    assert test["below_resolution"]  # 10 inputs: an MDE of about 30 points, above the +10.0
    assert f"(p={test['p_value']:.3f}, Holm {test['p_holm_all']:.3f}) ≈" in md


def test_too_few_test_inputs_get_the_interval_and_no_star(runs, capsys):
    """10 shared test inputs (below the default 30): the difference and its 95% interval, no p-value, no star."""
    report = build_report(runs, n_resamples=2000, seed=5)
    test = report["significance"]["knn_vote"]["sst2"]
    assert test["p_value"] < 0.05  # a star it would have had
    md = format_markdown(report)
    lo, hi = (100 * x for x in test["ci"])
    assert f"| knn_vote | -30.0 [{lo:+.1f}, {hi:+.1f}] (n=10)" in md and "fewer than 30 shared test inputs" in md
    rows = [line for line in md.split("## Difference from")[1].split("##")[0].splitlines() if line.startswith("| ")]
    assert rows and not any("*" in row or "p=" in row for row in rows)
    assert main(["report", str(runs), "--bootstrap", "200"]) == 0
    assert "results.html (open it in a browser" in capsys.readouterr().out


def test_the_report_states_the_training_inputs_and_flags_methods_trained_on_different_ones():
    from pgra.evaluation.report import _train_inputs_note

    summary = {"fid": {"mr": {"train_inputs": [1500]}}, "pgra": {"mr": {"train_inputs": [1492]}},
               "icl_kate": {"mr": {"train_inputs": []}}, "no_retrieval": {"sst2": {"train_inputs": [100]}},
               "knn_vote": {"sst2": {"train_inputs": [100]}}}
    assert _train_inputs_note(["mr", "sst2"], summary) == (
        "Training inputs of the methods that train: mr: fid 1,500, pgra 1,492; sst2 100. ⚠ not the same inputs on "
        "mr: a gap between those methods is also one of training data.")
    assert _train_inputs_note(["sst2"], summary) == "Training inputs of the methods that train: sst2 100."
    assert _train_inputs_note(["mr"], {"icl_kate": {"mr": {"train_inputs": []}}}) is None  # (older cells: nothing)
    # an experiment run partly before cells recorded it: the readers without a record are named, no count is implied
    older = {"pgra": {"mr": {"train_inputs": [1500]}},
             "fid": {"mr": {"train_inputs": [], "train_inputs_unrecorded": True}}}
    assert _train_inputs_note(["mr"], older) == ("Training inputs of the methods that train: mr: pgra 1,500 (not "
                                                 "recorded: fid, cells from before pgra recorded it).")


def test_stars_follow_the_holm_adjusted_p_and_no_p_prints_as_zero(runs):
    """results.md stars a comparison by its Holm-adjusted p (as the docs' tables do), not its raw p; a p at the
    bootstrap's smallest value 1/(B+1) prints as a bound, never p=0.000."""
    from pgra.evaluation.report import p_text

    report = build_report(runs, n_resamples=2000, seed=5)
    tests = report["significance"]
    tests["knn_vote"]["sst2"].update(p_value=0.01, p_holm_all=0.2, inputs=100)  # raw p < 0.05, Holm's not
    tests["pgra"]["sst2"].update(p_value=1 / 2001, p_holm_all=3 / 2001, inputs=100)
    md = format_markdown(report)
    assert "(p=0.010, Holm 0.200))" not in md and "(p=0.010, Holm 0.200)*" not in md
    assert "(p=0.010, Holm 0.200)" in md
    assert "(p<0.0005, Holm 0.001)*" in md and "p=0.000" not in md
    assert "* Holm-adjusted p < 0.05" in md
    assert [p_text(p, b) for p, b in ((1 / 10001, 10000), (3 / 10001, 10000), (0.0421, 10000), (1 / 21, 20))] == \
        ["<0.0001", "=0.0003", "=0.042", "<0.05"]
