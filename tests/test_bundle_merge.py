# numerics: shares and means of hand-made predictions merged from bundles, in Python floats
"""Results that travel: a bundle reports as its experiment does, and experiments run apart merge into one table."""

import json
import shutil
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.core.errors import InputError
from pgra.evaluation.bundle import verify_bundle, write_bundle
from pgra.evaluation.report import build_report
from tests.conftest import one_error_line
from tests.test_lock import _held
from tests.test_report import _cell

CONFIG = {"reader": {"max_steps": 10, "lr": 0.001}, "retrieve": {"k": 8, "out": "/somewhere"}, "tasks": ["sst2"],
          "seeds": [1, 2, 3], "methods": ["fid", "pgra"]}


def _cells(root: Path, task: str, seeds=(1, 2, 3), config=None) -> None:
    for seed, (fid, pgra) in zip(seeds, ((6, 8), (7, 9), (8, 7)), strict=False):
        for method, right in (("fid", fid), ("pgra", pgra)):
            _cell(root, task, method, seed, right if task == "sst2" else right - 1)
            path = root / task / method / f"seed-{seed}" / "cell.json"
            record = json.loads(path.read_text())
            record.update(config=config or CONFIG, key=f"{task}-{method}-{seed}")
            path.write_text(json.dumps(record))
    (root / task / "candidates").mkdir(exist_ok=True)
    (root / task / "candidates" / ".stage_key").write_text(f"cand-{task}\n")
    (root / task / "candidates" / "manifest.json").write_text(json.dumps({"kind": "candidates",
                                                                          "config": {"k": 8, "out": "/x"}}))
    (root / task / "candidates" / "candidates_test.jsonl").write_text("{}\n" * 50)  # stage data: never bundled


def _same_numbers(a: dict, b: dict) -> None:
    assert a["summary"] == b["summary"]
    assert a["significance"] == b["significance"]
    key = lambda r: (r["task"], r["method"], r["seed"], r["split"])  # noqa: E731
    assert sorted(a["rows"], key=key) == sorted(b["rows"], key=key)


@pytest.fixture()
def apart(tmp_path):
    """One grid (sst2, cr x fid, pgra x 3 seeds) run whole, and the same grid run as two experiments."""
    whole, a, b = tmp_path / "whole", tmp_path / "a", tmp_path / "b"
    for task in ("sst2", "cr"):
        _cells(whole, task)
    _cells(a, "sst2")
    _cells(b, "cr")
    return whole, a, b


def test_two_experiments_run_apart_merge_into_the_one_folder_report(apart, tmp_path):
    whole, a, b = apart
    one = build_report(whole, n_resamples=500, seed=3)
    merged = build_report([a, b], n_resamples=500, seed=3)
    _same_numbers(one, merged)
    assert [s["cells"] for s in merged["sources"]] == [6, 6] and merged["duplicates"] == []
    # a grid's seeds run apart merge too (one seed in one folder, two in another)
    c, d = tmp_path / "c", tmp_path / "d"
    for task in ("sst2", "cr"):
        _cells(c, task, seeds=(1,))
    for task in ("sst2", "cr"):
        for seed in (2, 3):
            for method in ("fid", "pgra"):
                shutil.copytree(whole / task / method / f"seed-{seed}", d / task / method / f"seed-{seed}")
        shutil.copytree(whole / task / "candidates", d / task / "candidates")
    _same_numbers(one, build_report([c, d], n_resamples=500, seed=3))

    assert main(["report", str(a), str(b), "--out", str(tmp_path / "merged"), "--bootstrap", "500", "--seed",
                 "3"]) == 0
    md = (tmp_path / "merged" / "results.md").read_text()
    assert "| fid | 70.0 ± 10.0 (3) | 60.0 ± 10.0 (3) | 65.0 |" in md
    assert not (a / "results.md").exists()  # the sources are only read


