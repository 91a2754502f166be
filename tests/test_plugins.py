# numerics: a toy method's accuracy, counted from labels
"""Every kind of part plugs in as one file registered from outside the package: a toy method, a toy demonstration
strategy and a toy analysis (tests/toys/) run through `pgra experiment` and `pgra analyze` like the built-in ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pgra.cli import main


@pytest.fixture()
def toys():
    from pgra.analysis import ANALYSES, register_analysis
    from pgra.methods import METHODS, register_method
    from pgra.selection import STRATEGIES, register_selector
    from tests.toys import toy_analysis, toy_method, toy_selection

    register_method(toy_method.Majority)
    register_selector(toy_selection.Longest)
    register_analysis(toy_analysis.ANALYSIS)
    yield
    METHODS.pop("toy_majority")
    METHODS.pop("icl_toy_longest", None)  # the strategy's method, made when the grid looked it up
    STRATEGIES.pop("toy_longest")
    ANALYSES.pop("toy_length")


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_toy_method_strategy_and_analysis_run_through_the_commands(toys, tmp_path, corpus_txt, sky_task, tiny_opt,
                                                                    capsys):
    grid = {"out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "methods": ["toy_majority", "icl", "icl_toy_longest"],
            "seeds": [1],
            "reference": "toy_majority",
            "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": "bm25"},
            "retrieve": {"k": 4},
            "icl": {"lm": str(tiny_opt), "selection": "random", "num_demos": 2, "splits": ["test"],
                    "max_tokens_per_batch": 700, "demos": {"toy_skip": 1}},  # the toy strategy's own option
            "analysis": {"analyses": ["toy_length"], "toy_length": {"words": 6}}, "show_progress": False}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(grid))
    assert main(["experiment", "--config", str(path)]) == 0
    out = tmp_path / "exp" / "sky"
    train = _lines(out / "candidates" / "train.jsonl")
    majority = max(["sky", "town"], key=lambda lab: sum(r["label"] == lab for r in train))
    toy = _lines(out / "toy_majority" / "seed-1" / "predictions_test.jsonl")
    assert toy and all(x["prediction"] == majority for x in toy)
    longest = [r["id"] for r in sorted(train, key=lambda r: -len(r["text"]))[1:3]]
    # the strategy's own method (icl_<strategy>) pins it; `icl` follows icl.selection (random here)
    icl = _lines(out / "icl_toy_longest" / "seed-1" / "predictions_test.jsonl")
    assert all([str(i) for i in x["evidence"]] == [str(i) for i in longest] for x in icl)
    drawn = _lines(out / "icl" / "seed-1" / "predictions_test.jsonl")
    assert any([str(i) for i in x["evidence"]] != [str(i) for i in longest] for x in drawn)
    assert "| toy_majority |" in (tmp_path / "exp" / "results.md").read_text()

    assert main(["analyze", "--config", str(path)]) == 0
    tables = json.loads((tmp_path / "exp" / "analysis" / "analysis.json").read_text())["tables"]
    short = [x for x in toy if len(x["text"].split()) <= 6]
    want = sum(x["prediction"] == x["label"] for x in short) / len(short)
    row = next(r for r in tables["toy_length"] if r["method"] == "toy_majority" and r["half"] == "short")
    assert row["inputs"] == len(short) and row["accuracy"] == pytest.approx(want)
    assert "## Accuracy by input length" in (tmp_path / "exp" / "analysis" / "analysis.md").read_text()
    # an option the toy analysis does not declare is refused by name, like a built-in one's
    assert main(["analyze", "--config", str(path), "analysis.toy_length.word=3"]) == 2
    assert "analysis.toy_length.word" in capsys.readouterr().err


def test_the_built_in_analyses_keep_their_order_whatever_imports_them_first():
    """analysis.md shows the analyses in one order: the registry does not follow the order modules were imported."""
    import subprocess
    import sys

    code = ("import pgra.analysis.case_study, pgra.analysis.costs, pgra.analysis.calibration\n"
            "from pgra.analysis.base import analysis_names\nprint(','.join(analysis_names()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "consistency,sweep,retrievers,differences,calibration,leakage,attribution,ceiling,cost,case_study"


@pytest.fixture()
def toy_reranker():
    from pgra.methods import METHODS
    from pgra.rerank.base import RERANKERS, register_reranker
    from tests.toys.toy_reranker import Shortest

    register_reranker(Shortest)
    yield Shortest
    RERANKERS.pop("toy_shortest")
    METHODS.pop("fid_toy_shortest", None)  # its method, made when the grid looked it up


def test_a_plug_in_reranker_is_compared_through_its_fid_method(toy_reranker, tmp_path, corpus_txt, sky_task,
                                                                tiny_t5, capsys):
    """A reranker registered from outside is a method of its own, fid_<name>, as every strategy is icl_<name>: its
    stage reranks the shared candidates, its reader reads that top d; naming it in rerank.reranker instead (which a
    grid's methods would replace) is refused with one error line naming that method."""
    from pgra.methods import METHODS

    assert "fid_toy_shortest" in METHODS.names() and "fid_prompt_guided" not in METHODS.names()
    assert "fid_query_likelihood" not in METHODS.names()  # read by fid_upr already
    grid = {"out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "methods": ["fid", "fid_toy_shortest"],
            "seeds": [1], "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": "bm25"},
            "retrieve": {"k": 6}, "rerank": {"top_d": 2},
            "reader": {"model": str(tiny_t5), "n_passages": 2, "max_length": 48, "batch_size": 4, "max_steps": 2,
                       "eval_every": 0}, "show_progress": False}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(grid))
    assert main(["experiment", "--config", str(path)]) == 0
    out = tmp_path / "exp" / "sky"
    candidates = {r["id"]: r["ctxs"] for r in _lines(out / "candidates" / "test.jsonl")}
    for x in _lines(out / "fid_toy_shortest" / "seed-1" / "predictions_test.jsonl"):
        shortest = sorted(candidates[x["id"]], key=lambda c: len(c["text"]))[:2]
        assert sorted(len(c["text"]) for c in shortest) == sorted(
            len(next(c for c in candidates[x["id"]] if c["id"] == e)["text"]) for e in x["evidence"])
    assert (out / "reranked-toy_shortest").is_dir()
    capsys.readouterr()
    assert main(["experiment", "--config", str(path), "rerank.reranker=toy_shortest", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'rerank.reranker'" in err[0] and "fid_toy_shortest" in err[0], err


def _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, out: str, **extra) -> Path:
    """A grid of the toy method and the toy reranker's fid_<name>, each with its own option set from the YAML."""
    grid = {"out": str(tmp_path / out), "tasks": [str(sky_task)], "methods": ["toy_majority", "fid_toy_shortest"],
            "seeds": [1], "reference": "toy_majority",
            "index": {"corpus": str(corpus_txt), "out": str(tmp_path / f"index-{out}"), "retriever": "bm25"},
            "retrieve": {"k": 6}, "rerank": {"top_d": 2, "toy_shortest": {"longest": True}},
            "toy_majority": {"rank": 2},
            "reader": {"model": str(tiny_t5), "n_passages": 2, "max_length": 48, "batch_size": 4, "max_steps": 2,
                       "eval_every": 0}, "show_progress": False, **extra}
    grid = {k: v for k, v in grid.items() if v is not None}  # extra=None leaves a section out
    path = tmp_path / f"{out}.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def test_an_installed_plug_in_that_imports_pgra_methods_loads_whatever_is_imported_first(tmp_path):
    """A plug-in module imports ``pgra.methods`` (as tests/toys/toy_plugin.py does): importing ``pgra.methods`` or
    ``Pipeline``'s module first must not load the plug-ins while ``pgra.methods`` is half imported (the built-in
    rerankers register at import, the plug-ins on the first lookup)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    info = tmp_path / "site" / "toyplug-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pgra.plugins]\ntoy = tests.toys.toy_plugin\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{root}"}
    for first in ("pgra.methods", "pgra.serving.pipeline"):
        code = f"import {first}; from pgra.methods import METHODS; print('fid_toy_shortest' in METHODS.names())"
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                              cwd=root)
        assert proc.returncode == 0 and proc.stdout.split()[-1] == "True", (first, proc.stderr[-1500:])


def test_plug_ins_reach_every_process_of_a_grid(toy_reranker, tmp_path, corpus_txt, sky_task, tiny_t5):
    """A plug-in method and reranker run where a grid's cells run: an installed package's plug-ins (the
    ``pgra.plugins`` entry-point group) load in each of 2 torchrun ranks and in the cells' child processes, and
    parts registered in the launching process (no package) reach `--launcher local`'s workers through the grid's
    payload."""
    import os
    import subprocess
    import sys

    from pgra.methods import METHODS, register_method
    from tests.conftest import launch_failure
    from tests.toys import toy_method

    root = Path(__file__).resolve().parents[1]
    site = tmp_path / "site"
    info = site / "toyplug-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pgra.plugins]\ntoy = tests.toys.toy_plugin\n")
    path = _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, "ranks")
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{root}", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(root / "scripts" / "experiment.py"), "--config", str(path)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert proc.returncode == 0, launch_failure(proc)
    _check_plugin_options(tmp_path / "ranks" / "sky")

    register_method(toy_method.Majority)
    try:
        path = _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, "workers", launcher="local", workers=2)
        assert main(["experiment", "--config", str(path)]) == 0
    finally:
        METHODS.pop("toy_majority")
    _check_plugin_options(tmp_path / "workers" / "sky")


def _check_plugin_options(out: Path) -> None:
    """The plug-ins ran with the options the YAML set: the toy reranker kept each input's two longest candidates
    (``rerank.toy_shortest.longest``), the toy method predicted the second most frequent label
    (``toy_majority.rank``)."""
    from collections import Counter

    candidates = {r["id"]: r["ctxs"] for r in _lines(out / "candidates" / "test.jsonl")}
    kept = _lines(out / "fid_toy_shortest" / "seed-1" / "predictions_test.jsonl")
    assert kept
    for x in kept:
        lengths = sorted((len(c["text"]) for c in candidates[x["id"]]), reverse=True)
        texts = {c["id"]: c["text"] for c in candidates[x["id"]]}
        assert sorted((len(texts[e]) for e in x["evidence"]), reverse=True) == lengths[:2]
    reranked = json.loads((out / "reranked-toy_shortest" / "manifest.json").read_text())
    assert reranked["config"]["toy_shortest"] == {"longest": True}
    train = Counter(r["label"] for r in _lines(out / "candidates" / "train.jsonl")).most_common()
    assert {x["prediction"] for x in _lines(out / "toy_majority" / "seed-1" / "predictions_test.jsonl")} == {train[1][0]}


def test_a_plug_in_option_the_plug_in_does_not_declare_is_refused_by_name(toy_reranker, tmp_path, corpus_txt,
                                                                         sky_task, tiny_t5, capsys):
    """A plug-in reranker's and method's sections are checked like a built-in part's: a misspelt option is one
    error line naming it, before anything runs; and the method's section may be set per task."""
    from pgra.methods import METHODS, register_method
    from tests.toys import toy_method

    register_method(toy_method.Majority)
    try:
        path = _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, "typo")
        for typo in ("rerank.toy_shortest.longst=true", "toy_majority.rnk=2"):
            assert main(["experiment", "--config", str(path), typo, "--dry-run"]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and typo.split("=")[0] in err[0], err
        overrides = f"task_overrides={{{sky_task}: {{toy_majority: {{rank: 1}}}}}}"
        assert main(["experiment", "--config", str(path), overrides, "--dry-run"]) == 0
    finally:
        METHODS.pop("toy_majority")
    assert not (tmp_path / "typo").exists()


@pytest.fixture()
def toy_stage():
    from pgra.methods import METHODS, register_method
    from pgra.stages import STAGES, register_stage
    from tests.toys import toy_stage, toy_stage_reader

    register_stage(toy_stage.Tail)  # (its import registered it once; again after another test's teardown)
    register_method(toy_stage_reader.FiDTail)
    yield
    METHODS.pop("fid_toy_tail")
    STAGES.pop("toy_tail")


def test_a_new_method_on_a_new_stage_is_two_files(toy_stage, tmp_path, corpus_txt, sky_task, tiny_t5):
    """A plug-in stage with options (tests/toys/toy_stage.py: it only builds; the one runner opens its folder and the
    candidates, and writes its manifest) and the method that reads it (toy_stage_reader.py), installed as a package's
    plug-ins: under 2 torchrun ranks (gloo) the grid derives the stage from the method, builds it after the
    candidates it reads with its options (``toy_tail.keep``) and a key of its own, and reuses it; the reader trains on
    its folder; the plan lists it; under --launcher local its workers find both through the payload."""
    import os
    import subprocess
    import sys

    from pgra.core.config import load_config
    from pgra.experiment import Experiment
    from pgra.experiment.config import experiment_config
    from tests.conftest import launch_failure

    root = Path(__file__).resolve().parents[1]
    info = tmp_path / "site" / "toytail-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toytail\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pgra.plugins]\nstage = tests.toys.toy_stage\n"
                                           "reader = tests.toys.toy_stage_reader\n")
    path = _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, "tail")
    data = yaml.safe_load(path.read_text())
    data.update(methods=["fid", "fid_toy_tail"], reference="fid", toy_tail={"keep": 2}, rerank={"top_d": 2})
    data.pop("toy_majority")
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{root}", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(root / "scripts" / "experiment.py"), "--config", str(path)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert proc.returncode == 0, launch_failure(proc)
    out = tmp_path / "tail" / "sky"
    candidates = {r["id"]: r["ctxs"] for r in _lines(out / "candidates" / "test.jsonl")}
    for x in _lines(out / "fid_toy_tail" / "seed-1" / "predictions_test.jsonl"):
        assert x["evidence"] == [c["id"] for c in candidates[x["id"]][-2:][::-1]]
    manifest = json.loads((out / "toy_tail" / "manifest.json").read_text())
    assert manifest["kind"] == "toy_tail" and manifest["keep"] == 2 and manifest["config"]["toy_tail"] == {"keep": 2}
    assert manifest["candidates"]["fingerprint"] and set(manifest["files"]) == {f"{s}.jsonl" for s in manifest["counts"]}
    assert manifest["task"]["name"] == "sky"
    exp = Experiment(load_config(experiment_config(), str(path), {"launcher": "none"}))
    assert exp.stages_needed() == ["candidates", "toy_tail"]
    keys = exp.stage_keys(str(sky_task))
    assert (out / "toy_tail" / ".stage_key").read_text().strip() == keys["toy_tail"] != keys["candidates"]
    assert exp.stage_done(str(sky_task), "toy_tail")
    assert "toy_tail" in exp.describe()
    # a run that read a stage which cannot replay its work on new texts: one InputError, before any model loads
    from pgra.core.errors import InputError
    from pgra.serving.pipeline import Pipeline

    with pytest.raises(InputError, match="toy_tail stage, which cannot be replayed"):
        Pipeline.load(out / "fid_toy_tail" / "seed-1")
    local = ["experiment", "--config", str(path), f"out={tmp_path / 'local'}", "launcher=local", "workers=2"]
    assert main([*local, "toy_tail.keep=1"]) == 0  # its option set like any section's; the workers get both parts
    assert json.loads((tmp_path / "local" / "sky" / "toy_tail" / "manifest.json").read_text())["keep"] == 1


