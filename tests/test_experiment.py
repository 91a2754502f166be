"""The experiment layer: methods, the grid (resume, failures, dry run), evaluate, Pipeline and predict."""

import json
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.cli.experiment import run_and_report
from pgra.core.config import from_dict
from pgra.core.errors import InputError
from pgra.experiment import CELL_FILE, Experiment, ExperimentConfig
from pgra.methods import knn_vote as knn_mod
from pgra.methods.knn_vote import vote
from pgra.tasks import get_task
from tests import numerics
from tests.conftest import launch_failure

METHODS = ["no_retrieval", "fid", "pgra", "knn_vote"]


def _config(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, **kw) -> dict:
    cfg = {
        "out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "methods": METHODS, "seeds": [1, 2],
        "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": "bm25"},
        "retrieve": {"k": 8},
        "rerank": {"lm": str(tiny_opt), "top_d": 3, "num_demos": 2, "cache_dir": str(tmp_path / "cache"),
                   "max_tokens_per_batch": 700},
        "reader": {"model": str(tiny_t5), "n_passages": 3, "max_length": 48, "batch_size": 4, "max_steps": 4,
                   "eval_every": 2, "eval_batch_size": 8, "learning_rate": 1e-3},
        "knn_vote": {"k": 3}, "show_progress": False, "report": True,
    }
    cfg.update(kw)
    return cfg


@pytest.fixture()
def grid(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5):
    return _config(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_grid_runs_resumes_and_reports(grid, tmp_path, monkeypatch, capsys):
    from pgra.methods import reader_method

    real_fit = reader_method.ReaderMethod.fit

    def flaky_fit(self, out, seed):
        if self.name == "pgra" and seed == 2:
            raise RuntimeError("injected failure")
        return real_fit(self, out, seed)

    monkeypatch.setattr(reader_method.ReaderMethod, "fit", flaky_fit)
    cfg = from_dict(ExperimentConfig, grid)
    failed = run_and_report(cfg)  # the grid, then its report (the command's)
    assert [(c.method, c.seed) for c in failed] == [("pgra", 2)]
    out = Path(grid["out"]) / "sky"
    assert "injected failure" in (out / "pgra" / "seed-2" / "error.log").read_text()
    # the kNN vote cannot depend on the seed: one cell, at the first seed
    done = {(m, s): (out / m / f"seed-{s}" / CELL_FILE) for m in METHODS for s in (1, 2) if (m, s) != ("knn_vote", 2)}
    assert all(p.exists() for k, p in done.items() if k != ("pgra", 2))
    assert not (out / "knn_vote" / "seed-2").exists()
    assert json.loads(done[("knn_vote", 1)].read_text())["seed_independent"] is True
    assert json.loads(done[("fid", 1)].read_text())["seed_independent"] is False
    for m in METHODS:  # one predictions schema for every method
        lines = _lines(out / m / "seed-1" / "predictions_test.jsonl")
        extra = {"demo_labels"} if m in ("pgra", "knn_vote") else set()  # the reranker's demonstrations; voters
        assert len(lines) == 6 and all(set(x) == {"id", "text", "label", "prediction", "scores", "evidence"} | extra
                                       for x in lines)
        assert all(x["prediction"] in ("sky", "town") for x in lines)
        assert all(len(x["evidence"]) == {"no_retrieval": 0, "fid": 3, "pgra": 3, "knn_vote": 3}[m] for x in lines)
    cand = {r["id"]: [c["id"] for c in r["ctxs"]] for r in _lines(out / "candidates" / "test.jsonl")}
    assert all(x["evidence"] == cand[x["id"]][:3] for x in _lines(out / "fid" / "seed-1" / "predictions_test.jsonl"))
    reranked = {r["id"]: [c["id"] for c in r["ctxs"]] for r in _lines(out / "reranked" / "test.jsonl")}
    assert all(x["evidence"] == reranked[x["id"]][:3]
               for x in _lines(out / "pgra" / "seed-1" / "predictions_test.jsonl"))
    cell = json.loads((out / "fid" / "seed-1" / CELL_FILE).read_text())
    assert cell["steps"] == 4 and [e["step"] for e in cell["evaluations"]] == [2, 4]
    assert cell["still_improving"] == (cell["best_step"] == 4)
    assert cell["results"]["test"]["examples"] == 6 and cell["seed"] == 1
    # the compared readers (and the kNN vote's voters) train on the same inputs, the reranker's demonstrations too
    trained = {m: json.loads((out / m / "seed-1" / CELL_FILE).read_text()).get("train_inputs") for m in METHODS}
    assert len(set(trained.values())) == 1 and None not in trained.values(), trained
    assert (f"Training inputs of the methods that train: sky {trained['fid']}."
            in (Path(grid["out"]) / "results.md").read_text())
    stamps = {k: p.stat().st_mtime_ns for k, p in done.items() if p.exists()}

    # the re-run trains only the failed cell and reuses every stage and finished cell
    monkeypatch.setattr(reader_method.ReaderMethod, "fit", real_fit)
    from pgra.reader import train as train_mod

    calls = []
    real_train = train_mod.train
    monkeypatch.setattr(train_mod, "train", lambda c, **kw: calls.append(c.out) or real_train(c, **kw))
    capsys.readouterr()
    assert run_and_report(from_dict(ExperimentConfig, grid)) == []
    assert calls == [str(out / "pgra" / "seed-2")]
    assert all(done[k].stat().st_mtime_ns == t for k, t in stamps.items())
    printed = capsys.readouterr().out
    assert "candidates: done, reused" in printed and "reranked: done, reused" in printed
    results = json.loads((Path(grid["out"]) / "results.json").read_text())
    assert {(r["method"], r["seed"]) for r in results["rows"] if r["split"] == "test"} == set(done)
    assert "| pgra |" in (Path(grid["out"]) / "results.md").read_text()

    # a changed reader setting makes the reader cells stale (not the kNN vote, not the stages)
    grid["reader"]["max_steps"] = 6
    plan = {(c.method, c.seed): c.status for c in Experiment(from_dict(ExperimentConfig, grid)).plan()}
    assert plan == {**{(m, s): "stale" for m in METHODS[:3] for s in (1, 2)}, ("knn_vote", 1): "done"}


def test_the_experiment_command_leaves_the_process_group_like_every_stage_command(grid, tmp_path, monkeypatch):
    """`pgra experiment` ends as build-index, retrieve and rerank do: its ranks meet, then leave the process group
    (a torchrun rank that exited holding it once aborted in gloo's teardown: "terminate called without an active
    exception", after the report was written)."""
    import yaml

    import pgra.runtime.distributed

    calls: list[str] = []
    real = pgra.runtime.distributed.shutdown_distributed
    monkeypatch.setattr(pgra.runtime.distributed, "shutdown_distributed", lambda: (calls.append("left"), real())[1])
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**grid, "methods": ["knn_vote"], "seeds": [3]}))
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    assert calls == ["left"]