def test_a_bundle_reports_as_its_experiment_and_holds_no_stage_data(apart, tmp_path, capsys):
    whole, _, _ = apart
    assert main(["bundle", str(whole), "--out", str(tmp_path / "bundle")]) == 0
    assert "bundled 12 cells" in capsys.readouterr().out
    bundle = tmp_path / "bundle"
    manifest = verify_bundle(bundle)
    assert manifest["cells"] == 12 and manifest["environment"]["versions"]["python"]
    assert manifest["cells_environment"]["git_commits"] == [{"value": "abc123", "cells": 12}]
    assert "sst2/candidates/.stage_key" in manifest["files"]
    assert not (bundle / "sst2" / "candidates" / "candidates_test.jsonl").exists()
    _same_numbers(build_report(whole, n_resamples=500, seed=3), build_report(bundle, n_resamples=500, seed=3))
    assert main(["report", str(bundle), "--bootstrap", "500"]) == 0  # written into the bundle, which stays valid
    assert (bundle / "results.md").is_file()
    verify_bundle(bundle)
    # bundled again into the same folder (its report files are pgra's): replaced whole
    write_bundle(whole, bundle)
    assert not (bundle / "results.md").exists()


def test_pieces_of_one_folder_bundle_apart_and_merge_into_its_report(apart, tmp_path, capsys):
    """One folder that ran a task's seeds one after another is bundled a seed (or a task, or some methods) at a
    time; the pieces merge into the folder's report; a selection that takes nothing is one error line."""
    whole, _, _ = apart
    from pgra.evaluation.bundle import cell_idents

    (whole / "analysis").mkdir()  # what pgra analyze wrote (its table read every cell)
    (whole / "analysis" / "analysis.json").write_text(json.dumps({"tables": {}, "cells": {
        "calibration": cell_idents(whole)}}))
    (whole / "analysis" / "analysis.md").write_text("# Analyses\n")
    (whole / "analysis" / "sky").mkdir()  # an analysis's own run: never bundled
    (whole / "analysis" / "sky" / "pseudo_labels.json").write_text("{}")
    assert main(["bundle", str(whole), "--out", str(tmp_path / "all")]) == 0
    bundled = verify_bundle(tmp_path / "all")["files"]
    assert {"analysis/analysis.json", "analysis/analysis.md"} <= set(bundled)  # the analyses of every cell
    assert not any(f.startswith("analysis/sky") for f in bundled)
    import shutil as sh

    sh.copytree(whole, tmp_path / "copied")  # times are not what proves them current: the cells read are
    assert "analysis/analysis.json" in write_bundle(tmp_path / "copied", tmp_path / "from-copy")["files"]
    _cell(whole, "cr", "knn_vote", 1, 5)  # a cell that finished after the analyses: their table did not read it
    capsys.readouterr()
    assert main(["bundle", str(whole), "--out", str(tmp_path / "all")]) == 0
    out = capsys.readouterr().out
    assert "analyses were not bundled: its calibration table read other cells than the folder holds " \
           "(cr/knn_vote/seed-1)" in out
    manifest = verify_bundle(tmp_path / "all")
    assert not any(f.startswith("analysis/") for f in manifest["files"]) and manifest["analyses_left_out"]
    sh.rmtree(whole / "cr" / "knn_vote")
    for seed in (1, 2, 3):
        assert main(["bundle", str(whole), "--out", str(tmp_path / f"seed{seed}"), "--seeds", str(seed)]) == 0
        assert "bundled 4 cells" in capsys.readouterr().out
        manifest = verify_bundle(tmp_path / f"seed{seed}")
        assert manifest["selection"] == {"seeds": [seed]}
        assert {Path(f).parts[2] for f in manifest["files"] if len(Path(f).parts) == 4} == {f"seed-{seed}"}
        assert "cr/candidates/.stage_key" in manifest["files"]
        assert not any(f.startswith("analysis/") for f in manifest["files"])  # they describe every seed's cells
        assert "analyses_left_out" not in manifest
    _same_numbers(build_report(whole, n_resamples=500, seed=3),
                  build_report([tmp_path / f"seed{s}" for s in (1, 2, 3)], n_resamples=500, seed=3))
    assert main(["bundle", str(whole), "--out", str(tmp_path / "one"), "--tasks", "cr", "--methods", "pgra",
                 "--seeds", "1,3"]) == 0
    files = verify_bundle(tmp_path / "one")["files"]
    assert sorted(f for f in files if f.endswith("cell.json")) == ["cr/pgra/seed-1/cell.json", "cr/pgra/seed-3/cell.json"]
    assert not any(f.startswith("sst2/") for f in files)
    line = one_error_line(["bundle", str(whole), "--out", str(tmp_path / "none"), "--seeds", "7"], capsys)
    assert "no finished cells of {'seeds': [7]}" in line and not (tmp_path / "none").exists()


