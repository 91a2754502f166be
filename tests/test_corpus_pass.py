"""The corpus pass (``rerank.corpus_pass``) and ``pgra_full`` (prompt-guided search of the whole corpus)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pgra.core.config import result_settings, to_dict
from pgra.core.errors import InputError
from pgra.core.faults import ENV, KILLED_EXIT
from pgra.rerank.config import RerankConfig
from pgra.rerank.prompt_guided.embedder import LMEmbedder
from pgra.rerank.prompt_guided.search_stage import FullSearchStage
from pgra.rerank.stages import rerank
from tests import numerics
from tests.conftest import SENTENCES

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "dev", "test")


@pytest.fixture()
def all_candidates(tmp_path, corpus_txt, sky_task) -> Path:
    """Candidates of the sky task retrieved at k = the whole fixture corpus (BM25)."""
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.index import IndexConfig, build_index
    from pgra.retrieval.retrieve import RetrieveConfig

    index = build_index(IndexConfig(corpus=str(corpus_txt), out=str(tmp_path / "bm25"), retriever="bm25",
                                    show_progress=False))
    out = retrieve(RetrieveConfig(task=str(sky_task), index=str(index), out=str(tmp_path / "cands"),
                                  k=len(SENTENCES), show_progress=False))
    for split in SPLITS:  # every input's candidates are the whole corpus
        assert all(len(json.loads(x)["ctxs"]) == len(SENTENCES) for x in (out / f"{split}.jsonl").read_text().splitlines())
    return out


def _cfg(candidates, tmp_path, lm, out, cache, **kw) -> RerankConfig:
    base = {"candidates": str(candidates), "out": str(tmp_path / out), "lm": str(lm), "top_d": 4, "num_demos": 4,
            "cache_dir": str(tmp_path / cache), "show_progress": False, "max_tokens_per_batch": 700,
            "max_batch_size": 6}
    return RerankConfig(**{**base, **kw})


def _records(folder: Path) -> dict[str, list[dict]]:
    return {s: [json.loads(x) for x in (folder / f"{s}.jsonl").read_text().splitlines()] for s in SPLITS}


@pytest.fixture()
def lm_calls(monkeypatch) -> dict[str, int]:
    """Every call of the LM embedder's two entry points, counted (texts and calls)."""
    counts = {"calls": 0, "texts": 0}
    for name in ("embed", "embed_full"):
        real = getattr(LMEmbedder, name)

        def counted(self, texts, *args, _real=real, **kwargs):
            counts["calls"] += 1
            counts["texts"] += len(texts)
            return _real(self, texts, *args, **kwargs)

        monkeypatch.setattr(LMEmbedder, name, counted)
    return counts


def test_the_option_stays_out_of_keys_and_records_at_its_default():
    """Off, ``corpus_pass`` is in no key and no recorded config (every artifact made before it stays as it was);
    set, it is recorded but keyed nowhere (it changes what is embedded when, never a result)."""
    off, on = RerankConfig(), RerankConfig(corpus_pass="corpus")
    assert "corpus_pass" not in to_dict(off) and to_dict(on)["corpus_pass"] == "corpus"
    assert result_settings(off) == result_settings(on) and "corpus_pass" not in result_settings(on)
    from pgra.experiment import ExperimentConfig

    assert "corpus_pass" not in to_dict(ExperimentConfig())["rerank"]
    assert to_dict(ExperimentConfig(rerank=on))["rerank"]["corpus_pass"] == "corpus"
    from pgra.analysis.costs import stages_needed

    # the cost analysis charges pgra_full its search (not the first stage it never reads), pgra as before
    assert stages_needed("pgra_full") == ["full_search"] and stages_needed("pgra") == ["candidates", "reranked"]