def test_dry_run_and_cli_exit_codes(grid, tmp_path, capsys):
    import yaml

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**grid, "methods": ["knn_vote"], "seeds": [3]}))
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "knn_vote" in out and "todo" in out and "1 todo" in out
    assert not (Path(grid["out"]) / "sky" / "knn_vote").exists()
    assert main(["experiment", "--config", str(path)]) == 0
    assert (Path(grid["out"]) / "results.md").exists()
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    assert "1 done" in capsys.readouterr().out
    # a failing cell: exit 1 and the failed cell named (a reader folder whose config reads, but with no weights);
    # an out-of-range value: exit 2 before anything runs
    broken = tmp_path / "broken-reader"
    broken.mkdir()
    (broken / "config.json").write_text((Path(grid["reader"]["model"]) / "config.json").read_text())
    assert main(["experiment", "--config", str(path), "methods=fid", f"reader.model={broken}",
                 "report=false"]) == 1
    assert "fid/seed-3" in capsys.readouterr().err
    assert main(["experiment", "--config", str(path), "knn_vote.k=0"]) == 2
    assert "(field 'knn_vote.k'): must be at least 1, got 0" in capsys.readouterr().err
    assert main(["experiment", "--config", str(path), "methods=nope"]) == 2
    assert main(["experiment", "--config", str(path), "method_overrides={fidd: {reader: {}}}"]) == 2
    assert "unknown methods: ['fidd']" in capsys.readouterr().err
    assert main(["experiment", "--config", str(path), "task_overrides={sst22: {reader: {}}}"]) == 2
    assert "unknown tasks: ['sst22']" in capsys.readouterr().err
    # overrides of known tasks and methods outside the grid are unused (a base config run on a subset)
    assert main(["experiment", "--config", str(path), "--dry-run", "method_overrides={fid: {reader: {}}}",
                 "task_overrides={sst2: {reader: {learning_rate: 1.0}}}"]) == 0



def test_seed_independent_methods_are_planned_once(grid, tmp_path, capsys):
    """kNN vote, ICL with KATE and Skill-KNN ``single`` get one cell per task (the first seed); random draws and
    Skill-KNN's shuffled m rewrites stay per seed; older cells at other seeds are neither planned nor touched."""
    grid.update(seeds=[2, 1, 3], methods=["fid", "knn_vote", "icl_random", "icl_kate", "icl_skill_knn"],
                icl={"num_demos": 2})
    old = Path(grid["out"]) / "sky" / "knn_vote" / "seed-1"  # an older run's cell at another seed
    old.mkdir(parents=True)
    (old / CELL_FILE).write_text("{}")
    exp = Experiment(from_dict(ExperimentConfig, grid))
    plan = exp.plan()
    seeds = {m: [c.seed for c in plan if c.method == m] for m in grid["methods"]}
    assert seeds == {"fid": [2, 1, 3], "knn_vote": [2], "icl_random": [2, 1, 3], "icl_kate": [2],
                     "icl_skill_knn": [2]}
    assert {c.method for c in plan if c.seed_independent} == {"knn_vote", "icl_kate", "icl_skill_knn"}
    assert exp.seeds(str(grid["tasks"][0]), "knn_vote") == [2]
    described = exp.describe()
    knn_line = next(x for x in described.splitlines() if x.strip().startswith("knn_vote"))
    assert "seed 2" in knn_line and "(seed-independent: one run)" in knn_line
    assert not any("seed-independent" in x for x in described.splitlines() if x.strip().startswith("fid"))
    assert "cells: 0 done, 0 resume, 0 stale, 9 todo" in described.splitlines()
    assert (old / CELL_FILE).read_text() == "{}"
    # the m-rewrite variants shuffle the annotated demonstrations with the seed: one cell per seed (not with m=1)
    for demos, want in (({"variant": "consistency"}, [2, 1, 3]), ({"variant": "consistency", "rewrites": 1}, [2]),
                        ({"variant": "single"}, [2])):
        grid["method_overrides"] = {"icl_skill_knn": {"icl": {"demos": demos}}}
        plan = Experiment(from_dict(ExperimentConfig, grid)).plan()
        assert [c.seed for c in plan if c.method == "icl_skill_knn"] == want, demos
    # no demonstrations: nothing to draw
    grid.update(method_overrides={}, icl={"num_demos": 0})
    assert [c.seed for c in Experiment(from_dict(ExperimentConfig, grid)).plan() if c.method == "icl_random"] == [2]


