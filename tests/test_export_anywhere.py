"""Issue 52, items 1 and 2: an exported run predicts on a machine without any of the folders it came from (the
dense index's encoder copied beside the index; ``encoder=`` / ``--encoder`` for an export without a copy; a Hub id
downloaded), and its model card and every file it writes name no folder of the exporting machine."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

import pgra
from pgra.cli import main
from pgra.core.config import from_dict
from pgra.core.errors import InputError, StaleArtifactError
from pgra.experiment import Experiment, ExperimentConfig
from tests import numerics
from tests.test_experiment import _config
from tests.test_export import _digest, fake_run

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["The moon is bright tonight.", "The river runs by the old town.", "Stars fill the sky."]
TEXT_FILES = {".json", ".jsonl", ".md", ".yaml", ".yml", ".txt", ".cfg"}


def _same(got: list[dict], want: list[dict]) -> None:
    assert _digest(got) == _digest(want)
    for g, w in zip(got, want, strict=True):
        assert g["scores"] == {lab: numerics.close(p, depth=numerics.TINY_SEQ2SEQ, scale=1) for lab, p in w["scores"].items()}


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    head, _, _ = card[4:].partition("\n---\n")
    return yaml.safe_load(head)


def _exported_texts(folder: Path) -> dict[str, str]:
    """Every text file the export wrote (weights and other binaries left out), by its path in the folder."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and (p.suffix in TEXT_FILES or p.name == "README.md"):
            out[str(p.relative_to(folder))] = p.read_text(encoding="utf-8")
    return out


@pytest.fixture()
def dense_run(tmp_path, corpus_txt, sky_task, tiny_bert, tiny_opt, tiny_t5):
    """A PGRA run over a dense index, every model a folder of its own under tmp_path/models (the encoder
    models/minilm, as the demo's), and what it was made from: ``(run, grid, models)``."""
    models = tmp_path / "models"
    enc = shutil.copytree(tiny_bert, models / "minilm")
    lm = shutil.copytree(tiny_opt, models / "opt")
    t5 = shutil.copytree(tiny_t5, models / "t5")
    grid = _config(tmp_path, corpus_txt, sky_task, lm, t5, methods=["pgra"], seeds=[1], report=False)
    grid["index"].update(retriever="dense", dense={"encoder": str(enc), "pooler": "mean", "max_length": 32})
    assert Experiment(from_dict(ExperimentConfig, grid)).run() == []
    return Path(grid["out"]) / "sky" / "pgra" / "seed-1", grid, models