@pytest.mark.parametrize("mode", ["corpus", "candidates"])
def test_after_the_pass_every_k_equals_the_per_candidate_path_without_an_lm_call(all_candidates, tmp_path, tiny_opt,
                                                                                  lm_calls, mode):
    first = rerank(_cfg(all_candidates, tmp_path, tiny_opt, "pass", "cache", k=4, corpus_pass=mode))
    record = json.loads((first / "manifest.json").read_text())["corpus_pass"]
    want_rows = len(SENTENCES) if mode == "corpus" else record["evidence_rows"]
    assert record["evidence_rows"] == want_rows <= len(SENTENCES) and record["cached_before"] == 0
    assert record["texts"] == want_rows + record["queries"] and record["tokens_run"] > 0
    for k in (3, len(SENTENCES)):  # k = the whole corpus
        lm_calls.update(calls=0, texts=0)
        got = rerank(_cfg(all_candidates, tmp_path, tiny_opt, f"k{k}", "cache", k=k))
        assert lm_calls == {"calls": 0, "texts": 0}, k  # the cache answers every row, no LM runs
        assert json.loads((got / "manifest.json").read_text())["embedding"]["tokens_run"] == 0
        ref = rerank(_cfg(all_candidates, tmp_path, tiny_opt, f"ref{k}", f"ref-cache{k}", k=k))  # today's path
        assert lm_calls["texts"] > 0
        _same(_records(got), _records(ref))


def _same(got: dict[str, list[dict]], want: dict[str, list[dict]]) -> None:
    """The same records and top d in the same order; the scores equal up to float32 rounding (a sentence embedded
    in another batch, of other lengths, rounds its last bits differently: as a warm cache's rows already do)."""
    def without_scores(records):
        return {s: [{**r, "ctxs": [{k: v for k, v in c.items() if k != "score"} for c in r["ctxs"]]} for r in rs]
                for s, rs in records.items()}

    assert without_scores(got) == without_scores(want)
    for split in SPLITS:
        for g, w in zip(got[split], want[split], strict=True):
            numerics.assert_close([c["score"] for c in g["ctxs"]], [c["score"] for c in w["ctxs"]],
                                  depth=numerics.TINY_MODEL)


