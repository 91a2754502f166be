import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pgra.core.errors import IncompleteArtifactError, InputError, StaleArtifactError
from pgra.lm.prompts import build_prompt
from pgra.rerank.config import RerankConfig
from pgra.rerank.prompt_guided.embedder import LMEmbedder
from pgra.rerank.stages import rerank
from pgra.retrieval.index import IndexConfig, build_index
from pgra.selection import get_selector
from pgra.tasks import Example, get_task
from tests import numerics
from tests.conftest import SENTENCES, launch_failure

ROOT = Path(__file__).resolve().parents[1]
def test_retrieve_writes_interchange_files(candidates):
    manifest = json.loads((candidates / "manifest.json").read_text())
    assert manifest["kind"] == "candidates" and manifest["k"] == 10
    assert manifest["counts"] == {"train": 12, "dev": 2, "test": 6}
    assert manifest["data_provenance"]["dev"]["carved_from"] == "train"
    rec = json.loads((candidates / "test.jsonl").read_text().splitlines()[0])
    assert set(rec) == {"id", "text", "label", "ctxs"} and len(rec["ctxs"]) == 10
    assert set(rec["ctxs"][0]) == {"id", "text", "score"} and rec["ctxs"][0]["text"] == SENTENCES[rec["ctxs"][0]["id"]]


def _cfg(candidates, tmp_path, lm, **kw):
    base = {"candidates": str(candidates), "out": str(tmp_path / "reranked"), "lm": str(lm), "top_d": 4,
            "num_demos": 4, "cache_dir": str(tmp_path / "cache"), "show_progress": False,
            "max_tokens_per_batch": 700, "max_batch_size": 6}
    base.update(kw)
    return RerankConfig(**base)


def test_rerank_matches_naive_reference(candidates, tmp_path, tiny_lm):
    out = rerank(_cfg(candidates, tmp_path, tiny_lm))
    manifest = json.loads((out / "manifest.json").read_text())
    task = get_task(str(Path(manifest["task"]["source"])))
    demos = [Example(d["id"], d["text"], d["label"]) for d in json.loads((out / "demonstrations.json").read_text())]
    assert [d.id for d in demos] == manifest["demonstrations"] and len(demos) == 4
    emb = LMEmbedder(str(tiny_lm))
    cand_test = [json.loads(x) for x in (candidates / "test.jsonl").read_text().splitlines()]
    for rec, got in zip(cand_test, [json.loads(x) for x in (out / "test.jsonl").read_text().splitlines()],
                        strict=True):
        texts = [rec["text"]] + [c["text"] for c in rec["ctxs"]]
        vec = emb.embed_full([build_prompt(task, demos, t) for t in texts], batch_size=1)  # naive: one at a time
        scores = vec[1:] @ vec[0]
        probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        top = np.argsort(-probs, kind="stable")[:4]
        numerics.assert_same_ranking([c["id"] for c in got["ctxs"]], [c["score"] for c in got["ctxs"]],
                                     [rec["ctxs"][j]["id"] for j in top], probs[top], depth=numerics.TINY_MODEL,
                                     scale=1)
        assert [rec["ctxs"][c["retrieval_rank"] - 1]["id"] for c in got["ctxs"]] == [c["id"] for c in got["ctxs"]]


