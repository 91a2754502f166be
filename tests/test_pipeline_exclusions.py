"""Pipeline (``pgra predict``) retrieves with the retrieve stage's own search and the run's ``exclude_ids``: it
never returns evidence the run excluded (a planted id), and the recorded exclusion file must still be the one the
run read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pgra.core.errors import InputError, StaleArtifactError
from pgra.methods.reader_method import ReaderPredictor
from pgra.retrieval.candidates_stage import retrieve
from pgra.retrieval.index import Index, IndexConfig, build_index
from pgra.retrieval.retrieve import RetrieveConfig
from pgra.serving.pipeline import Pipeline


class _Reader(ReaderPredictor):
    """A reader run that reads 3 passages (no model: these tests stop at retrieval)."""

    n_passages = 3

    def __init__(self) -> None:  # noqa: D107 - nothing to load
        pass


@pytest.fixture()
def excluded_run(tmp_path, corpus_txt, sky_task, monkeypatch):
    """A reader run over candidates retrieved without a planted id: the top hit of the first test input."""
    index = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / "bm25"), retriever="bm25",
                                    show_progress=False))
    plain = retrieve(RetrieveConfig(task=str(sky_task), index=str(index), out=str(tmp_path / "plain"), k=3,
                                    splits=["test"], show_progress=False))
    first = json.loads((plain / "test.jsonl").read_text().splitlines()[0])
    planted = str(first["ctxs"][0]["id"])
    ids = tmp_path / "leakage_ids.txt"
    ids.write_text(f"# planted\n{planted}\n")
    cands = retrieve(RetrieveConfig(task=str(sky_task), index=str(index), out=str(tmp_path / "cands"), k=3,
                                    splits=["test"], exclude_ids=str(ids), show_progress=False))
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"kind": "reader", "data": str(cands)}))
    monkeypatch.setattr("pgra.serving.pipeline.verify_run", lambda run: None)
    monkeypatch.setattr("pgra.serving.pipeline.load_run", lambda run, device=None, trust_remote_code=False: _Reader())
    return {"run": run, "cands": cands, "ids": ids, "planted": planted, "first": first, "index": index}


def test_pipeline_never_returns_an_id_the_run_excluded(excluded_run):
    w = excluded_run
    assert w["planted"] in {str(c["id"]) for c in Index(w["index"]).search_hits([w["first"]["text"]], 3)[0]}
    pipe = Pipeline.load(w["run"])
    lines = [json.loads(x) for x in (w["cands"] / "test.jsonl").read_text().splitlines()]
    got = pipe.retrieve([x["text"] for x in lines])
    # the same candidates the run read, in the same order, and never the planted id
    assert [[str(c["id"]) for c in g] for g in got] == [[str(c["id"]) for c in x["ctxs"]] for x in lines]
    assert all(w["planted"] not in {str(c["id"]) for c in g} for g in got)
    assert pipe.excluded == {w["planted"]}


def test_pipeline_refuses_a_changed_or_missing_exclusion_file(excluded_run):
    w = excluded_run
    ids: Path = w["ids"]
    ids.write_text("# emptied\n")
    with pytest.raises(StaleArtifactError, match="changed since"):
        Pipeline.load(w["run"])
    ids.unlink()
    with pytest.raises(InputError, match="is gone") as e:
        Pipeline.load(w["run"])
    assert e.value.field == "excluded"
