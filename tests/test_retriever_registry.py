"""A first-stage retriever plugged in from outside pgra: a toy word-overlap retriever, defined and registered here,
is a config choice, builds through ``build_index`` (and ``pgra build-index``), is searched by ``Index`` and the
retrieve stage, and runs an experiment's FiD and kNN vote, with no other module changed. And no module outside
``pgra.retrieval`` names a retriever (it asks the retriever instead)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pgra
from pgra.cli import main
from pgra.core.config import from_dict, option
from pgra.core.errors import InputError
from pgra.experiment import Experiment, ExperimentConfig
from pgra.retrieval.base import RETRIEVERS, LoadOptions, Retriever, Searcher, register_retriever
from pgra.retrieval.candidates_stage import retrieve
from pgra.retrieval.config import IndexConfig
from pgra.retrieval.index import Index
from pgra.retrieval.retrieve import RetrieveConfig
from pgra.storage.artifacts import file_record, read_json, write_json
from tests.conftest import SENTENCES

NAME = "toy_overlap"
WORDS = "overlap/words.json"


def _words(text: str, lowercase: bool = True) -> set[str]:
    return set(re.findall(r"\w+", text.lower() if lowercase else text))


@dataclass
class OverlapOptions:
    """The toy retriever's one option (its section ``toy_overlap:`` of an index config)."""

    lowercase: bool = option(True, help="lowercase the words before comparing them")


class OverlapSearcher(Searcher):
    """Jaccard overlap of lowercased word sets; ties go to the lower position."""

    def __init__(self, docs: list[list[str]]) -> None:
        self.docs = [set(d) for d in docs]

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self.docs))
        scores = np.zeros((len(queries), k))
        positions = np.zeros((len(queries), k), dtype=np.int64)
        for row, query in enumerate(queries):
            q = _words(query)
            all_scores = np.array([len(q & d) / max(1, len(q | d)) for d in self.docs])
            top = np.lexsort((np.arange(len(self.docs)), -all_scores))[:k]
            scores[row], positions[row] = all_scores[top], top
        return scores, positions


class OverlapRetriever(Retriever):
    """Its index is the corpus's word sets, lowercased unless its option says otherwise."""

    name = NAME
    title = "word overlap"
    parts = {"overlap": (("*.json",), "a toy index's word sets")}
    options = OverlapOptions

    def _words_kind(self) -> str:
        return "lowercased \\w+" if self.own_options().lowercase else "\\w+"

    def key_fields(self) -> dict[str, Any]:
        return {"words": self._words_kind()}

    def build(self, store, out: Path, work: Path, ctx) -> tuple[dict[str, Any], dict[str, Any]]:
        if not ctx.is_main:
            return {}, {}
        lowercase = self.own_options().lowercase
        write_json(out / WORDS, [sorted(_words(store.text(i), lowercase)) for i in range(len(store))])
        return {WORDS: file_record(out / WORDS)}, {"words": self._words_kind()}

    @classmethod
    def load(cls, directory: Path, manifest: dict[str, Any], options: LoadOptions) -> Searcher:
        return OverlapSearcher(read_json(directory / WORDS))

    @classmethod
    def describe(cls, manifest: dict[str, Any]) -> str:
        return f"word overlap over {manifest['size']} texts"


@pytest.fixture()
def overlap():
    """The toy retriever, registered for one test and gone afterwards."""
    register_retriever(OverlapRetriever)
    yield OverlapRetriever
    RETRIEVERS.pop(NAME, None)