def test_train_keeps_the_demos_unless_told_and_a_warm_cache_embeds_nothing(candidates, tmp_path, tiny_opt):
    """The reranked train split holds every training input, the prompt's demonstrations too: the inputs FiD's reader
    trains on (`rerank.demos_in_train: false` drops them, the earlier behaviour)."""
    out = rerank(_cfg(candidates, tmp_path, tiny_opt))
    m1 = json.loads((out / "manifest.json").read_text())
    train_ids = {json.loads(x)["id"] for x in (out / "train.jsonl").read_text().splitlines()}
    first_stage = {json.loads(x)["id"] for x in (candidates / "train.jsonl").read_text().splitlines()}
    assert train_ids == first_stage and set(m1["demonstrations"]) <= train_ids and m1["counts"]["train"] == 12
    dropped = rerank(_cfg(candidates, tmp_path, tiny_opt, demos_in_train=False, out=str(tmp_path / "dropped")))
    kept = {json.loads(x)["id"] for x in (dropped / "train.jsonl").read_text().splitlines()}
    assert kept == train_ids - set(m1["demonstrations"]) and len(kept) == 12 - 4
    assert m1["embedding"]["evidence_cache_hits"] == 0 and m1["embedding"]["tokens_run"] > 0
    out2 = rerank(_cfg(candidates, tmp_path, tiny_opt, top_d=2, out=str(tmp_path / "r2")))  # a d sweep
    m2 = json.loads((out2 / "manifest.json").read_text())
    assert m2["embedding"]["evidence_cache_hits"] == m2["embedding"]["evidence_rows"]
    assert m2["embedding"]["tokens_run"] == 0  # queries are cached too
    r1 = [json.loads(x) for x in (out / "test.jsonl").read_text().splitlines()]
    r2 = [json.loads(x) for x in (out2 / "test.jsonl").read_text().splitlines()]
    assert [r["ctxs"][:2] for r in r1] == [r["ctxs"] for r in r2]
    out3 = rerank(_cfg(candidates, tmp_path, tiny_opt, seed=99, out=str(tmp_path / "r3")))  # other demos
    assert json.loads((out3 / "manifest.json").read_text())["embedding"]["evidence_cache_hits"] == 0