def test_an_export_predicts_the_same_with_every_source_folder_moved(dense_run, tmp_path, tmp_path_factory, capsys,
                                                                    monkeypatch, tiny_bert_other):
    """Item 1: --copy-index copies the dense index's encoder too; with the experiment, the index, the models, the
    cache and the task's data moved away the export loads and predicts as the run did (before: Pipeline.load
    succeeded and predict failed, "encoder folder ... no longer exists; pass --encoder"). Item 2: the card's front
    matter and settings parse, and no exported text file names a folder of this machine."""
    from pgra.serving.pipeline import Pipeline

    run, grid, models = dense_run
    want = Pipeline.load(run).predict(TEXTS)
    export, pointer = tmp_path / "sky-pgra", tmp_path / "pointer"
    assert main(["export", "--run", str(run), "--out", str(export), "--copy-index", "--copy-lm"]) == 0
    assert main(["export", "--run", str(run), "--out", str(pointer)]) == 0  # no copies: pointers only
    assert (export / "index").is_dir()

    gone = tmp_path / "gone"
    gone.mkdir()
    moved = {}
    for source in (Path(grid["out"]), Path(grid["index"]["out"]), models, tmp_path / "cache", tmp_path / "skydata",
                   tmp_path / "sky.yaml", tmp_path / "corpus.txt"):
        moved[source.name] = source.rename(gone / source.name)
    assert not run.exists() and not (models / "minilm").exists()

    _same(Pipeline.load(export).predict(TEXTS), want)
    assert (export / "encoder" / "config.json").is_file()  # the index's encoder, copied beside it
    _same(Pipeline.load(export, encoder=moved["models"] / "minilm").predict(TEXTS), want)  # the caller's copy

    # an export without copies: its index, encoder and LM where they are now (Python and the command line)
    index, encoder, lm = moved["index"], moved["models"] / "minilm", moved["models"] / "opt"
    stale = Pipeline.load(pointer, index=index, lm=lm)
    with pytest.raises(InputError, match="pass --encoder"):
        stale.predict(TEXTS)
    _same(Pipeline.load(pointer, index=index, lm=lm, encoder=encoder).predict(TEXTS), want)
    with pytest.raises(StaleArtifactError, match="not the one index"):  # another model's files: refused
        Pipeline.load(pointer, index=index, lm=lm, encoder=tiny_bert_other)
    capsys.readouterr()
    assert main(["predict", "--run", str(pointer), "--index", str(index), "--lm", str(lm), "--encoder", str(encoder),
                 "--json", *sum((["--text", t] for t in TEXTS), [])]) == 0
    printed = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    _same(printed, want)

    # a Hub id: downloaded with snapshot_download (offline here: it returns the exported folder)
    import huggingface_hub

    calls = []

    def snapshot_download(repo_id, **kw):
        calls.append((repo_id, kw))
        return str(export)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    _same(Pipeline.load("alice/sky-pgra").predict(TEXTS), want)
    assert calls == [("alice/sky-pgra", {"repo_type": "model", "local_files_only": False})]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: only the cache's copy
    Pipeline.load("alice/sky-pgra")
    assert calls[-1][1]["local_files_only"] is True

    # item 2: the card
    card = (export / "README.md").read_text()
    front = _front_matter(card)
    assert front["library_name"] == "pgra" and "pgra" in front["tags"] and front["metrics"] == ["accuracy"]
    assert "base_model" not in front and "datasets" not in front  # the reader started from a local folder
    (entry,) = front["model-index"]
    assert entry["name"] == "sky-pgra"
    (result,) = entry["results"]
    assert result["task"]["type"] == "text-classification" and result["dataset"]["name"] == "sky"
    test = json.loads((export / "metrics.json").read_text())["results"]["test"]["accuracy"]
    assert result["metrics"] == [{"type": "accuracy", "value": test, "name": "Test Accuracy"}]
    settings = yaml.safe_load(re.search(r"```yaml\n(.*?)\n```", card, re.S).group(1))
    assert settings["reader"]["model"] == "t5" and settings["reader"]["max_steps"] == 4
    assert settings["reranking"]["lm"] == "opt" and settings["reranking"]["top_d"] == 3
    assert settings["retrieval"] == {**settings["retrieval"], "retriever": "dense", "encoder": "minilm", "k": 8}
    assert 'pgra.Pipeline.load("sky-pgra")' in card and "pip install" in card and "THIS_FOLDER" not in card
    assert "encoder `minilm`" in card and "reranker: `opt`" in card

    # no file of the export names a folder of this machine: the test's, pytest's, the home or working folder
    texts = _exported_texts(export)
    assert {"README.md", "export.json", "manifest.json", "reranked/manifest.json", "index/manifest.json",
            "best/fid_config.json"} <= set(texts)
    machine = {str(tmp_path), str(tmp_path_factory.getbasetemp()), str(Path.home()), os.getcwd(), str(ROOT)}
    leaks = [(name, where) for name, text in texts.items() for where in machine if where in text]
    assert leaks == []
    pointer_card = (pointer / "README.md").read_text()
    assert not [where for where in machine if where in pointer_card]
    assert 'index="...", encoder="...", lm="..."' in pointer_card


def test_the_uploaded_card_loads_the_repository(tmp_path):
    """push_to_hub names the repository in the card's snippet (Pipeline.load("USER/NAME")) before uploading."""
    from pgra.serving.hub import push_to_hub

    out = pgra.export_run(fake_run(tmp_path / "exp"), tmp_path / "mr-pgra")
    assert 'pgra.Pipeline.load("mr-pgra")' in (out / "README.md").read_text()

    class Api:
        def create_repo(self, repo_id, **kw):
            return f"https://huggingface.co/{repo_id}"

        def upload_folder(self, *, repo_id, folder_path, **kw):
            self.card = (Path(folder_path) / "README.md").read_text()

    api = Api()
    push_to_hub(out, "alice/mr-pgra", api=api)
    assert 'pgra.Pipeline.load("alice/mr-pgra")' in api.card and '"mr-pgra"' not in api.card
    assert _front_matter(api.card)["library_name"] == "pgra"