def test_seed_independent_cell_is_marked_and_reported_as_deterministic(grid):
    grid.update(methods=["knn_vote"], seeds=[1, 2])
    assert run_and_report(from_dict(ExperimentConfig, grid)) == []
    out = Path(grid["out"])
    cell = out / "sky" / "knn_vote" / "seed-1" / CELL_FILE
    assert json.loads(cell.read_text())["seed_independent"] is True
    assert not (out / "sky" / "knn_vote" / "seed-2").exists()
    accuracy = json.loads(cell.read_text())["results"]["test"]["accuracy"]
    assert f"| knn_vote | {100 * accuracy:.1f} (det.) |" in (out / "results.md").read_text()
    # a cell written before the flag existed is reused and gets it (the report reads it)
    record = json.loads(cell.read_text())
    del record["seed_independent"]
    cell.write_text(json.dumps(record))
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    assert json.loads(cell.read_text()) == {**record, "seed_independent": True}


def test_repeated_seeds_methods_or_tasks_are_refused(grid, tmp_path, capsys):
    import yaml

    from pgra.core.errors import InputError

    for key, value in (("seeds", [1, 1]), ("seeds", "1,2,1"), ("methods", ["fid", "fid"])):
        with pytest.raises(InputError, match="more than once") as e:
            from_dict(ExperimentConfig, {**grid, key: value})
        assert e.value.field == key
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**grid, "methods": ["knn_vote"]}))
    assert main(["experiment", "--config", str(path), "--dry-run", "seeds=1,1"]) == 2
    err = capsys.readouterr().err
    assert "(field 'seeds')" in err and "lists 1 more than once" in err and err.count("\n") == 1
    assert not Path(grid["out"]).exists()

def test_vote_majority_and_ties_to_the_nearest():
    task = get_task("sst2")
    pos, neg = task.labels[1], task.labels[0]
    assert vote(task, [neg, pos, pos]) == (pos, {neg: 1 / 3, pos: 2 / 3})
    assert vote(task, [neg, pos, pos, neg])[0] == neg  # tie: the nearest voter's label
    assert vote(task, [pos, neg])[0] == pos


def test_knn_vote_on_a_hand_checked_example(tmp_path):
    from pgra.methods import MethodInputs
    from pgra.tasks import TaskSpec

    task = TaskSpec(name="color", labels=["red", "blue"], rerank_template="{text}", demo_words={"red": "red",
                    "blue": "blue"}, reader_words={"red": "red", "blue": "blue"})
    data = tmp_path / "cands"
    data.mkdir()
    train = [("a1", "red red red", "red"), ("a2", "red apple", "red"), ("b1", "blue sky", "blue"),
             ("b2", "blue blue sea", "blue"), ("b3", "blue blue red", "blue")]
    (data / "train.jsonl").write_text("".join(json.dumps({"id": i, "text": t, "label": y}) + "\n"
                                              for i, t, y in train))
    from pgra.core.config import to_dict
    from pgra.storage.artifacts import write_manifest

    write_manifest(data, {"kind": "candidates", "task": to_dict(task)})
    settings = from_dict(ExperimentConfig, {"index": {"retriever": "bm25", "out": "unused"}, "knn_vote": {"k": 3},
                                            "show_progress": False})
    method = knn_mod.KnnVote(MethodInputs(task, data, settings))
    run = tmp_path / "knn" / "seed-1"
    method.fit(run, seed=1)
    predictor = knn_mod.KnnVote.load(run)
    new = predictor.predict([{"id": "q", "text": "red", "label": "red"}])[0]
    assert new["evidence"][0] == "a1" and set(new["evidence"]) == {"a1", "a2", "b3"}
    assert new["prediction"] == "red" and new["scores"] == {"red": 2 / 3, "blue": 1 / 3}
    # never itself (identical text, whatever its id); a 1:1 tie goes to the nearest (a2); a test input that
    # shares an id with a training input (splits numbered from 0) may still get it as a voter
    predictor.k = 2
    own = predictor.predict([{"id": "a1", "text": "red red red", "label": "red"},
                             {"id": "x", "text": "red red red", "label": "red"},
                             {"id": "a1", "text": "red red", "label": "red"}])
    assert [o["evidence"] for o in own] == [["a2", "b3"], ["a2", "b3"], ["a1", "a2"]]
    assert [o["prediction"] for o in own] == ["red", "red", "red"]