def test_a_plug_in_stage_plans_its_files_like_a_built_in_one(toy_stage, tmp_path, corpus_txt, sky_task, tiny_t5,
                                                               capsys):
    """The dry run asks a plug-in stage its plan as it asks the built-in ones (``Stage.plan``, with the task's
    settings: its own option ``toy_tail.keep``): its files are a line per input of its last ``keep`` candidates."""
    path = _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, "planned")
    data = yaml.safe_load(path.read_text())
    data.update(methods=["fid", "fid_toy_tail"], reference="fid", toy_tail={"keep": 3}, rerank={"top_d": 2})
    data.pop("toy_majority")
    path.write_text(yaml.safe_dump(data))
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0
    disk = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  stages: "))
    assert "toy_tail" in disk and "input lines with its last 3 candidates" in disk, disk
    assert "its size is its own" not in disk


def test_a_payload_part_the_child_cannot_import_is_one_input_error():
    """A part registered from the launching script's ``__main__`` (or a module gone) cannot be found in a child:
    an InputError naming it, not a traceback."""
    from pgra.core.errors import InputError
    from pgra.core.registry import Registry

    with pytest.raises(InputError, match="the method 'mine' registered in the launching process"):
        Registry("method").register_parts(["mine=no_such_module_xyz:Mine"])