def test_a_registered_retriever_builds_searches_and_retrieves(overlap, corpus_txt, sky_task, tmp_path, capsys):
    assert NAME in RETRIEVERS.names() and {"dense", "bm25"} <= set(RETRIEVERS.names())
    cfg = from_dict(IndexConfig, {"corpus": str(corpus_txt), "out": str(tmp_path / "idx"), "retriever": NAME,
                                  "show_progress": False})
    out = pgra.build_index(cfg)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["retriever"] == NAME and manifest["words"] == "lowercased \\w+"
    assert WORDS in manifest["files"] and manifest["size"] == len(SENTENCES)
    pgra.build_index(cfg)
    assert "up to date" in capsys.readouterr().out

    index = Index(out)
    hits = index.search_hits([SENTENCES[3], SENTENCES[7]], 3)
    assert hits[0][0]["id"] == 3 and hits[0][0]["score"] == 1.0 and hits[1][0]["id"] == 7 and len(hits[1]) == 3

    cands = retrieve(RetrieveConfig(task=str(sky_task), index=str(out), out=str(tmp_path / "cands"), k=4,
                                    show_progress=False))
    record = json.loads((cands / "manifest.json").read_text())["index"]
    assert record["retriever"] == NAME and record["encoder"] is None
    lines = [json.loads(x) for x in (cands / "train.jsonl").read_text().splitlines()]
    assert lines and all(len(x["ctxs"]) == 4 for x in lines)

    assert main(["build-index", "--corpus", str(corpus_txt), "--retriever", NAME, "--out", str(tmp_path / "cli"),
                 "show_progress=false"]) == 0
    assert f"word overlap over {len(SENTENCES)} texts" in capsys.readouterr().out
    # its option, set like a built-in retriever's (key=value here; `index.toy_overlap.lowercase` in an experiment)
    assert main(["build-index", "--corpus", str(corpus_txt), "--retriever", NAME, "--out", str(tmp_path / "cased"),
                 "show_progress=false", f"{NAME}.lowercase=false"]) == 0
    assert json.loads((tmp_path / "cased" / "manifest.json").read_text())["words"] == "\\w+"
    assert main(["build-index", "--corpus", str(corpus_txt), "--retriever", NAME, "--out", str(tmp_path / "typo"),
                 f"{NAME}.lowercse=false"]) == 2
    assert f"{NAME}.lowercse" in capsys.readouterr().err and not (tmp_path / "typo").exists()

    RETRIEVERS.pop(NAME)  # unregistered: its choice and its indexes are refused by name
    with pytest.raises(InputError, match=f"'{NAME}'.*not registered"):
        Index(out)
    with pytest.raises(InputError, match="retriever"):
        from_dict(IndexConfig, {"retriever": NAME})


def _grid(tmp_path: Path, corpus_txt, sky_task, tiny_opt, tiny_t5) -> dict:
    """The tiny grid of tests/test_experiment.py, over the toy retriever, with FiD and the kNN vote."""
    return {
        "out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "methods": ["fid", "knn_vote"], "seeds": [1],
        "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": NAME},
        "retrieve": {"k": 8},
        "rerank": {"lm": str(tiny_opt), "top_d": 3, "num_demos": 2, "cache_dir": str(tmp_path / "cache"),
                   "max_tokens_per_batch": 700},
        "reader": {"model": str(tiny_t5), "n_passages": 3, "max_length": 48, "batch_size": 4, "max_steps": 4,
                   "eval_every": 2, "eval_batch_size": 8, "learning_rate": 1e-3},
        "knn_vote": {"k": 3}, "show_progress": False, "report": True,
    }