@pytest.mark.parametrize("siblings,threads", [("0-1\n", 2), ("0,32\n", 2), ("3\n", 1), ("x\n", None), (None, None)])
def test_the_environment_records_how_many_threads_share_a_core(siblings, threads, tmp_path, monkeypatch):
    """Two SMT threads of one core compute a compute-bound step about as fast as one: a record says so."""
    from pgra.runtime import environment

    path = tmp_path / "thread_siblings_list"
    if siblings is not None:
        path.write_text(siblings)
    monkeypatch.setattr(environment, "SIBLINGS", str(path))
    assert environment.threads_per_core() == threads == environment.cpu_description()["threads_per_core"]


def test_the_environment_records_every_variable_that_holds_the_cpu_back(monkeypatch):
    """A result made with torch, faiss and the matrix libraries held to AVX2 says so (the readers' fp32 numbers follow
    MKL's and oneDNN's kernels, not only torch's)."""
    from pgra.runtime.environment import SIMD_VARIABLES, environment_record

    for name in SIMD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert environment_record()["simd_env"] == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def test_an_edited_bundle_is_refused_by_name(apart, tmp_path, capsys):
    whole, _, _ = apart
    bundle = tmp_path / "bundle"
    write_bundle(whole, bundle)
    pred = bundle / "cr" / "pgra" / "seed-2" / "predictions_test.jsonl"
    pred.write_text(pred.read_text().replace('"prediction": "0"', '"prediction": "1"', 1))
    line = one_error_line(["report", str(bundle)], capsys)
    assert "cr/pgra/seed-2/predictions_test.jsonl" in line


def test_the_same_cell_twice_counts_once_and_two_runs_of_it_are_refused(apart, tmp_path, capsys):
    whole, a, b = apart
    both = build_report([whole, a], n_resamples=200)  # a's sst2 cells are whole's, byte for byte
    assert len(both["duplicates"]) == 6 and both["summary"] == build_report(whole, n_resamples=200)["summary"]
    rerun = a / "sst2" / "fid" / "seed-2"
    shutil.rmtree(rerun)
    _cell(a, "sst2", "fid", 2, 3)  # another run of the same cell: other predictions
    record = json.loads((rerun / "cell.json").read_text())
    (rerun / "cell.json").write_text(json.dumps({**record, "config": CONFIG, "key": "sst2-fid-2"}))
    line = one_error_line(["report", str(whole), str(a), "--out", str(tmp_path / "m")], capsys)
    assert "sst2/fid/seed-2" in line and str(whole) in line and str(a) in line and "different predictions" in line
    assert not (tmp_path / "m").exists()  # nothing written


def test_settings_that_must_agree_are_refused_naming_the_setting(apart, tmp_path, capsys):
    _, a, b = apart
    other = {**CONFIG, "reader": {**CONFIG["reader"], "lr": 0.01}}
    for cell in (b / "cr").glob("*/seed-*/cell.json"):
        cell.write_text(json.dumps({**json.loads(cell.read_text()), "config": other}))
    # cr's cells agree among themselves; only a task also in another source is compared: add sst2 cells to b
    _cells(b, "sst2", seeds=(4,), config=other)
    line = one_error_line(["report", str(a), str(b), "--out", str(tmp_path / "m")], capsys)
    assert "reader.lr" in line and "0.001" in line and "0.01" in line
    # where files lie and how each job chose its share may differ
    moved = {**CONFIG, "retrieve": {**CONFIG["retrieve"], "out": "/elsewhere"}, "seeds": [4]}
    for cell in (b / "sst2").glob("*/seed-4/cell.json"):
        cell.write_text(json.dumps({**json.loads(cell.read_text()), "config": moved}))
    for cell in (b / "cr").glob("*/seed-*/cell.json"):
        cell.write_text(json.dumps({**json.loads(cell.read_text()), "config": CONFIG}))
    report = build_report([a, b], n_resamples=200)
    assert report["summary"]["fid"]["sst2"]["n"] == 4