def test_evaluate_reproduces_and_pipeline_predicts_like_the_run(grid, tmp_path, capsys):
    from pgra.serving.pipeline import Pipeline

    # fid_random and fid_upr: readers of other rerankers' stages, replayed by the generic stage's Replay
    grid.update(methods=["fid", "pgra", "knn_vote", "no_retrieval", "fid_random", "fid_upr"], seeds=[1], report=False)
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    out = Path(grid["out"]) / "sky"
    for m in grid["methods"]:
        run = out / m / "seed-1"
        cell = json.loads((run / CELL_FILE).read_text())
        assert main(["evaluate", "--run", str(run)]) == 0
        printed = capsys.readouterr().out
        assert f"accuracy {cell['results']['test']['accuracy']:.4f}" in printed
        saved = _lines(run / "predictions_test.jsonl")
        again = _lines(next((run / "evaluations").glob("*/predictions_test.jsonl")))
        assert [a["prediction"] for a in again] == [s["prediction"] for s in saved]
        assert [a["evidence"] for a in again] == [s["evidence"] for s in saved]
        # raw texts through the whole pipeline: the same labels, scores and evidence as the run's test predictions
        got = Pipeline.load(run).predict([s["text"] for s in saved])
        assert [g["prediction"] for g in got] == [s["prediction"] for s in saved]
        assert [[str(e["id"]) for e in g["evidence"]] for g in got] == [[str(i) for i in s["evidence"]]
                                                                         for s in saved]
        for g, s in zip(got, saved, strict=True):
            assert g["scores"] == {lab: numerics.close(p, depth=numerics.TINY_SEQ2SEQ, scale=1) for lab, p in s["scores"].items()}
    capsys.readouterr()
    # any reranker's run exports: its manifest (and its model, copied or pointed at) replays it elsewhere
    for method, copy in (("fid_random", []), ("fid_upr", ["--copy-lm", "--copy-index"])):
        shared = tmp_path / f"shared-{method}"
        assert main(["export", "--run", str(out / method / "seed-1"), "--out", str(shared), *copy]) == 0, \
            capsys.readouterr().err
        spec = json.loads((shared / "export.json").read_text())
        assert spec["reranked"]["kind"] == "reranked" and (spec["reranked"]["lm"] is None) == (method == "fid_random")
        assert sorted(p.name for p in (shared / "reranked").iterdir()) == ["manifest.json"]
        card = (shared / "README.md").read_text()
        assert "FiD + " in card and "prompt-guided-reranking" not in card and str(tmp_path) not in card
        reader_line = next(x for x in card.splitlines() if x.startswith("- reader: "))
        assert f"`{Path(grid['reader']['model']).name}`" in reader_line, reader_line  # the reader's model
        saved = _lines(out / method / "seed-1" / "predictions_test.jsonl")
        got = Pipeline.load(shared).predict([s["text"] for s in saved])
        assert [g["prediction"] for g in got] == [s["prediction"] for s in saved], method
        assert [[str(e["id"]) for e in g["evidence"]] for g in got] == [[str(i) for i in s["evidence"]]
                                                                         for s in saved], method
    capsys.readouterr()
    with pytest.raises(InputError, match="lm= applies to a run whose reranker has one"):
        Pipeline.load(tmp_path / "shared-fid_random", lm=tmp_path)
    assert main(["predict", "--run", str(out / "pgra" / "seed-1"), "--text", "The moon is bright.", "--json"]) == 0
    line = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert line["prediction"] in ("sky", "town") and len(line["evidence"]) == 3
    assert set(line["evidence"][0]) == {"id", "text", "score"}
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("The moon is bright.\n\nThe king lived in the city.\n")
    assert main(["predict", "--run", str(out / "knn_vote" / "seed-1"), "--input-file", str(inputs)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [x for x in printed if not x.startswith("    ")][1].endswith("The king lived in the city.")
    # bad input: one error line, exit 2
    for argv in (["predict", "--run", str(out / "fid" / "seed-1")], ["predict", "--run", str(tmp_path / "nope"),
                 "--text", "x"], ["evaluate", "--run", str(out / "fid" / "seed-1"), "--split", "nosuch"],
                 ["evaluate", "--run", str(out / "candidates")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err
    # another task's folder is refused
    other = tmp_path / "other"
    other.mkdir()
    from pgra.core.config import to_dict
    from pgra.storage.artifacts import write_manifest

    write_manifest(other, {"kind": "candidates", "task": to_dict(get_task("sst2"))})
    assert main(["evaluate", "--run", str(out / "fid" / "seed-1"), "--data", str(other)]) == 2
    assert "task 'sst2'" in capsys.readouterr().err


def test_a_finished_reader_cell_keeps_what_predicts_and_drops_its_resume_state(grid, tmp_path, capsys, monkeypatch):
    """A reader cell keeps its checkpoints until its cell.json is written (a cell killed before that resumes from
    them), then deletes them: best/, the predictions, metrics and the training log stay, and evaluate and
    Pipeline.load work on the cell. reader.keep_resume_state keeps them, and changes no key: a finished cell stays
    done."""
    from pgra.experiment import cell as cell_mod
    from pgra.serving.pipeline import Pipeline

    grid.update(methods=["fid"], seeds=[1], report=False)
    real_write = cell_mod.write_json

    def no_completion_mark(path, obj):  # killed once its reader finished, before its cell.json
        if Path(path).name == CELL_FILE:
            raise RuntimeError("killed before cell.json")
        real_write(path, obj)

    monkeypatch.setattr(cell_mod, "write_json", no_completion_mark)
    assert [(c.method, c.seed) for c in Experiment(from_dict(ExperimentConfig, grid)).run()] == [("fid", 1)]
    run = Path(grid["out"]) / "sky" / "fid" / "seed-1"
    assert (run / "manifest.json").is_file() and not (run / CELL_FILE).exists()
    assert (run / "checkpoints" / "step_4" / "trainer_state.json").is_file()  # the resume state, until cell.json
    monkeypatch.setattr(cell_mod, "write_json", real_write)
    capsys.readouterr()
    exp = Experiment(from_dict(ExperimentConfig, grid))
    assert [c.status for c in exp.plan()] == ["resume"] and exp.run() == []
    printed = capsys.readouterr().out
    assert "resuming" in printed and "resuming from" in printed and "(step 4)" in printed  # not trained again
    assert (run / CELL_FILE).is_file()
    assert not (run / "checkpoints").exists() and not list(run.glob(".checkpoints.*"))
    for name in ("best/model.safetensors", "predictions_dev.jsonl", "predictions_test.jsonl", "metrics.json",
                 "train_log.jsonl", "manifest.json"):
        assert (run / name).is_file(), name
    cell = json.loads((run / CELL_FILE).read_text())
    assert cell["steps"] == 4 and [e["step"] for e in cell["evaluations"]] == [2, 4]
    assert main(["evaluate", "--run", str(run)]) == 0
    assert f"accuracy {cell['results']['test']['accuracy']:.4f}" in capsys.readouterr().out
    saved = _lines(run / "predictions_test.jsonl")
    got = Pipeline.load(run).predict([s["text"] for s in saved])
    assert [g["prediction"] for g in got] == [s["prediction"] for s in saved]
    # keep_resume_state: no key changes (the finished cell stays done); a new cell keeps its checkpoints
    kept = {**grid, "reader": {**grid["reader"], "keep_resume_state": True}}
    plan = Experiment(from_dict(ExperimentConfig, kept)).plan()
    assert [(c.status, c.key) for c in plan] == [("done", cell["key"])]
    kept["out"] = str(tmp_path / "kept")
    assert Experiment(from_dict(ExperimentConfig, kept)).run() == []
    again = tmp_path / "kept" / "sky" / "fid" / "seed-1"
    assert (again / CELL_FILE).is_file() and (again / "checkpoints" / "step_4" / "trainer_state.json").is_file()
    assert json.loads((again / CELL_FILE).read_text())["key"] == cell["key"]


def test_paper_table2_config_matches_the_reader_configs():
    """The grid's per-task reader settings are Table 7's, as in configs/paper/reader_<task>.yaml."""
    from pgra.core.config import load_config
    from pgra.experiment import cell_settings
    from pgra.reader.config import TrainConfig

    root = Path(__file__).resolve().parents[1] / "configs" / "paper"
    cfg = load_config(ExperimentConfig, root / "experiment_table2.yaml")
    assert cfg.methods == ["no_retrieval", "fid", "pgra"] and cfg.seeds == [1, 2, 3] and len(cfg.tasks) == 8
    assert cfg.rerank.lm == "facebook/opt-13b" and cfg.reader.model == "t5-base" and cfg.reader.n_passages == 16
    assert cfg.retrieve.k == 150 and cfg.rerank.top_d == 16
    skip = ("task", "data", "out", "seed")
    for task in cfg.tasks:
        got = cell_settings(cfg, task, "pgra").reader
        want = load_config(TrainConfig, root / f"reader_{task}.yaml")
        assert {k: v for k, v in vars(got).items() if k not in skip} == \
            {k: v for k, v in vars(want).items() if k not in skip}, task


def test_each_cell_is_tracked(grid):
    from tests.test_tracking import _tensorboard_scalars

    grid.update(methods=["knn_vote"], seeds=[1], report=False, log_with="tensorboard")
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    cell = Path(grid["out"]) / "sky" / "knn_vote" / "seed-1"
    record = json.loads((cell / CELL_FILE).read_text())
    scalars = _tensorboard_scalars(cell / "tensorboard" / "sky-knn_vote-seed-1")
    assert scalars["test/accuracy"] == [(0, pytest.approx(record["results"]["test"]["accuracy"]))]  # numerics: fp32 event
    assert scalars["dev/accuracy"] == [(0, pytest.approx(record["results"]["dev"]["accuracy"]))]  # numerics: fp32 event


@pytest.mark.distributed
def test_two_process_grid_equals_single_process(grid, tmp_path, tiny_bert):
    import os
    import subprocess
    import sys

    import yaml

    root = Path(__file__).resolve().parents[1]
    grid.update(methods=["fid", "pgra", "knn_vote", "icl_kate"], seeds=[1], report=False,
                icl={"lm": grid["rerank"]["lm"], "num_demos": 2, "splits": ["test"], "max_tokens_per_batch": 700,
                     "demos": {"encoder": str(tiny_bert), "pooler": "mean", "cache_dir": str(tmp_path / "sel")}})
    grid["reader"].update(eval_every=0)
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    # parallel: ddp (each cell one DDP job over both processes; tests/test_grid_jobs.py runs cells side by side)
    multi = {**grid, "parallel": "ddp", "out": str(tmp_path / "multi"),
             "index": {**grid["index"], "out": str(tmp_path / "index2")},
             "rerank": {**grid["rerank"], "cache_dir": str(tmp_path / "cache2")},
             "icl": {**grid["icl"], "demos": {**grid["icl"]["demos"], "cache_dir": str(tmp_path / "sel2")}}}
    path = tmp_path / "multi.yaml"
    path.write_text(yaml.safe_dump(multi))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(root / "scripts" / "experiment.py"), "--config", str(path)]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, launch_failure(proc)
    one, two = Path(grid["out"]) / "sky", tmp_path / "multi" / "sky"
    for split in ("train", "dev", "test"):
        assert (one / "candidates" / f"{split}.jsonl").read_text() == (two / "candidates" / f"{split}.jsonl").read_text()
        a, b = _lines(one / "reranked" / f"{split}.jsonl"), _lines(two / "reranked" / f"{split}.jsonl")
        for ra, rb in zip(a, b, strict=True):
            assert [c["score"] for c in ra["ctxs"]] == numerics.close([c["score"] for c in rb["ctxs"]], depth=numerics.TINY_MODEL, scale=1)
    for m in ("knn_vote", "fid", "pgra"):
        cell_one = json.loads((one / m / "seed-1" / CELL_FILE).read_text())
        cell_two = json.loads((two / m / "seed-1" / CELL_FILE).read_text())
        assert cell_two["steps"] == cell_one["steps"] and cell_two["settings"] == cell_one["settings"]
        # the record says how many processes split its training loop (the plan and the cost table multiply the
        # loop's seconds by them): the readers' ranks trained them together; nothing of the kNN vote is split
        shared = 2 if m != "knn_vote" else 1
        assert (cell_one["cost"]["processes"], cell_two["cost"]["processes"]) == (1, shared)
        for c in (cell_one["cost"], cell_two["cost"]):
            assert ("split_s" in c) is (m != "knn_vote") and 0 <= c.get("split_s", 0) <= c["elapsed_s"]
    assert json.loads((two / "icl_kate" / "seed-1" / CELL_FILE).read_text())["cost"]["processes"] == 1  # main only
    for m in ("knn_vote", "icl_kate"):  # ICL runs on the main process while the other waits
        a, b = _lines(one / m / "seed-1" / "predictions_test.jsonl"), _lines(two / m / "seed-1" / "predictions_test.jsonl")
        assert [x["evidence"] for x in a] == [x["evidence"] for x in b]
        assert [x["prediction"] for x in a] == [x["prediction"] for x in b]
    assert json.loads((two / "icl_kate" / "seed-1" / CELL_FILE).read_text())["lm_cost"]["lm_tokens"] > 0
    # the readers trained under DDP: the same number of steps, losses close to the single process's
    for m in ("fid", "pgra"):
        la = [r["loss"] for r in _lines(one / m / "seed-1" / "train_log.jsonl")]
        lb = [r["loss"] for r in _lines(two / m / "seed-1" / "train_log.jsonl")]
        assert len(la) == len(lb) == 4 and la == pytest.approx(lb, abs=5e-2)  # numerics: 2 processes average other batches' losses
        # what the two processes trained, summed, is what the single process trained (pgra.runtime.cost)
        trained = [{(w["model"], w["part"]): w["tokens"] for w in json.loads((d / m / "seed-1" / CELL_FILE)
                                                                              .read_text())["cost"]["work"]
                    if w["mode"] == "trained"} for d in (one, two)]
        assert trained[0] == trained[1] and len(trained[0]) == 2


def test_icl_rows_and_per_query_reranking_in_a_grid(grid, tmp_path, tiny_bert, capsys):
    """ICL with random / KATE / Skill-KNN demonstrations next to PGRA with per-query (KATE) demonstrations: every
    cell runs, the report has their diagnostics, and evaluate / Pipeline reproduce the runs."""
    from pgra.serving.pipeline import Pipeline

    skills = tmp_path / "skills.jsonl"
    skills.write_text('{"input": "The sun is bright.", "skill": "Describing light in the sky."}\n'
                      '{"input": "The town has a market.", "skill": "Describing a place where people live."}\n')
    demos = {"encoder": str(tiny_bert), "pooler": "mean", "cache_dir": str(tmp_path / "sel"),
             "annotations": str(skills), "max_new_tokens": 6}
    grid["rerank"].update(demo_selection="kate", demos=demos)
    grid.update(methods=["pgra", "icl_random", "icl_kate", "icl_skill_knn"], seeds=[1, 2], reference="pgra",
                icl={"lm": grid["rerank"]["lm"], "num_demos": 3, "demos": demos, "splits": ["test"],
                     "max_tokens_per_batch": 700})
    assert run_and_report(from_dict(ExperimentConfig, grid)) == []
    out = Path(grid["out"]) / "sky"
    for m in ("icl_random", "icl_kate", "icl_skill_knn"):
        cell = json.loads((out / m / "seed-1" / CELL_FILE).read_text())
        assert set(cell["results"]) == {"test"} and cell["lm_cost"]["lm_tokens"] > 0
        lines = _lines(out / m / "seed-1" / "predictions_test.jsonl")
        assert all(len(x["evidence"]) == 3 and len(x["demo_labels"]) == 3 for x in lines)
    skill = json.loads((out / "icl_skill_knn" / "seed-1" / CELL_FILE).read_text())["lm_cost"]
    assert skill["selection"]["lm_calls"] == 12 + 6  # every training input and test input rewritten once
    rand = [_lines(out / "icl_random" / f"seed-{s}" / "predictions_test.jsonl") for s in (1, 2)]
    assert [x["evidence"] for x in rand[0]] != [x["evidence"] for x in rand[1]]  # the seed draws other demos
    for m in ("icl_kate", "icl_skill_knn"):  # nearest neighbours (of single rewrites): no seed, one run
        assert not (out / m / "seed-2").exists()
        assert json.loads((out / m / "seed-1" / CELL_FILE).read_text())["seed_independent"] is True
    assert json.loads((out / "icl_random" / "seed-2" / CELL_FILE).read_text())["seed_independent"] is False
    reranked = _lines(out / "reranked" / "test.jsonl")
    assert all(len(r["demonstrations"]) == 2 for r in reranked)  # num_demos of the rerank section
    assert len({tuple(d["id"] for d in r["demonstrations"]) for r in reranked}) > 1  # per query
    report = json.loads((Path(grid["out"]) / "results.json").read_text())
    assert set(report["diagnostics"]) == {"pgra", "icl_random", "icl_kate", "icl_skill_knn"}
    assert report["diagnostics"]["pgra"]["sky"]["demonstrations"]["demos_per_input"] == 2
    assert "## Demonstrations and LM cost" in (Path(grid["out"]) / "results.md").read_text()
    for m in ("pgra", "icl_kate"):
        run = out / m / "seed-1"
        saved = _lines(run / "predictions_test.jsonl")
        got = Pipeline.load(run).predict([s["text"] for s in saved])
        assert [g["prediction"] for g in got] == [s["prediction"] for s in saved]
        assert [[str(e["id"]) for e in g["evidence"]] for g in got] == [[str(i) for i in s["evidence"]]
                                                                         for s in saved]
        for g, s in zip(got, saved, strict=True):
            assert g["scores"] == {lab: numerics.close(p, depth=numerics.TINY_SEQ2SEQ, scale=1) for lab, p in s["scores"].items()}
    assert main(["evaluate", "--run", str(out / "icl_kate" / "seed-1")]) == 0


def test_demo_and_laptop_configs_run_every_method_on_mr_and_paper_configs_train_every_weight():
    from pgra.core.config import load_config
    from pgra.experiment import cell_settings
    from pgra.methods import METHODS

    root = Path(__file__).resolve().parents[1] / "configs"
    # `icl` is the generic row of the three pinned strategies; the readers of the other rerankers (fid_upr ...) are
    # the comparison docs/rerankers.md adds by an override (the demo keeps its time); `pgra_full` embeds the whole
    # corpus (about 19 min a task in bf16 on 2 cores: bench/README), beyond the demo's time; the laptop experiment
    # has it, at the paper's k through the corpus pass
    # (every strategy is a method icl_<strategy>: the grids pin the paper's three, and the demo the cheap new ones)
    every = sorted(m for m in METHODS.names() if m not in ("icl", "pgra_full")
                   and (METHODS[m].reads_reranker() in (None, "prompt_guided"))
                   and (not m.startswith("icl_") or m in ("icl_random", "icl_kate", "icl_skill_knn")))
    demo = load_config(ExperimentConfig, root / "demo" / "experiment.yaml")
    assert demo.tasks == ["mr"] and demo.retrieve.split_sizes["train"] >= 500
    assert sorted(demo.methods) == sorted([*every, "icl_bm25", "icl_mmr", "icl_votek"])
    assert demo.reader.freeze_encoder and demo.reader.early_stopping_patience > 0
    laptop = load_config(ExperimentConfig, root / "laptop" / "experiment.yaml")
    assert laptop.tasks == ["mr", "wiki_topic"] and sorted(laptop.methods) == sorted([*every, "pgra_full"])
    assert laptop.seeds == [1, 2, 3]
    assert (laptop.retrieve.k, laptop.rerank.k, laptop.rerank.corpus_pass) == (150, 150, "corpus")
    assert laptop.reader.train_top_layers == 1 and not laptop.reader.freeze_encoder
    assert laptop.reader.mixed_precision == "bf16"  # 0.41x the fp32 step on bf16 hardware (bench/README)
    assert laptop.retrieve.split_sizes["train"] >= 2000 and laptop.retrieve.split_sizes["test"] >= 1000
    for task in laptop.tasks:  # each task's Skill-KNN rewrites are annotated for that task
        assert task in cell_settings(laptop, task, "icl_skill_knn").icl.demos.annotations
    paper = load_config(ExperimentConfig, root / "paper" / "experiment_table2.yaml")
    assert not any(cell_settings(paper, t, "pgra").reader.freeze_encoder for t in paper.tasks)


def test_a_cell_json_edited_into_no_object_plans_as_stale(tmp_path):
    """A hand-edited cell.json that is a JSON list (or a string) is not the cell's completion mark: the plan calls the
    cell stale instead of failing with a traceback (the report refuses such a file by name)."""
    from pgra.experiment.layout import cell_status

    for text in ("[1, 2]", '"done"', '{"key": "k1"}'):
        (tmp_path / CELL_FILE).write_text(text)
        assert cell_status(tmp_path, "k1") == ("done" if text.startswith("{") else "stale")


# --- issue 53 (reliability round 4): what every cell needs, checked before the stages run ---

@pytest.mark.parametrize("override, field, text", [
    ("reader.model={tmp}/none", "reader.model", "is no folder here"),
    ("reader.model={tmp}/exp.yaml", "reader.model", "is no folder here"),  # a file, not a model folder
    ("reader.model={tmp}/plain", "reader.model", "has no config.json"),  # a folder that is no saved model
    ("reader.model=not a//hub id", "reader.model", "is no folder here"),
    ("reader.model=bad:name", "reader.model", "neither a folder here nor a hub id"),
    ("rerank.lm={tmp}/no-lm", "rerank.lm", "is no folder here"),
    ("method_overrides={{pgra: {{reader: {{model: {tmp}/none}}}}}}", "reader.model", "is no folder here"),
])
def test_the_models_the_grid_needs_are_checked_before_any_stage(grid, tmp_path, capsys, override, field, text):
    """A reader or reranker LM that cannot load would fail every cell after the stages ran: one error line naming
    the field instead, with nothing written."""
    import yaml

    from tests.conftest import one_error_line

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**grid, "methods": ["no_retrieval", "pgra"], "seeds": [1]}))
    (tmp_path / "plain").mkdir()
    line = one_error_line(["experiment", "--config", str(path), override.format(tmp=tmp_path)], capsys)
    assert f"field '{field}'" in line and text in line
    assert not Path(grid["out"]).exists() and not Path(grid["index"]["out"]).exists()