def test_a_pass_killed_mid_way_resumes_from_its_last_chunk(all_candidates, tmp_path, tiny_opt, capsys):
    from pgra.cli import main

    def argv(out, cache):
        return ["rerank", "--candidates", str(all_candidates), "--out", str(tmp_path / out), "--lm", str(tiny_opt),
                "--cache-dir", str(tmp_path / cache), "--top-d", "3", "--num-demos", "2", "--chunk-size", "8",
                "-k", "5", "--corpus-pass", "corpus", "--no-show-progress"]

    assert main(argv("ref", "cache-ref")) == 0, capsys.readouterr().err
    env = {**os.environ, ENV: "rerank.chunk@2", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", "import sys; from pgra.cli import main; sys.exit(main(sys.argv[1:]))",
                           *argv("out", "cache")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == KILLED_EXIT, proc.stderr[-2000:]
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert main(argv("out", "cache")) == 0, capsys.readouterr().err
    record = json.loads((tmp_path / "out" / "manifest.json").read_text())["corpus_pass"]
    assert record["cached_before"] == 16  # two chunks of 8 were done before the kill: not embedded again
    assert record["texts"] == len(SENTENCES) - 16 + record["queries"]
    _same(_records(tmp_path / "out"), _records(tmp_path / "ref"))


def test_the_pass_needs_one_prompt_for_all(all_candidates, tmp_path, tiny_opt):
    with pytest.raises(InputError) as e:
        rerank(_cfg(all_candidates, tmp_path, tiny_opt, "r", "cache", corpus_pass="corpus", demo_selection="random"))
    assert e.value.field == "corpus_pass"


def test_full_search_is_the_reranker_at_k_equal_to_the_corpus(all_candidates, tmp_path, tiny_opt, lm_calls):
    """Ranking the whole corpus by Eq. 3 and searching it by inner product pick the same top d."""
    out = FullSearchStage().run(_cfg(all_candidates, tmp_path, tiny_opt, "full", "cache", k=3))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "full_search" and manifest["searched_rows"] == len(SENTENCES)
    assert manifest["corpus_pass"]["evidence_rows"] == len(SENTENCES) and manifest["embedding"]["tokens_run"] > 0
    texts = lm_calls["texts"]
    ranked = rerank(_cfg(all_candidates, tmp_path, tiny_opt, "all", "cache", k=0))  # every retrieved = the corpus
    assert lm_calls["texts"] == texts  # the search's pass left nothing to embed
    full, reranked = _records(out), _records(ranked)
    for split in SPLITS:
        assert [r["id"] for r in full[split]] == [r["id"] for r in reranked[split]]
        for f, r in zip(full[split], reranked[split], strict=True):
            assert [c["id"] for c in f["ctxs"]] == [c["id"] for c in r["ctxs"]], (split, f["id"])
            assert all(c["text"] == SENTENCES[c["id"]] for c in f["ctxs"])
            scores = [c["score"] for c in f["ctxs"]]
            assert scores == sorted(scores, reverse=True) and all(-1.0001 <= s <= 1.0001 for s in scores)
    with pytest.raises(InputError) as e:
        FullSearchStage().run(_cfg(all_candidates, tmp_path, tiny_opt, "full2", "cache", demo_selection="random"))
    assert e.value.field == "demo_selection"


def test_pgra_full_runs_beside_fid_and_pgra_in_a_grid(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, monkeypatch):
    from pgra.cli.experiment import run_and_report
    from pgra.core.config import from_dict
    from pgra.experiment import Experiment, ExperimentConfig

    grid = {
        "out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "methods": ["no_retrieval", "fid", "pgra", "pgra_full"],
        "seeds": [1],
        "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": "bm25"},
        "retrieve": {"k": 6},
        "rerank": {"lm": str(tiny_opt), "top_d": 4, "num_demos": 2, "cache_dir": str(tmp_path / "cache"),
                   "max_tokens_per_batch": 700},
        "reader": {"model": str(tiny_t5), "n_passages": 3, "max_length": 48, "batch_size": 4, "max_steps": 2,
                   "eval_every": 2, "eval_batch_size": 8, "learning_rate": 1e-3},
        "show_progress": False, "report": True,
    }
    cfg = from_dict(ExperimentConfig, grid)
    exp = Experiment(cfg)
    assert exp.stages_needed() == ["candidates", "reranked", "full_search"]
    assert "full_search" in exp.describe() and "pgra_full" in exp.describe()
    assert run_and_report(cfg) == []
    task = Path(grid["out"]) / "sky"
    cell = json.loads((task / "pgra_full" / "seed-1" / "cell.json").read_text())
    assert cell["data"]["folder"] == str((task / "full_search").resolve())
    manifest = json.loads((task / "full_search" / "manifest.json").read_text())
    assert manifest["corpus_pass"]["evidence_rows"] == len(SENTENCES)  # the whole corpus, searched
    from pgra.rerank.stage import reranked_cost

    assert cell["lm_cost"] == {**reranked_cost(manifest).as_dict(), "shared_by_seeds": True}  # the stage's LM work
    full = [json.loads(x) for x in (task / "full_search" / "test.jsonl").read_text().splitlines()]
    assert all(len(r["ctxs"]) == 4 for r in full)  # the stage keeps top_d; the reader reads its n_passages
    results = json.loads((Path(grid["out"]) / "results.json").read_text())
    assert "pgra_full" in json.dumps(results)
    # the other methods' stages and cells keep the keys a grid without pgra_full gives them
    plain = Experiment(from_dict(ExperimentConfig, {**grid, "methods": ["fid", "pgra"]}))
    assert plain.stages_needed() == ["candidates", "reranked"]
    keys = {(c.method, c.key) for c in plain.plan()}
    assert keys <= {(c.method, c.key) for c in exp.plan()}
    assert all(c.status == "done" for c in Experiment(replace(cfg)).plan())
    # raw texts through the pgra_full run: the whole corpus searched again, the run's evidence and predictions
    from pgra.serving.pipeline import Pipeline

    saved = [json.loads(x) for x in (task / "pgra_full" / "seed-1" / "predictions_test.jsonl").read_text().splitlines()]
    got = Pipeline.load(task / "pgra_full" / "seed-1").predict([x["text"] for x in saved])
    assert [[str(e["id"]) for e in g["evidence"]] for g in got] == [[str(i) for i in x["evidence"]] for x in saved]
    assert [g["prediction"] for g in got] == [x["prediction"] for x in saved]
    # label consistency has a row for the evidence pgra_full reads, counted over its top d
    import yaml

    from pgra.cli import main

    cfg_file = tmp_path / "exp.yaml"
    cfg_file.write_text(yaml.safe_dump(grid))
    from tests.test_analysis import hashed_labels

    label_of = hashed_labels(monkeypatch, sorted({r["label"] for r in full}))
    assert main(["analyze", "--config", str(cfg_file), "analysis.analyses=consistency"]) == 0
    analysis = Path(grid["out"]) / "analysis"
    rows = {r["source"]: r for r in json.loads((analysis / "analysis.json").read_text())["tables"]["consistency"]}
    from pgra.analysis.consistency import FULL_SEARCH_SOURCE

    pairs = [(r["label"], label_of(c["id"])) for r in full for c in r["ctxs"][:3]]
    assert rows[FULL_SEARCH_SOURCE]["evidence"] == len(pairs) and rows[FULL_SEARCH_SOURCE]["d"] == 3
    assert rows[FULL_SEARCH_SOURCE]["share"] == pytest.approx(sum(g == p for g, p in pairs) / len(pairs))  # numerics: a count, divided
    # where the corpus pass's embeddings are gone (another machine), the pgra_full run says so, naming them
    import shutil

    from pgra.core.errors import InputError

    # an export carries the search: the folder's demonstrations, its LM and (--copy-index) the corpus pass's vectors
    run = task / "pgra_full" / "seed-1"
    copied, pointed = tmp_path / "shared-copied", tmp_path / "shared-pointed"
    assert main(["export", "--run", str(run), "--out", str(copied), "--copy-index", "--copy-lm"]) == 0
    assert main(["export", "--run", str(run), "--out", str(pointed)]) == 0
    spec = json.loads((copied / "export.json").read_text())
    assert spec["reranked"]["kind"] == "full_search" and spec["reranked"]["store"]["copied"] is True
    (key_file,) = (copied / "store").glob("*/key.json")
    assert str(tmp_path) not in key_file.read_text()  # the LM by its folder's name, as the export's manifests
    assert "PGRA (whole corpus)" in (copied / "README.md").read_text()
    shutil.rmtree(tmp_path / "cache")
    with pytest.raises(InputError, match="pgra_full searches the corpus pass's embeddings"):
        Pipeline.load(run)
    with pytest.raises(InputError, match="export the run with --copy-index"):
        Pipeline.load(pointed)
    from pgra.rerank.prompt_guided.cache import EmbeddingCache

    opened, real = [], EmbeddingCache.__init__
    monkeypatch.setattr(EmbeddingCache, "__init__",
                        lambda self, *a, **kw: (opened.append(kw.get("read_only")), real(self, *a, **kw))[1])
    got = Pipeline.load(copied).predict([x["text"] for x in saved])  # the cache is gone: the copy searches
    assert opened == [True]  # the export's store is only read (mapped read-only)
    assert [[str(e["id"]) for e in g["evidence"]] for g in got] == [[str(i) for i in x["evidence"]] for x in saved]
    assert [g["prediction"] for g in got] == [x["prediction"] for x in saved]
    # an export.json edited to drop the store of a full search is refused by name, before any model loads
    spec = json.loads((copied / "export.json").read_text())
    spec["reranked"]["store"] = None
    (copied / "export.json").write_text(json.dumps(spec))
    with pytest.raises(InputError) as e:
        Pipeline.load(copied)
    assert e.value.field == "reranked.store"
    # a store that is gone or incomplete is refused when exporting, before anything is written
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "shared-late"), "--copy-index"]) == 2
    assert not (tmp_path / "shared-late" / "export.json").exists()