def test_a_payload_part_whose_module_exits_here_is_one_input_error(tmp_path, monkeypatch):
    """A part's module that calls ``sys.exit(0)`` when a grid's worker imports it: that part's InputError, never a
    worker that quietly exits 0 (H9)."""
    import sys

    from pgra.core.errors import InputError
    from pgra.core.registry import Registry

    (tmp_path / "exits_in_child_xyz.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InputError, match=r"the method 'mine' .*: SystemExit: 0"):
        Registry("method").register_parts(["mine=exits_in_child_xyz:Mine"])


def test_a_plug_in_method_with_options_named_like_a_config_field_is_refused(tmp_path, corpus_txt, sky_task, tiny_t5,
                                                                            capsys):
    """A method whose options would be the section ``reader:`` (or any field the experiment config has) is one
    error line naming it, never the reader's section read as the method's; ``knn_vote``, whose section it is,
    stays."""
    from pgra.methods import METHODS, register_method
    from tests.toys import toy_method

    clash = type("ReaderClash", (toy_method.Majority,), {"name": "reader", "__module__": "tests.toys.toy_method"})
    register_method(clash)
    try:
        path = _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, "clash", methods=["no_retrieval", "knn_vote"],
                            reference="no_retrieval", rerank={}, toy_majority=None)
        assert main(["experiment", "--config", str(path), "--dry-run"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "the method 'reader'" in err[0] and "another name" in err[0], err
    finally:
        METHODS.pop("reader")
    assert main(["experiment", "--config", str(path), "--dry-run"]) == 0


def test_a_plug_in_part_s_module_enters_the_keys_of_what_it_makes(toys, toy_reranker, toy_stage, tmp_path, corpus_txt,
                                                                   sky_task, tiny_t5, tiny_opt):
    """A plug-in's cells and stages are keyed by the module that defines it too (a method, a demonstration strategy,
    a reranker, a stage): the same name from another module never reuses them; the built-in parts' keys do not
    move (tests/test_golden.py pins them)."""
    from pgra.core.config import load_config
    from pgra.experiment import Experiment
    from pgra.experiment.config import experiment_config
    from pgra.methods import METHODS
    from pgra.rerank.base import RERANKERS
    from pgra.selection import STRATEGIES
    from pgra.stages import STAGES

    path = _plugin_grid(tmp_path, corpus_txt, sky_task, tiny_t5, "keys", reference="no_retrieval",
                        methods=["no_retrieval", "toy_majority", "icl_toy_longest", "fid_toy_shortest", "fid_toy_tail"],
                        icl={"lm": str(tiny_opt), "num_demos": 2, "splits": ["test"]},
                        rerank={"top_d": 2, "toy_shortest": {"longest": True}, "demo_selection": "toy_longest"})

    def keys() -> dict[str, str]:
        exp = Experiment(load_config(experiment_config(), str(path), {"launcher": "none"}))
        return {**exp.stage_keys(str(sky_task)), **{c.method: c.key for c in exp.plan()}}

    moved = [(METHODS, "toy_majority", {"toy_majority"}),
             (STRATEGIES, "toy_longest", {"icl_toy_longest", "reranked", "full_search"}),
             (RERANKERS, "toy_shortest", {"reranked-toy_shortest", "fid_toy_shortest"}),
             (STAGES, "toy_tail", {"toy_tail", "fid_toy_tail"})]
    for registry, name, changed in moved:
        before, part = keys(), registry[name]
        registry[name] = type(part.__name__, (part,), {"__module__": "elsewhere.plugin"})  # the part's file moved
        try:
            after = keys()
        finally:
            registry[name] = part
        assert {k for k in before if after[k] != before[k]} == changed, name
        assert keys() == before