def test_models_a_grid_does_not_use_are_not_checked_and_hub_ids_are_shapes(grid, tmp_path, monkeypatch):
    from pgra.cli.experiment import check_grid, models_needed

    cfg = from_dict(ExperimentConfig, {**grid, "methods": ["knn_vote"], "rerank": {"lm": "/no/such/lm"},
                                       "reader": {"model": "/no/such/reader"}})
    assert models_needed(cfg) == []  # a BM25 index and a kNN vote load no model
    check_grid(cfg)
    hub = from_dict(ExperimentConfig, {**grid, "methods": ["icl", "fid_upr"], "rerank": {"lm": "facebook/opt-125m"},
                                       "icl": {"lm": "gpt2"}})
    assert {(f, n) for f, n, *_ in models_needed(hub)} == {("rerank.lm", "facebook/opt-125m"), ("icl.lm", "gpt2"),
                                                          ("reader.model", grid["reader"]["model"])}
    check_grid(hub)  # hub ids: their shape is checked here, the download when the stage runs
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    from pgra.core.errors import InputError

    with pytest.raises(InputError, match="offline") as e:
        check_grid(hub)
    assert e.value.field == "icl.lm"  # the first method's model


def test_fp16_readers_on_a_machine_without_a_gpu_are_refused_before_the_grid_runs(grid, tmp_path, capsys,
                                                                                 monkeypatch):
    import yaml

    from tests.conftest import one_error_line

    monkeypatch.setattr("pgra.runtime.training.fp16_device_present", lambda: False)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**grid, "methods": ["knn_vote", "fid"], "seeds": [1]}))
    line = one_error_line(["experiment", "--config", str(path), "method_overrides={fid: {reader: "
                           "{mixed_precision: fp16}}}"], capsys)
    assert "field 'reader.mixed_precision'" in line and "needs a GPU" in line
    assert not Path(grid["out"]).exists()
    assert main(["experiment", "--config", str(path), "methods=knn_vote", "reader.mixed_precision=fp16",
                 "--dry-run"]) == 0  # no reader in the grid: nothing to refuse


