"""What keeps a user's files safe (issue 27): no output overlaps an input, a stage replaces only what it wrote,
names that become paths stay under their root, YAML is bounded, NaN and infinity are refused by the option
machinery, a UTF-8 BOM is not part of the first text, and files saved by libraries get the umask's permissions."""

from __future__ import annotations

import json
import os
import stat
import time

import numpy as np
import pytest
import yaml

from pgra.cli import COMMANDS, main
from pgra.cli.options import leaves
from pgra.core.config import from_dict, load_config, load_yaml, parse_overrides, safe_load_yaml, to_dict
from pgra.core.errors import IncompleteArtifactError, InputError, os_error_message
from pgra.storage.artifacts import (
    MANIFEST,
    atomic_dir,
    atomic_path,
    check_disjoint,
    claim_output,
    path_under,
    safe_name,
    verify_safetensors,
)
from tests.conftest import TASK

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


# ---------------------------------------------------------------- outputs and inputs

def test_an_output_may_not_be_hold_or_lie_inside_an_input(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("{}\n")
    for out, how in ((data, "is"), (tmp_path, "holds"), (data / "run", "lies inside")):
        with pytest.raises(InputError, match=rf"field 'out'.* {how} the input .*\(field 'data'\)"):
            check_disjoint({"out": out}, {"data": str(data)})
    with pytest.raises(InputError, match="field 'tasks'"):  # lists of inputs too
        check_disjoint({"out": tmp_path}, {"tasks": ["sst2", str(data / "train.jsonl")]})
    # apart, a hub id (no such path), empty values, and an output inside an input that may hold it
    check_disjoint({"out": tmp_path / "o"}, {"data": data, "model": "bert-base-uncased", "index": ""})
    check_disjoint({"out": data / "evaluations"}, {"run": data}, may_hold={"run"})
    with pytest.raises(InputError):
        check_disjoint({"out": data}, {"run": data}, may_hold={"run"})


def test_stage_functions_refuse_overlaps_from_python_too(tmp_path, corpus_txt, sky_task, candidates):
    from pgra.rerank.config import RerankConfig
    from pgra.rerank.stages import rerank
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.index import Index, IndexConfig, build_index
    from pgra.retrieval.retrieve import RetrieveConfig

    index = tmp_path / "bm25"
    before = {p: p.read_bytes() for p in sorted(index.rglob("*")) if p.is_file()}
    with pytest.raises(InputError, match="field 'index'"):
        retrieve(RetrieveConfig(task=str(sky_task), index=str(index), out=str(index), show_progress=False))
    with pytest.raises(InputError, match="field 'index'"):  # the index recorded in the candidates' manifest
        rerank(RerankConfig(candidates=str(candidates), out=str(index / "reranked"), lm="nope"))
    assert {p: p.read_bytes() for p in sorted(index.rglob("*")) if p.is_file()} == before
    assert Index(index).search_hits(["sun"], k=1)
    users = tmp_path / "p"
    (users / "corpus").mkdir(parents=True)
    (users / "corpus" / "x.txt").write_text(corpus_txt.read_text())
    (users / "corpus" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="field 'corpus'"):
        build_index(IndexConfig(corpus=str(users / "corpus" / "x.txt"), out=str(users), retriever="bm25"))
    assert sorted(p.name for p in (users / "corpus").iterdir()) == ["notes.txt", "x.txt"]


def test_build_index_replaces_only_what_it_wrote(tmp_path, corpus_txt):
    from pgra.retrieval.index import IndexConfig, build_index

    out = tmp_path / "p"
    (out / "corpus").mkdir(parents=True)
    (out / "corpus" / "notes.txt").write_text("mine")
    cfg = IndexConfig(corpus=str(corpus_txt), out=str(out), retriever="bm25", show_progress=False)
    with pytest.raises(InputError, match="not an index's corpus store"):
        build_index(cfg)
    assert (out / "corpus" / "notes.txt").read_text() == "mine"
    (out / "corpus" / "notes.txt").unlink()
    (out / MANIFEST).write_text("my own notes, not JSON\n")
    with pytest.raises(InputError, match="not a manifest pgra wrote"):
        build_index(cfg)
    assert (out / MANIFEST).read_text() == "my own notes, not JSON\n"
    (out / MANIFEST).unlink()
    build_index(cfg)  # an empty corpus/ folder is nobody's: built
    text = (out / MANIFEST).read_text()
    (out / MANIFEST).write_text(text[:40])  # its own manifest cut off mid-write is recognised and rebuilt
    build_index(cfg)
    assert json.loads((out / MANIFEST).read_text())["kind"] == "index"


def test_claim_output_accepts_only_the_stages_own_manifest(tmp_path):
    claim_output(tmp_path / "missing", "index")
    (tmp_path / MANIFEST).write_text(json.dumps({"kind": "candidates"}))
    claim_output(tmp_path, "candidates")
    for text, said in ((json.dumps({"kind": "index"}), "'index' artifact"), ("[1]", "not a JSON object"),
                       ("{}", "pgra did not write"), ("", None)):
        (tmp_path / MANIFEST).write_text(text)
        if said is None:
            claim_output(tmp_path, "candidates")  # empty: a manifest cut off before its first byte
            continue
        with pytest.raises(InputError, match=said):
            claim_output(tmp_path, "candidates")


def test_tasks_export_never_writes_onto_the_task_data(tmp_path, sky_task, capsys):
    before = {p.name: p.read_bytes() for p in (tmp_path / "skydata").iterdir()}
    assert main(["tasks", "export", str(sky_task), "--out", str(tmp_path / "skydata")]) == 2
    assert "field 'out'" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (tmp_path / "skydata").iterdir()} == before
    assert main(["tasks", "export", str(sky_task), "--out", str(tmp_path / "exported")]) == 0
    assert (tmp_path / "exported" / "train.jsonl").exists()