def test_rerank_bad_inputs(candidates, tmp_path, tiny_opt, corpus_txt):
    other = tmp_path / "other.txt"
    other.write_text("\n".join(reversed(SENTENCES)) + "\n")
    other_index = build_index(IndexConfig(corpus=str(other), out=str(tmp_path / "other"), retriever="bm25",
                                          show_progress=False))
    with pytest.raises(StaleArtifactError, match="another corpus"):
        rerank(_cfg(candidates, tmp_path, tiny_opt, index=str(other_index)))
    lines = (candidates / "test.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["ctxs"] = []
    lines[1] = json.dumps(rec)
    (candidates / "test.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(IncompleteArtifactError, match=r"test\.jsonl: size \d+ bytes, the manifest says"):
        rerank(_cfg(candidates, tmp_path, tiny_opt))  # an edited file no longer matches its manifest
    manifest = json.loads((candidates / "manifest.json").read_text())
    manifest.pop("files")  # a hand-made folder (no file records): the records themselves are checked
    (candidates / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"test\.jsonl:2 \(field 'ctxs'\): query has no candidates"):
        rerank(_cfg(candidates, tmp_path, tiny_opt))
    assert not (tmp_path / "reranked" / "manifest.json").exists()


def test_demo_selection_rules():
    task = get_task("sst5")
    train = [Example(str(i), f"t{i}", str(i % 5 if i < 40 else 0)) for i in range(60)]
    paper = get_selector("paper", 8, seed=1).fit(task, train).demo_examples
    counts = sorted(sum(d.label == lab for d in paper) for lab in task.labels)
    assert len(paper) == 8 and counts == [1, 1, 2, 2, 2]  # balanced over labels
    assert paper == get_selector("paper", 8, seed=1).fit(task, train).demo_examples
    assert paper != get_selector("paper", 8, seed=2).fit(task, train).demo_examples
    code = get_selector("code", 8).fit(task, train).demo_examples  # file order, at most int(8/5)+1 = 2 per label
    assert [d.id for d in code] == ["0", "1", "2", "3", "4", "5", "6", "7"]
    skewed = [Example(str(i), "x", "0") for i in range(10)] + [Example("a", "y", "1")]
    code2 = get_selector("code", 8).fit(get_task("sst2"), skewed).demo_examples  # walks on until every label is in
    assert [d.id for d in code2] == ["0", "1", "2", "3", "4", "a"]


@pytest.mark.distributed
@pytest.mark.parametrize("strategy", ["paper", "kate"])  # one shared prompt; a prompt per query
def test_two_process_rerank_equals_single_process(candidates, tmp_path, tiny_opt, tiny_bert, strategy):
    from pgra.selection import SelectorSettings

    demos = SelectorSettings(encoder=str(tiny_bert), cache_dir=str(tmp_path / "sel"))
    single = rerank(_cfg(candidates, tmp_path, tiny_opt, out=str(tmp_path / "single"), demo_selection=strategy,
                         demos=demos, cache_dir=str(tmp_path / "c1")))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts" / "rerank.py"), "--candidates", str(candidates), "--out", str(tmp_path / "multi"),
           "--lm", str(tiny_opt), "--top-d", "4", "--num-demos", "4", "--cache-dir", str(tmp_path / "c2"),
           "--demo-selection", strategy, "--demo-encoder", str(tiny_bert), f"demos.cache_dir={tmp_path / 'sel'}"]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, launch_failure(proc)
    for split in ("train", "dev", "test"):
        a = [json.loads(x) for x in (single / f"{split}.jsonl").read_text().splitlines()]
        b = [json.loads(x) for x in (tmp_path / "multi" / f"{split}.jsonl").read_text().splitlines()]
        numerics.assert_same_rankings([r["ctxs"] for r in b], [r["ctxs"] for r in a], depth=numerics.TINY_MODEL)


@pytest.mark.distributed
def test_two_process_retrieve_equals_single_process(candidates, tmp_path, sky_task):
    manifest = json.loads((candidates / "manifest.json").read_text())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "scripts" / "retrieve.py"), "--task", str(sky_task), "--index", manifest["index"]["path"],
           "--out", str(tmp_path / "multi"), "-k", "10"]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, launch_failure(proc)
    for split in ("train", "dev", "test"):
        assert (tmp_path / "multi" / f"{split}.jsonl").read_text() == (candidates / f"{split}.jsonl").read_text()
    assert not (tmp_path / "multi" / ".parts").exists()
    # excluded corpus ids: the same candidates and removal counts as one process
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.retrieve import RetrieveConfig

    first = [json.loads(x)["ctxs"][0]["id"] for x in (candidates / "test.jsonl").read_text().splitlines()]
    (tmp_path / "ids.txt").write_text(f"{first[0]}\n{first[-1]}\n")
    proc = subprocess.run(cmd[:-4] + ["--out", str(tmp_path / "multi-x"), "-k", "10", "--exclude-ids",
                                      str(tmp_path / "ids.txt")],
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, launch_failure(proc)
    single = retrieve(RetrieveConfig(task=str(sky_task), index=manifest["index"]["path"], out=str(tmp_path / "one-x"),
                                     k=10, exclude_ids=str(tmp_path / "ids.txt"), show_progress=False))
    for split in ("train", "dev", "test"):
        assert (tmp_path / "multi-x" / f"{split}.jsonl").read_text() == (single / f"{split}.jsonl").read_text()
    excluded = [json.loads((d / "manifest.json").read_text())["excluded"] for d in (tmp_path / "multi-x", single)]
    assert excluded[0]["removed_from_top_k"] == excluded[1]["removed_from_top_k"]
    assert excluded[0]["removed_from_top_k"]["test"] >= 2  # both were some test input's first candidate


def test_warm_cache_rerank_never_loads_the_lm(candidates, tmp_path, tiny_opt, monkeypatch):
    rerank(_cfg(candidates, tmp_path, tiny_opt))
    import transformers

    def no_load(*args, **kwargs):
        raise AssertionError("the LM weights were loaded although every embedding was cached")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", no_load)
    out = rerank(_cfg(candidates, tmp_path, tiny_opt, top_d=3, out=str(tmp_path / "sweep")))
    assert json.loads((out / "manifest.json").read_text())["top_d"] == 3


@pytest.mark.parametrize("strategy", ["kate", "random"])
def test_per_query_demonstrations_match_the_naive_formula(candidates, tmp_path, tiny_opt, tiny_bert, strategy):
    from pgra.selection import SelectorSettings

    settings = SelectorSettings(encoder=str(tiny_bert), pooler="mean", cache_dir=str(tmp_path / "sel"))
    cfg = _cfg(candidates, tmp_path, tiny_opt, demo_selection=strategy, num_demos=3, demos=settings, seed=5)
    out = rerank(cfg)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["per_query_demonstrations"] and manifest["counts"]["train"] == 12  # nobody leaves train
    task = get_task(str(Path(manifest["task"]["source"])))
    train = [Example(str(r["id"]), r["text"], r["label"])
             for r in (json.loads(x) for x in (candidates / "train.jsonl").read_text().splitlines())]
    emb = LMEmbedder(str(tiny_opt))
    selector = get_selector(strategy, 3, seed=5, settings=settings).fit(task, train)
    for split in ("train", "test"):
        cands = [json.loads(x) for x in (candidates / f"{split}.jsonl").read_text().splitlines()]
        got = [json.loads(x) for x in (out / f"{split}.jsonl").read_text().splitlines()]
        chosen = selector.select_examples([Example(str(r["id"]), r["text"]) for r in cands])
        for rec, res, demos in zip(cands, got, chosen, strict=True):
            assert [d["id"] for d in res["demonstrations"]] == [d.id for d in demos]
            assert rec["text"].strip() not in [d.text.strip() for d in demos]  # never itself
            texts = [rec["text"]] + [c["text"] for c in rec["ctxs"]]
            vec = emb.embed_full([build_prompt(task, demos, t) for t in texts], batch_size=1)
            scores = vec[1:] @ vec[0]
            probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
            top = np.argsort(-probs, kind="stable")[:4]
            numerics.assert_same_ranking([c["id"] for c in res["ctxs"]], [c["score"] for c in res["ctxs"]],
                                         [rec["ctxs"][j]["id"] for j in top], probs[top],
                                         depth=numerics.TINY_MODEL, scale=1)
    again = rerank(replace(cfg, out=str(tmp_path / "again")))  # the per-query cache: nothing runs twice
    assert json.loads((again / "manifest.json").read_text())["embedding"]["tokens_run"] == 0


@pytest.mark.parametrize("strategy", ["paper", "kate"])
def test_in_memory_reranker_replays_the_stage(candidates, tmp_path, tiny_opt, tiny_bert, strategy):
    """``PromptGuidedReranker.load(folder).rerank(texts, candidates)`` gives the stage's top d: with the evidence cache, without
    it, without a corpus (the candidates' own texts), and with per-query demonstrations."""
    from pgra.data.corpus import CorpusStore
    from pgra.rerank.prompt_guided.in_memory import PromptGuidedReranker
    from pgra.selection import SelectorSettings

    settings = SelectorSettings(encoder=str(tiny_bert), pooler="mean", cache_dir=str(tmp_path / "sel"))
    out = rerank(_cfg(candidates, tmp_path, tiny_opt, demo_selection=strategy, num_demos=3, demos=settings, k=6))
    store = CorpusStore(Path(json.loads((candidates / "manifest.json").read_text())["index"]["path"]) / "corpus")
    cands = [json.loads(x) for x in (candidates / "test.jsonl").read_text().splitlines()]
    want = [json.loads(x)["ctxs"] for x in (out / "test.jsonl").read_text().splitlines()]
    cached = PromptGuidedReranker.load(out, store)
    assert cached.k == 6 and cached.top_d == 4 and cached.per_query == (strategy == "kate")
    assert (cached.evidence_cache is not None) == (strategy == "paper")
    uncached = PromptGuidedReranker.load(out, store)
    uncached.evidence_cache = None
    for reranker in (cached, uncached, PromptGuidedReranker.load(out, None)):
        got = reranker.rerank([r["text"] for r in cands], [r["ctxs"] for r in cands])
        for g, w in zip(got, want, strict=True):
            assert [c["id"] for c in g] == [c["id"] for c in w]
            assert [c["retrieval_rank"] for c in g] == [c["retrieval_rank"] for c in w]
            numerics.assert_close([c["score"] for c in g], [c["score"] for c in w], depth=numerics.TINY_MODEL)