def test_a_cell_whose_cleanup_fails_is_still_done(grid, monkeypatch, capsys):
    """Deleting what only resuming needed comes after cell.json: an OSError there is a warning, not a failed cell."""
    from pgra.methods.base import Method

    def refuse(self, out):
        raise PermissionError(f"[Errno 13] Permission denied: '{out / 'checkpoints'}'")

    monkeypatch.setattr(Method, "finished", refuse)
    cfg = from_dict(ExperimentConfig, {**grid, "methods": ["knn_vote"], "seeds": [1]})
    assert run_and_report(cfg) == []
    assert (Path(grid["out"]) / "sky" / "knn_vote" / "seed-1" / CELL_FILE).exists()
    assert "[sky/knn_vote/seed-1] warning: done, but what only resuming needed was not deleted: [Errno 13]" in \
        capsys.readouterr().err


def test_limit_is_a_smoke_run_in_a_folder_of_its_own(grid, tmp_path, capsys):
    """`--limit N` (lm-evaluation-harness's habit): every split cut to N inputs and every reader to N steps, task and
    method overrides included, into OUT-limitN; the experiment's own folder is never written."""
    import yaml

    from pgra.experiment.config import apply_limit

    cfg = from_dict(ExperimentConfig, {**grid, "limit": 2, "retrieve": {"k": 8, "split_sizes": {"train": 5, "test": 1}},
                                       "method_overrides": {"fid": {"reader": {"max_steps": 9, "eval_every": 3}}},
                                       "icl": {"pool": 50}})
    limited = apply_limit(cfg)
    assert limited.out == grid["out"] + "-limit2" and limited.limit == 0
    assert limited.retrieve.split_sizes == {"train": 2, "test": 1} and limited.retrieve.max_examples == 2
    assert (limited.reader.max_steps, limited.reader.batch_size, limited.reader.eval_every, limited.icl.pool,
            limited.rerank.num_demos, limited.knn_vote.k, limited.retrieve.k) == (2, 2, 2, 2, 2, 2, 8)
    assert limited.method_overrides["fid"]["reader"] == {"max_steps": 2, "eval_every": 2}
    assert apply_limit(from_dict(ExperimentConfig, grid)).out == grid["out"]  # no limit: the config as written

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({**grid, "methods": ["no_retrieval", "fid", "knn_vote"], "seeds": [1]}))
    assert main(["experiment", "--config", str(path), "--limit", "2", "--dry-run"]) == 0
    assert "exp-limit2/sky/fid/seed-1" in capsys.readouterr().out
    assert main(["experiment", "--config", str(path), "--limit", "2"]) == 0
    assert not Path(grid["out"]).exists()
    cell = json.loads((Path(grid["out"] + "-limit2") / "sky" / "fid" / "seed-1" / CELL_FILE).read_text())
    assert cell["steps"] == 2 and cell["results"]["test"]["examples"] == 2
    assert main(["analyze", "--config", str(path), "--limit", "2", "analysis.analyses=consistency"]) == 0
    assert (Path(grid["out"] + "-limit2") / "analysis" / "analysis.md").exists() and not Path(grid["out"]).exists()