# ---------------------------------------------------------------- names that become paths

@pytest.mark.parametrize("bad", ["../../ESCAPED", "/abs/x", "a/b", "a\\b", ".", "..", ".hidden", "a b", "", "x" * 101])
def test_names_that_become_paths_are_checked_in_one_place(bad):
    with pytest.raises(InputError, match="field 'name'"):
        safe_name(bad)
    with pytest.raises(InputError, match="field 'name'"):
        from_dict(type(TASK), {**to_dict(TASK), "name": bad})


def test_good_names_pass_and_paths_stay_under_their_root(tmp_path):
    for name in ("sst2", "wiki_topic", "my-task.v2", "SST-2"):
        assert safe_name(name) == name
    assert path_under(tmp_path, "a", "b") == tmp_path / "a" / "b"
    with pytest.raises(InputError, match="outside"):
        path_under(tmp_path, "..", "x")
    (tmp_path / "link").symlink_to(tmp_path.parent)
    with pytest.raises(InputError, match="outside"):  # resolved: a symbolic link does not lead out either
        path_under(tmp_path, "link", "x")


# ---------------------------------------------------------------- YAML

def test_yaml_bombs_are_refused_at_once_and_briefly(tmp_path):
    start = time.perf_counter()
    with pytest.raises(yaml.YAMLError, match="expands to more than"):
        safe_load_yaml(BOMB)
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(InputError) as e:
        load_yaml(path)
    assert len(str(e.value)) < 400 and time.perf_counter() - start < 5
    with pytest.raises(InputError, match="nested too deeply"):
        (tmp_path / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
        load_yaml(tmp_path / "deep.yaml")


def test_yaml_aliases_within_the_bound_still_work(tmp_path):
    assert safe_load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}
    path = tmp_path / "c.yaml"
    path.write_text("common: &c {max_steps: 3}\n")
    assert load_yaml(path) == {"common": {"max_steps": 3}}


def test_errors_echo_at_most_two_hundred_characters_of_a_value():
    from pgra.reader.config import TrainConfig

    with pytest.raises(InputError) as e:
        from_dict(TrainConfig, {"max_steps": "y" * 100_000})
    assert len(str(e.value)) < 400 and "100,002 characters" in str(e.value)


# ---------------------------------------------------------------- numbers and lists

def _float_leaves():
    for name, command in COMMANDS.items():
        for leaf in leaves(command.config_class(), hidden=True):
            if leaf.type is float or leaf.type == list[float]:
                yield name, command, leaf