def test_a_made_run_exports_no_local_path(tmp_path):
    """The card of a run without retrieval: front matter with a Hub base model, settings whole; no local path."""
    run = fake_run(tmp_path / "exp")
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["model"] = "google/flan-t5-base"
    manifest["config"] = {"seed": 1, "model": "google/flan-t5-base", "out": str(run), "data": str(tmp_path / "d"),
                          "note": "x" * 2000, "cache": str(tmp_path / "cache" / "reader")}
    manifest["task"]["data"] = {"format": "hf", "path": "cornell-movie-review-data/rotten_tomatoes"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    tokenizer = json.dumps({"model": {"vocab": {"/": 0, "/usr": 1}, "merges": ["/ usr"]},
                            "added_tokens": [{"content": "/home"}]})  # text, not paths: never rewritten
    (run / "best" / "tokenizer.json").write_text(tokenizer)
    (run / "best" / "config.json").write_text(json.dumps({"_name_or_path": str(tmp_path / "models" / "b2b"),
                                                          "encoder": {"_name_or_path": str(tmp_path / "bert")},
                                                          "vocab_size": 40}))
    out = pgra.export_run(run, tmp_path / "out")
    assert (out / "best" / "tokenizer.json").read_text() == tokenizer
    assert json.loads((out / "best" / "config.json").read_text()) == {"_name_or_path": "b2b",
                                                                     "encoder": {"_name_or_path": "bert"},
                                                                     "vocab_size": 40}
    card = (out / "README.md").read_text()
    front = _front_matter(card)
    assert front["base_model"] == "google/flan-t5-base"
    assert front["datasets"] == ["cornell-movie-review-data/rotten_tomatoes"]
    assert front["model-index"][0]["results"][0]["dataset"]["type"] == "cornell-movie-review-data/rotten_tomatoes"
    settings = yaml.safe_load(re.search(r"```yaml\n(.*?)\n```", card, re.S).group(1))
    assert settings["reader"]["note"] == "x" * 2000 and settings["reader"]["cache"] == "reader"  # whole, no path
    for name, text in _exported_texts(out).items():
        assert str(tmp_path) not in text, name


@pytest.mark.parametrize("case", ["offline", "failed", "not-an-export"])
def test_a_hub_id_that_cannot_be_had_is_one_input_error(tmp_path, monkeypatch, case):
    import huggingface_hub

    from pgra.serving.pipeline import Pipeline

    monkeypatch.chdir(tmp_path)
    if case == "offline":  # the real snapshot_download, offline, with nothing in its cache
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        says = "offline (HF_HUB_OFFLINE) and its cache holds no copy"
    elif case == "failed":
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

        def refused(repo_id, **kw):
            raise OSError("404 Client Error: Repository Not Found\nmore")

        monkeypatch.setattr(huggingface_hub, "snapshot_download", refused)
        says = "downloading it failed (404 Client Error: Repository Not Found)"
    else:
        (tmp_path / "snapshot").mkdir()
        monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: str(tmp_path / "snapshot"))
        says = "holds no export.json"
    with pytest.raises(InputError, match=re.escape(says)) as e:
        Pipeline.load("pgra-tests-nobody/no-such-export")
    assert "pgra-tests-nobody/no-such-export" in str(e.value) and "\n" not in str(e.value)


def test_encoder_is_refused_for_an_index_without_one():
    from pgra.serving.export import check_encoder_given

    with pytest.raises(InputError, match="has no query encoder"):
        check_encoder_given("models/minilm", {"retriever": "bm25", "encoder": None})
    check_encoder_given(None, {"retriever": "bm25"})
    check_encoder_given("models/minilm", {"retriever": "dense", "encoder": "/x/minilm", "pooler": "mean"})


def test_portable_keeps_content_and_hub_ids():
    from pgra.serving.export import display_name, portable

    snapshot = "/home/u/.cache/huggingface/hub/models--org--enc/snapshots/abc123"
    value = {"model": "/home/u/models/t5", "encoder": snapshot, "lm": "org/lm", "rel": "models/minilm",
             "task": {"labels": ["/", "~x"], "reader_words": {"/": "/usr/bin"}, "source": "~/tasks/sky.yaml"},
             "excluded": ["/wiki/A"], "list": ["/a/b.txt", "C:\\data\\x.jsonl"], "n": 3}
    assert portable(value) == {"model": "t5", "encoder": "org/enc", "lm": "org/lm", "rel": "models/minilm",
                               "task": {"labels": ["/", "~x"], "reader_words": {"/": "/usr/bin"},
                                        "source": "sky.yaml"},
                               "excluded": ["/wiki/A"], "list": ["b.txt", "x.jsonl"], "n": 3}
    assert display_name("/") == "(a local folder)"
