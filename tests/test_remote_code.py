"""A model's own code (``trust_remote_code``) runs only when the command at hand allows it: an index, reranked
folder or run whose manifest records ``trust_remote_code: true`` never makes pgra import a model folder's code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pgra.cli import main
from pgra.core.config import to_dict
from pgra.core.errors import InputError
from pgra.retrieval.index import DenseConfig, Index, IndexConfig, build_index
from pgra.storage.artifacts import model_fingerprint
from tests.conftest import TASK

EVIL = '''
from pathlib import Path

Path({marker!r}).write_text("the folder's code ran")

from transformers import BertConfig, BertModel


class EvilConfig(BertConfig):
    model_type = {model_type!r}


class EvilModel(BertModel):
    config_class = EvilConfig
'''


def _make_evil(folder: Path, marker: Path, model_type: str) -> None:
    """Give a saved BERT folder an ``auto_map`` to a module that writes ``marker`` when imported."""
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = model_type
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker), model_type=model_type))


@pytest.fixture()
def evil_index(tmp_path, corpus_txt, tiny_bert):
    """A dense index whose encoder folder has an auto_map to code, and whose manifest says to trust it (as a
    shared index edited by someone else, or built elsewhere with --trust-remote-code, would)."""
    def make(model_type: str) -> tuple[Path, Path, Path]:
        enc = tmp_path / f"enc-{model_type}"
        shutil.copytree(tiny_bert, enc)
        out = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / f"idx-{model_type}"),
                                      dense=DenseConfig(encoder=str(enc), pooler="mean"), show_progress=False))
        marker = tmp_path / f"RAN-{model_type}"
        _make_evil(enc, marker, model_type)
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["config"]["dense"]["trust_remote_code"] = True
        manifest["encoder_fingerprint"] = model_fingerprint(str(enc))
        (out / "manifest.json").write_text(json.dumps(manifest))
        return out, enc, marker
    return make


@pytest.mark.parametrize("model_type", ["bert", "evil-bert"])  # loadable without the code, and not
def test_search_never_runs_code_because_the_index_says_so(evil_index, model_type, capsys):
    index, enc, marker = evil_index(model_type)
    capsys.readouterr()
    assert main(["search", "--index", str(index), "--query", "the sun"]) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"{index / 'manifest.json'} (field 'trust_remote_code')" in lines[0]
    assert "--trust-remote-code" in lines[0] and str(enc) in lines[0]
    assert not marker.exists()
    # the Python API too, and retrieval (which searched with the manifest's setting before)
    with pytest.raises(InputError, match="trust_remote_code"):
        Index(index).search(["the sun"], 2)
    assert not marker.exists()


def test_the_users_own_flag_still_allows_the_code(evil_index, capsys, monkeypatch, tmp_path):
    """The malicious folder is real: with the user's --trust-remote-code its module is imported."""
    import transformers.dynamic_module_utils as dyn

    monkeypatch.setattr(dyn, "HF_MODULES_CACHE", str(tmp_path / "hf-modules"))
    index, _, marker = evil_index("evil-bert")
    main(["search", "--index", str(index), "--query", "the sun", "--trust-remote-code"])
    assert marker.exists()


def test_a_manifest_without_code_to_run_still_searches(tmp_path, corpus_txt, tiny_bert, capsys):
    """trust_remote_code recorded for an encoder with no code of its own: nothing to refuse, nothing run."""
    out = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / "idx"),
                                  dense=DenseConfig(encoder=str(tiny_bert), pooler="mean"), show_progress=False))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["config"]["dense"]["trust_remote_code"] = True
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["search", "--index", str(out), "--query", "the sun", "-k", "2"]) == 0


def test_predict_never_trusts_a_reranked_manifest_or_an_icl_run(tmp_path, tiny_bert):
    """The reranking LM a run's reranked folder names, and the LM of an ICL run, load without their code."""
    from pgra.icl.config import ICLConfig
    from pgra.icl.run import ICLPredictor
    from pgra.rerank.config import RerankConfig
    from pgra.rerank.prompt_guided.in_memory import PromptGuidedReranker
    from pgra.storage.artifacts import write_manifest

    lm = tmp_path / "lm"
    shutil.copytree(tiny_bert, lm)
    marker = tmp_path / "RAN"
    _make_evil(lm, marker, "evil-bert")
    reranked = tmp_path / "reranked"
    reranked.mkdir()
    write_manifest(reranked, {"kind": "reranked", "task": to_dict(TASK), "k": 5, "top_d": 2, "prompt_prefix": "",
                              "lm": str(lm), "config": to_dict(RerankConfig(lm=str(lm), trust_remote_code=True))})
    with pytest.raises(InputError, match=r"reranked/manifest\.json \(field 'trust_remote_code'\)"):
        PromptGuidedReranker.load(reranked, None)
    run = tmp_path / "icl-run"
    run.mkdir()
    write_manifest(run, {"kind": "icl", "task": to_dict(TASK),
                         "config": to_dict(ICLConfig(lm=str(lm), trust_remote_code=True))})
    with pytest.raises(InputError, match=r"icl-run/manifest\.json \(field 'trust_remote_code'\)"):
        ICLPredictor(run)
    assert not marker.exists()