def test_there_are_float_options_to_check():
    assert len({leaf.key for _, _, leaf in _float_leaves()}) >= 8


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", ".nan", ".inf"])
def test_every_float_option_refuses_nan_and_infinity(bad):
    for _, command, leaf in _float_leaves():
        with pytest.raises(InputError, match=f"field '{leaf.key}'.*finite"):
            load_config(command.config_class(), overrides=parse_overrides([f"{leaf.key}={bad}"]))


def test_a_scalar_where_a_list_is_expected_is_a_one_item_list():
    from pgra.experiment import ExperimentConfig
    from pgra.icl.config import ICLConfig

    assert load_config(ExperimentConfig, overrides=parse_overrides(["seeds=2"])).seeds == [2]
    assert load_config(ICLConfig, overrides=parse_overrides(["splits=3"])).splits == ["3"]
    with pytest.raises(InputError, match="field 'seeds'.*expected a list"):
        load_config(ExperimentConfig, overrides=parse_overrides(["seeds={a: 1}"]))


# ---------------------------------------------------------------- files

def test_a_utf8_bom_is_not_part_of_the_first_text(tmp_path):
    from pgra.data.corpus import CorpusSource, build_store
    from pgra.tasks import DataSpec, load_task

    bom = "\ufeff"
    (tmp_path / "c.txt").write_text(bom + "The sun is hot.\nThe moon is cold.\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text(bom + '{"id": "a", "text": "The sun."}\n', encoding="utf-8")
    store = build_store(CorpusSource(str(tmp_path / "c.txt")), tmp_path / "s1", show_progress=False)
    assert store.texts([0, 1]) == ["The sun is hot.", "The moon is cold."]
    assert build_store(CorpusSource(str(tmp_path / "c.jsonl")), tmp_path / "s2", show_progress=False).text(0) == \
        "The sun."
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(bom + '{"text": "the sun", "label": "sky"}\n', encoding="utf-8")
    (data / "test.csv").write_text(bom + "text,label\nthe town,town\n", encoding="utf-8")
    spec = from_dict(type(TASK), to_dict(TASK))
    spec.data = DataSpec(format="jsonl", path=str(data), files={"train": "train.jsonl"})
    assert load_task(spec, tmp_path, splits=("train",))["train"][0].text == "the sun"
    spec.data = DataSpec(format="csv", path=str(data), files={"train": "test.csv"})
    assert load_task(spec, tmp_path, splits=("train",))["train"][0].text == "the town"


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_files_libraries_save_get_the_umask_permissions(umask, tmp_path):
    from safetensors.numpy import save_file

    old = os.umask(umask)
    try:
        with atomic_dir(tmp_path / "best") as tmp:
            save_file({"w": np.zeros(4, np.float32)}, str(tmp / "model.safetensors"))  # safetensors: 0600
            (tmp / "sub").mkdir(mode=0o700)
            save_file({"w": np.zeros(4, np.float32)}, str(tmp / "sub" / "x.safetensors"))
        with atomic_path(tmp_path / "probe.safetensors") as tmp:
            tmp.unlink()
            save_file({"w": np.zeros(4, np.float32)}, str(tmp))
    finally:
        os.umask(old)
    for p in (tmp_path / "best" / "model.safetensors", tmp_path / "best" / "sub" / "x.safetensors",
              tmp_path / "probe.safetensors"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~umask, p
    for d in (tmp_path / "best", tmp_path / "best" / "sub"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o777 & ~umask, d


def test_truncated_safetensors_are_named_before_a_library_reads_them(tmp_path):
    from safetensors.numpy import save_file

    save_file({"w": np.zeros((8, 8), np.float32)}, str(tmp_path / "model.safetensors"))
    verify_safetensors(tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    for cut in (data[:-1], data[:20], data[:5], b""):
        (tmp_path / "model.safetensors").write_bytes(cut)
        with pytest.raises(IncompleteArtifactError, match="model.safetensors"):
            verify_safetensors(tmp_path)


def test_os_errors_are_one_line_naming_the_path_and_what_to_do():
    import errno

    full = os_error_message(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "runs/x")
    assert full.startswith("while writing runs/x: ") and "re-run resumes" in full
    denied = os_error_message(PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/data/c.txt"))
    assert denied.startswith("/data/c.txt: ") and "permissions" in denied and "\n" not in denied