def test_methods_reading_other_stages_merge_and_one_method_on_other_data_is_refused(tmp_path, capsys):
    """Each method's cells are compared with that method's cells for the data they read: FiD reads the candidates,
    PGRA its reranked top-d, so their fingerprints differ within one run and across runs alike (a seed's piece of
    the laptop table was refused for that: its first cell, PGRA's, was held against FiD's of the other piece)."""
    a, b = tmp_path / "a", tmp_path / "b"
    _cells(a, "sst2", seeds=(1,))
    _cells(b, "sst2", seeds=(2, 3))
    data = {"fid": "cands-fp", "pgra": "reranked-fp"}
    for cell in [*a.glob("sst2/*/seed-*/cell.json"), *b.glob("sst2/*/seed-*/cell.json")]:
        record = json.loads(cell.read_text())
        cell.write_text(json.dumps({**record, "data": {"fingerprint": data[cell.parents[1].name]}}))
    for order in ([a, b], [b, a]):
        assert build_report(order, n_resamples=200)["summary"]["pgra"]["sst2"]["n"] == 3
    moved = b / "sst2" / "pgra" / "seed-3" / "cell.json"
    moved.write_text(json.dumps({**json.loads(moved.read_text()), "data": {"fingerprint": "other-fp"}}))
    line = one_error_line(["report", str(a), str(b), "--out", str(tmp_path / "m")], capsys)
    assert "sst2/pgra/seed-3" in line and "other data" in line and "other-fp" in line


def test_stages_built_with_other_keys_are_refused(apart, tmp_path, capsys):
    _, a, b = apart
    _cells(b, "sst2", seeds=(4,))
    (b / "sst2" / "candidates" / ".stage_key").write_text("another\n")
    (b / "sst2" / "candidates" / "manifest.json").write_text(json.dumps({"kind": "candidates",
                                                                         "config": {"k": 16, "out": "/y"}}))
    with pytest.raises(InputError, match=r"stage sst2/candidates .* setting 'k' is 8 there but 16 here"):
        build_report([a, b], n_resamples=200)


def test_bundle_and_merge_refuse_bad_folders(apart, tmp_path, capsys):
    whole, a, b = apart
    assert "--out" in one_error_line(["report", str(a), str(b)], capsys)
    assert "one of the merged folders" in one_error_line(["report", str(a), str(b), "--out", str(a)], capsys)
    for inside in (a / "report", tmp_path):  # a report inside a source, or around one, even without --analyses
        assert "lie one inside the other" in one_error_line(["report", str(a), str(b), "--out", str(inside)], capsys)
        assert "lie one inside the other" in one_error_line(["report", str(a), "--out", str(inside)], capsys)
    assert not (a / "report").exists()
    assert "lies inside the input" in one_error_line(["bundle", str(whole), "--out", str(whole / "bundle")], capsys)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert "notes.txt" in one_error_line(["bundle", str(whole), "--out", str(mine)], capsys)
    assert (mine / "notes.txt").read_text() == "mine"
    write_bundle(whole, tmp_path / "bundle")
    (tmp_path / "bundle" / "extra.txt").write_text("mine")
    assert "extra.txt" in one_error_line(["bundle", str(whole), "--out", str(tmp_path / "bundle")], capsys)


def test_a_merged_report_has_one_writer(apart, tmp_path, capsys):
    """Two reports into one folder of their own (or into a bundle) would mix their files: the second is refused
    while the first writes; a report beside its experiment's cells takes no lock (a running experiment can be
    reported)."""
    _, a, b = apart
    out = tmp_path / "m"
    with _held(out, "pgra report"):
        line = one_error_line(["report", str(a), str(b), "--out", str(out), "--bootstrap", "100"], capsys)
        assert "is being written by" in line and "pgra report" in line
        assert not (out / "results.md").exists()
    with _held(a, "pgra experiment"):
        assert main(["report", str(a), "--bootstrap", "100"]) == 0
    write_bundle(a, tmp_path / "bundle")  # a report written into a bundle (nothing else writes there) is locked
    with _held(tmp_path / "bundle", "pgra report"):
        assert "is being written by" in one_error_line(["report", str(tmp_path / "bundle"), "--bootstrap", "100"],
                                                       capsys)
    assert main(["report", str(tmp_path / "bundle"), "--bootstrap", "100"]) == 0
    verify_bundle(tmp_path / "bundle")
    assert main(["report", str(a), str(b), "--out", str(out), "--bootstrap", "100"]) == 0  # the holder is gone
    assert (out / "results.md").is_file()


