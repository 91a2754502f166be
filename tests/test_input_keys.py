# numerics: a probability and its complement from one hand-made record
"""Finished results know their task's content and the data they read: a changed task (labels, metric, template,
data files) makes its stages and cells stale; a cell whose data folder a later experiment rebuilt is refused by
evaluate and predict; a moved experiment folder still predicts; two tasks of one name are refused."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from pgra.cli import main
from pgra.core.config import from_dict
from pgra.core.errors import InputError
from pgra.experiment import CELL_FILE, Experiment, ExperimentConfig
from tests.conftest import SENTENCES, one_error_line


def _grid(tmp_path, corpus_txt, sky_task, tiny_t5, methods, **kw) -> dict:
    cfg = {"out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "methods": methods, "seeds": [1],
           "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": "bm25"},
           "retrieve": {"k": 6}, "knn_vote": {"k": 3},
           "reader": {"model": str(tiny_t5), "n_passages": 2, "max_length": 40, "batch_size": 4, "max_steps": 2,
                      "eval_every": 2, "eval_batch_size": 8},
           "show_progress": False, "report": False}
    cfg.update(kw)
    return cfg


def _run(grid: dict) -> Experiment:
    exp = Experiment(from_dict(ExperimentConfig, grid))
    assert exp.run() == []
    return exp


def _statuses(grid: dict) -> tuple[bool, list[str]]:
    exp = Experiment(from_dict(ExperimentConfig, grid))
    task = exp.cfg.tasks[0]
    return exp.stage_done(task, "candidates"), [c.status for c in exp.plan()]


def _edit_task(sky_task: Path, **changes) -> None:
    spec = yaml.safe_load(sky_task.read_text())
    spec.update(changes)
    sky_task.write_text(yaml.safe_dump(spec))


def test_flipped_labels_make_every_stage_and_cell_stale_and_rerun(tmp_path, corpus_txt, sky_task, tiny_t5, capsys):
    grid = _grid(tmp_path, corpus_txt, sky_task, tiny_t5, ["knn_vote"])
    _run(grid)
    cell = Path(grid["out"]) / "sky" / "knn_vote" / "seed-1" / CELL_FILE
    before = json.loads(cell.read_text())["results"]["test"]["accuracy"]
    assert _statuses(grid) == (True, ["done"])
    test_file = tmp_path / "skydata" / "test.jsonl"
    rows = [json.loads(x) for x in test_file.read_text().splitlines()]
    flipped = [{**r, "label": {"sky": "town", "town": "sky"}[r["label"]]} for r in rows]
    test_file.write_text("".join(json.dumps(r) + "\n" for r in flipped))
    assert _statuses(grid) == (False, ["stale"])
    capsys.readouterr()
    Experiment(from_dict(ExperimentConfig, {**grid, "dry_run": True})).run()
    plan = capsys.readouterr().out
    assert "candidates to run" in plan and "1 stale" in plan
    _run(grid)  # recomputed: the gold labels of the new data
    after = json.loads(cell.read_text())["results"]["test"]["accuracy"]
    assert after == pytest.approx(1 - before)
    gold = {json.loads(x)["label"] for x in (cell.parent / "predictions_test.jsonl").read_text().splitlines()}
    assert gold == {"sky", "town"} and _statuses(grid) == (True, ["done"])


@pytest.mark.parametrize("change", [{"metric": "macro_f1"},
                                    {"rerank_template": "Sky or town?\n{text}"},
                                    {"reader_words": {"sky": "heaven", "town": "city"}}])
def test_a_changed_task_spec_makes_the_grid_stale(tmp_path, corpus_txt, sky_task, tiny_t5, change):
    grid = _grid(tmp_path, corpus_txt, sky_task, tiny_t5, ["knn_vote"])
    _run(grid)
    _edit_task(sky_task, description="only words")  # a description changes no result
    assert _statuses(grid) == (True, ["done"])
    _edit_task(sky_task, **change)
    assert _statuses(grid) == (False, ["stale"])


def _other_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "other_corpus.txt"
    path.write_text("\n".join(reversed(SENTENCES)) + "\nThe sky and the town are far apart.\n", encoding="utf-8")
    return path


def test_a_cell_whose_data_a_later_experiment_rebuilt_is_refused(tmp_path, corpus_txt, sky_task, tiny_t5, capsys):
    grid = _grid(tmp_path, corpus_txt, sky_task, tiny_t5, ["fid"])
    _run(grid)
    run = Path(grid["out"]) / "sky" / "fid" / "seed-1"
    assert main(["evaluate", "--run", str(run)]) == 0
    # a later experiment over the same folder with another index: the candidates are rebuilt, the fid cell is not
    # part of its grid
    later = {**grid, "methods": ["knn_vote"],
             "index": {**grid["index"], "corpus": str(_other_corpus(tmp_path)), "out": str(tmp_path / "index2")}}
    _run(later)
    for argv in (["predict", "--run", str(run), "--text", "The moon is bright."], ["evaluate", "--run", str(run)]):
        line = one_error_line(argv, capsys)
        assert f"{run} read {run.parent.parent / 'candidates'}" in line and "fingerprint" in line, line
        assert "re-run the experiment" in line
    # the report would put a cell on the old candidates beside the knn_vote cell on the new ones
    line = one_error_line(["report", grid["out"]], capsys)
    assert f"{run} read {run.parent.parent / 'candidates'}" in line and "another out" in line, line
    # another folder given explicitly is the caller's choice
    assert main(["evaluate", "--run", str(run), "--data", str(run.parent.parent / "candidates")]) == 0


def test_a_reranked_cell_whose_candidates_a_later_experiment_rebuilt_is_refused(tmp_path, corpus_txt, sky_task,
                                                                                tiny_t5, tiny_opt, capsys):
    rerank = {"lm": str(tiny_opt), "top_d": 2, "num_demos": 2, "cache_dir": str(tmp_path / "cache"),
              "max_tokens_per_batch": 700}
    grid = _grid(tmp_path, corpus_txt, sky_task, tiny_t5, ["pgra"], rerank=rerank)
    _run(grid)
    run = Path(grid["out"]) / "sky" / "pgra" / "seed-1"
    assert main(["predict", "--run", str(run), "--text", "The moon is bright."]) == 0
    later = {**grid, "methods": ["knn_vote"],  # rebuilds the candidates; the reranked folder is left as it was
             "index": {**grid["index"], "corpus": str(_other_corpus(tmp_path)), "out": str(tmp_path / "index2")}}
    _run(later)
    line = one_error_line(["predict", "--run", str(run), "--text", "The moon is bright."], capsys)
    assert f"{run.parent.parent / 'reranked'} read {run.parent.parent / 'candidates'}" in line, line


def test_a_moved_experiment_folder_still_predicts_and_evaluates(tmp_path, corpus_txt, sky_task, tiny_t5, capsys):
    from pgra.evaluation.evaluate import evaluate_run
    from pgra.serving.pipeline import Pipeline

    grid = _grid(tmp_path, corpus_txt, sky_task, tiny_t5, ["fid", "knn_vote"])
    _run(grid)
    first = Pipeline.load(Path(grid["out"]) / "sky" / "fid" / "seed-1").predict(["The moon is bright."])
    moved = tmp_path / "moved"
    shutil.move(grid["out"], moved)
    for method in ("fid", "knn_vote"):
        run = moved / "sky" / method / "seed-1"
        result = evaluate_run(run)
        assert result["data"] == str((moved / "sky" / "candidates").resolve())
        assert result["examples"] == 6
    assert Pipeline.load(moved / "sky" / "fid" / "seed-1").predict(["The moon is bright."]) == first


def test_two_tasks_of_one_name_are_refused(tmp_path, corpus_txt, sky_task, tiny_t5):
    twin = tmp_path / "twin.yaml"
    spec = yaml.safe_load(sky_task.read_text())
    spec["data"]["path"] = str(tmp_path / "skydata")
    twin.write_text(yaml.safe_dump(spec))  # another file, the same name 'sky'
    grid = _grid(tmp_path, corpus_txt, sky_task, tiny_t5, ["knn_vote"], tasks=[str(sky_task), str(twin)])
    with pytest.raises(InputError, match="both named 'sky'"):
        Experiment(from_dict(ExperimentConfig, grid))
    assert not Path(grid["out"]).exists()