def test_a_registered_retriever_s_module_enters_its_index_build_key(overlap, corpus_txt, tmp_path):
    """An index a plug-in retriever built is keyed by the plug-in's module too: a retriever of the same name from
    another module never reuses its shards or its index; a built-in retriever's key holds no module (as always)."""
    from pgra.retrieval.base import get_retriever
    from pgra.retrieval.build import _build_key

    cfg = from_dict(IndexConfig, {"corpus": str(corpus_txt), "out": str(tmp_path / "idx"), "retriever": NAME})
    moved = type("Moved", (OverlapRetriever,), {"__module__": "elsewhere.plugin"})
    assert _build_key(get_retriever(cfg), "fp") != _build_key(moved(cfg), "fp")
    bm25 = get_retriever(from_dict(IndexConfig, {"corpus": str(corpus_txt), "out": str(tmp_path / "b"),
                                                 "retriever": "bm25"}))
    payload = {"retriever": "bm25", "corpus": "fp", **bm25.key_fields()}
    assert _build_key(bm25, "fp") == hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def test_an_experiment_runs_fid_and_knn_vote_over_a_registered_retriever(overlap, tmp_path, corpus_txt, sky_task,
                                                                        tiny_opt, tiny_t5):
    from pgra.analysis.retrievers import retriever_name

    grid = _grid(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5)
    grid["index"][NAME] = {"lowercase": False}  # the plug-in retriever's option, from the experiment's index section
    cfg = from_dict(ExperimentConfig, grid)
    assert cfg.index.toy_overlap.lowercase is False
    assert Experiment(cfg).run() == []
    assert json.loads((tmp_path / "index" / "manifest.json").read_text())["words"] == "\\w+"
    out = tmp_path / "exp" / "sky"
    for method in ("fid", "knn_vote"):
        assert (out / method / "seed-1" / "cell.json").exists()
        preds = [json.loads(x) for x in (out / method / "seed-1" / "predictions_test.jsonl").read_text().splitlines()]
        assert preds and all(p["label"] in ("sky", "town") for p in preds)
    knn = json.loads((out / "knn_vote" / "seed-1" / "manifest.json").read_text())
    assert json.loads((Path(knn["train_index"]) / "manifest.json").read_text())["retriever"] == NAME
    assert json.loads((out / "candidates" / "manifest.json").read_text())["index"]["retriever"] == NAME
    assert retriever_name(cfg.index) == NAME
    with pytest.raises(InputError, match="linear_probe.encoder"):  # no query encoder to borrow
        Experiment(cfg).method(str(sky_task), "linear_probe").settings()


def _named_retrievers(path: Path) -> list[str]:
    """``"dense"`` / ``"bm25"`` string literals and ``.dense`` / ``.bm25`` attributes in a module."""
    found, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING and tok.string.strip("\"'") in ("dense", "bm25"):
            found.append(f"{path}:{tok.start[0]}: {tok.string}")
        if tok.type == tokenize.NAME and tok.string in ("dense", "bm25") and previous == ".":
            found.append(f"{path}:{tok.start[0]}: .{tok.string}")
        previous = tok.string
    return found


# modules outside retrieval/ that say "bm25" for something else than the retriever
NOT_THE_RETRIEVER = {
    "selection/base.py": "the bm25 demonstration strategy's module, among the built-in strategies (BUILTIN)",
    "selection/bm25.py": "the bm25 demonstration strategy: it scores training inputs with pgra.retrieval.bm25's "
                         "BM25Index, not through the retriever registry",
}


def test_no_module_outside_retrieval_names_a_retriever():
    package = Path(pgra.__file__).parent
    found = [hit for path in sorted(package.rglob("*.py")) if "retrieval" not in path.relative_to(package).parts
             and path.relative_to(package).as_posix() not in NOT_THE_RETRIEVER
             for hit in _named_retrievers(path)]
    assert not found, "\n".join(found)


def test_a_retriever_estimates_its_own_index_size_for_the_disk_plan(tiny_bert):
    """The dry run's disk plan asks the index's retriever (no module outside pgra.retrieval names one): a dense
    index is its sentences x the encoder's dimension x 4 B (1 B a dimension for ivfsq8); BM25 and an encoder not
    here are not estimated."""

    from pgra.retrieval.base import get_retriever
    from pgra.retrieval.index import DenseConfig, IndexConfig

    dim = json.loads((tiny_bert / "config.json").read_text())["hidden_size"]
    dense = lambda **kw: get_retriever(IndexConfig(corpus="c.txt", out="ix", dense=DenseConfig(**kw)))  # noqa: E731
    assert dense(encoder=str(tiny_bert)).estimated_index_bytes(1000) == (
        1000 * dim * 4, f"1,000 sentences x {dim} dims x 4 B, flat")
    assert dense(encoder=str(tiny_bert), index_type="ivfsq8").estimated_index_bytes(1000) == (
        1000 * dim, f"1,000 sentences x {dim} B, ivfsq8")
    assert dense(encoder="org/not-here").estimated_index_bytes(10) == (None, "the encoder's dimension is unknown here")
    bm25 = get_retriever(IndexConfig(corpus="c.txt", out="ix", retriever="bm25"))
    assert bm25.estimated_index_bytes(10) == (None, "its retriever's size is not estimated")