def test_a_hand_made_cell_in_a_bundle_and_a_split_name_that_leaves_its_cell_are_refused(apart, tmp_path, capsys):
    whole, _, _ = apart
    bundle = tmp_path / "bundle"
    write_bundle(whole, bundle)
    shutil.copytree(bundle / "cr" / "fid" / "seed-1", bundle / "cr" / "fid" / "seed-9")  # not bundled: unchecked
    line = one_error_line(["report", str(bundle)], capsys)
    assert "cr/fid/seed-9/cell.json" in line and "does not list" in line
    # a cell.json whose split names a path outside its cell: nothing copied, nothing written
    cell = whole / "cr" / "fid" / "seed-1" / "cell.json"
    record = json.loads(cell.read_text())
    record["results"]["../../../../escape"] = record["results"]["test"]
    cell.write_text(json.dumps(record))
    assert "a split" in one_error_line(["bundle", str(whole), "--out", str(tmp_path / "b2")], capsys)
    assert not (tmp_path / "b2").exists() and not list(tmp_path.glob("escape*"))


def _with_evidence(root: Path) -> None:
    """Give every prediction the evidence ids its reader read: FiD [i, i+1]; PGRA shares i with FiD on even inputs
    and nothing on odd ones."""
    for path in root.glob("*/*/seed-*/predictions_test.jsonl"):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        for i, line in enumerate(lines):
            line["evidence"] = [i, i + 1] if path.parents[1].name == "fid" else \
                ([i, 100 + i] if i % 2 == 0 else [200 + i, 300 + i])
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_results_analyses_of_experiments_run_apart_equal_the_one_folder_ones(apart, tmp_path, capsys):
    whole, a, b = apart
    for root in apart:
        _with_evidence(root)
    args = ["--analyses", "differences,calibration", "--bootstrap", "200"]
    assert main(["report", str(whole), "--out", str(tmp_path / "one"), *args]) == 0
    write_bundle(a, tmp_path / "bundle-a")  # a bundle and an experiment folder, merged
    assert main(["report", str(tmp_path / "bundle-a"), str(b), "--out", str(tmp_path / "m"), *args]) == 0
    assert "analyses (differences, calibration) written to" in capsys.readouterr().out
    one = json.loads((tmp_path / "one" / "analysis" / "analysis.json").read_text())["tables"]
    merged = json.loads((tmp_path / "m" / "analysis" / "analysis.json").read_text())["tables"]
    assert merged == one and set(one) == {"differences", "calibration"}
    # by hand: 10 inputs x 3 seeds of sst2; FiD and PGRA share 1 of 2 sentences on the 5 even inputs, none on the odd
    sst2 = next(r for r in one["differences"] if r["task"] == "sst2")
    o = sst2["overlap"]
    assert o["d"] == 2 and o["pairs"] == 30 and o["mean_overlap"] == pytest.approx(0.25)
    assert [(r["shared"], r["inputs"]) for r in o["rows"]] == [(0, 15), (1, 15), (2, 0)]
    assert "rank_shift" not in sst2  # the reranked stage's records are its data: not in a bundle
    fid = next(r for r in one["calibration"] if (r["task"], r["method"]) == ("sst2", "fid"))
    assert fid["seeds"] == [1, 2, 3] and fid["accuracy"] == pytest.approx(0.7)
    assert (tmp_path / "m" / "analysis" / "overlap.png").read_bytes()[:4] == b"\x89PNG"
    assert "analysis/overlap.png" in (tmp_path / "m" / "results.md").read_text()  # linked from the report
    verify_bundle(tmp_path / "bundle-a")  # the sources are only read
    # analysed again with fewer analyses: only those tables, and the figures of the others are gone
    assert main(["report", str(tmp_path / "bundle-a"), str(b), "--out", str(tmp_path / "m"), "--analyses",
                 "calibration", "--bootstrap", "200"]) == 0
    again = json.loads((tmp_path / "m" / "analysis" / "analysis.json").read_text())
    assert set(again["tables"]) == {"calibration"} and not (tmp_path / "m" / "analysis" / "overlap.png").exists()
    assert (tmp_path / "m" / "analysis" / "reliability_sst2.png").is_file()


def test_analyses_that_need_the_experiment_are_refused_on_results(apart, tmp_path, capsys):
    whole, _, _ = apart
    write_bundle(whole, tmp_path / "bundle")
    line = one_error_line(["report", str(tmp_path / "bundle"), "--out", str(tmp_path / "m"),
                           "--analyses", "differences,consistency"], capsys)
    assert "consistency needs the experiment folder" in line and "differences, calibration, cost" in line
    assert not (tmp_path / "m").exists()  # nothing written
    for inside in (tmp_path / "bundle" / "sub", tmp_path):  # --out inside a source, or a source inside --out
        line = one_error_line(["report", str(tmp_path / "bundle"), "--out", str(inside), "--analyses", "calibration"],
                              capsys)
        assert "lie one inside the other" in line
    assert not (tmp_path / "bundle" / "sub").exists()
    line = one_error_line(["report", str(tmp_path / "bundle"), "--analyses", "nonesuch"], capsys)
    assert "unknown analysis 'nonesuch'" in line
    # an experiment folder's own analyses are pgra analyze's: the results' go elsewhere
    line = one_error_line(["report", str(whole), "--analyses", "calibration"], capsys)
    assert "is not a results bundle" in line and "--out DIR" in line and not (whole / "analysis").exists()
    # a bundle without its experiment's analyses takes those of its results in place, still verifies, and is
    # replaced whole by a new bundle of the experiment
    assert main(["report", str(tmp_path / "bundle"), "--analyses", "calibration", "--bootstrap", "100"]) == 0
    assert (tmp_path / "bundle" / "analysis" / "analysis.json").is_file()
    verify_bundle(tmp_path / "bundle")
    assert main(["bundle", str(whole), "--out", str(tmp_path / "bundle")]) == 0
    assert not (tmp_path / "bundle" / "analysis").exists()


def test_results_analyses_count_a_seed_independent_method_once(apart, tmp_path):
    """A seed-independent method's cells at later seeds (left by runs made before it ran once) are copies of one
    run: the analyses, as the report, read its first only."""
    whole, _, _ = apart
    for seed in (1, 2):
        _cell(whole, "sst2", "knn_vote", seed, 4, fixed=True)
    assert main(["report", str(whole), "--out", str(tmp_path / "m"), "--analyses", "calibration",
                 "--bootstrap", "100"]) == 0
    rows = json.loads((tmp_path / "m" / "analysis" / "analysis.json").read_text())["tables"]["calibration"]
    vote = next(r for r in rows if r["method"] == "knn_vote")
    assert vote["seeds"] == [1] and vote["seed_independent"] and vote["flips"] is None


def test_results_analyses_use_the_options_the_cells_recorded(apart, tmp_path, capsys):
    whole, _, _ = apart
    for cell in whole.glob("*/*/seed-*/cell.json"):
        record = json.loads(cell.read_text())
        record["config"] = {**record["config"], "analysis": {"calibration": {"n_bins": 4}}}
        cell.write_text(json.dumps(record))
    assert main(["report", str(whole), "--out", str(tmp_path / "m"), "--analyses", "calibration",
                 "--bootstrap", "100"]) == 0
    rows = json.loads((tmp_path / "m" / "analysis" / "analysis.json").read_text())["tables"]["calibration"]
    assert {r["n_bins"] for r in rows} == {4} and all(len(r["bins"]) == 4 for r in rows)
    cell = whole / "cr" / "fid" / "seed-2" / "cell.json"
    record = json.loads(cell.read_text())
    record["config"]["analysis"]["calibration"]["n_bins"] = 7
    cell.write_text(json.dumps(record))
    line = one_error_line(["report", str(whole), "--out", str(tmp_path / "m2"), "--analyses", "calibration"], capsys)
    assert "other options of analysis calibration" in line and "'n_bins': 7" in line
