"""Stage 2 as a family: each reranker against a naive reference on a tiny case, the keys of the family's options,
a toy reranker registered from outside ``pgra/`` run through ``pgra rerank`` and a grid with several reranked
stages, and the per-reranker comparison of ``pgra analyze``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from pgra.cli import main
from pgra.core.config import from_dict, to_dict
from pgra.core.errors import InputError
from pgra.rerank.base import RERANKERS, Reranker
from pgra.rerank.config import RerankConfig
from pgra.rerank.stages import rerank
from tests import numerics


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _cfg(candidates: Path, out: Path, reranker: str, **kw) -> RerankConfig:
    return from_dict(RerankConfig, {"candidates": str(candidates), "out": str(out), "reranker": reranker,
                                    "show_progress": False, **kw})


def test_random_draws_d_of_k_like_a_seeded_reference(candidates, tmp_path):
    out = rerank(_cfg(candidates, tmp_path / "r", "random", k=6, top_d=3, random={"seed": 5}))
    got = _lines(out / "test.jsonl")
    for cand, rec in zip(_lines(candidates / "test.jsonl"), got, strict=True):
        ids = [str(c["id"]) for c in cand["ctxs"][:6]]
        h = hashlib.sha256(repr((5, cand["text"], ids)).encode()).digest()  # the documented draw, written out
        draws = np.random.default_rng(int.from_bytes(h[:8], "little")).random(6)
        want = [ids[j] for j in sorted(range(6), key=lambda j: (-draws[j], j))[:3]]
        assert [str(c["id"]) for c in rec["ctxs"]] == want
        assert [c["retrieval_rank"] for c in rec["ctxs"]] == [ids.index(i) + 1 for i in want]
    again = rerank(_cfg(candidates, tmp_path / "r2", "random", k=6, top_d=3, random={"seed": 5}))
    assert _lines(again / "test.jsonl") == got
    other = rerank(_cfg(candidates, tmp_path / "r3", "random", k=6, top_d=3, random={"seed": 6}))
    assert _lines(other / "test.jsonl") != got
    m = json.loads((out / "manifest.json").read_text())
    assert m["reranker"] == "random" and m["config"]["random"] == {"seed": 5} and m["cost"] == {"lm_calls": 0,
                                                                                              "lm_tokens": 0}


@pytest.fixture()
def dense_candidates(tmp_path, corpus_txt, sky_task, tiny_bert) -> Path:
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.index import IndexConfig, build_index
    from pgra.retrieval.retrieve import RetrieveConfig

    index = build_index(from_dict(IndexConfig, {"corpus": str(corpus_txt), "out": str(tmp_path / "dense"),
                                                "retriever": "dense", "show_progress": False,
                                                "dense": {"encoder": str(tiny_bert), "pooler": "mean"}}))
    return retrieve(RetrieveConfig(task=str(sky_task), index=str(index), out=str(tmp_path / "dcands"), k=8,
                                   show_progress=False))


def _naive_mmr(rel: list[float], vecs: np.ndarray, lam: float, d: int) -> tuple[list[int], list[float]]:
    unit = [v / np.linalg.norm(v) for v in vecs]
    picked, values = [], []
    while len(picked) < d:
        best, best_value = None, None
        for j in range(len(rel)):
            if j in picked:
                continue
            penalty = max((float(unit[j] @ unit[s]) for s in picked), default=0.0)
            value = lam * rel[j] - (1 - lam) * penalty
            if best_value is None or value > best_value:
                best, best_value = j, value
        picked.append(best)
        values.append(best_value)
    return picked, values


def test_mmr_matches_a_naive_greedy_loop(dense_candidates, tmp_path, tiny_bert):
    from pgra.retrieval.encoder import DenseEncoder

    out = rerank(_cfg(dense_candidates, tmp_path / "m", "mmr", k=6, top_d=3, mmr={"lambda_": 0.4}))
    encoder = DenseEncoder(str(tiny_bert), pooler="mean")
    for cand, rec in zip(_lines(dense_candidates / "test.jsonl"), _lines(out / "test.jsonl"), strict=True):
        cs = cand["ctxs"][:6]
        vecs = encoder.encode([c["text"] for c in cs])  # the first stage's vectors, embedded again
        picked, values = _naive_mmr([c["score"] for c in cs], vecs, 0.4, 3)
        assert [c["id"] for c in rec["ctxs"]] == [cs[j]["id"] for j in picked]
        numerics.assert_close([c["score"] for c in rec["ctxs"]], values, depth=numerics.TINY_MODEL, scale=1)
    first = rerank(_cfg(dense_candidates, tmp_path / "m1", "mmr", k=6, top_d=3, mmr={"lambda_": 1.0}))
    for cand, rec in zip(_lines(dense_candidates / "test.jsonl"), _lines(first / "test.jsonl"), strict=True):
        assert [c["id"] for c in rec["ctxs"]] == [c["id"] for c in cand["ctxs"][:3]]  # relevance alone


def test_mmr_refuses_a_lexical_first_stage(candidates, tmp_path):
    with pytest.raises(InputError) as e:
        rerank(_cfg(candidates, tmp_path / "m", "mmr", top_d=2))
    msg = str(e.value)  # what is wrong (that index stores no vectors) and what to do
    assert f"{tmp_path / 'bm25'} is a 'bm25' index, which stores none" in msg, msg
    assert "rerank candidates retrieved from a dense index" in msg and "choose another reranker" in msg, msg
    assert not (tmp_path / "m" / "manifest.json").exists()


def test_mmr_reads_a_sharded_flat_index_as_the_faiss_one(dense_candidates, tmp_path, corpus_txt, sky_task,
                                                         tiny_bert):
    """A flat index built with ``dense.bounded_memory`` keeps its vectors as shards (no index.faiss): MMR reads
    them there and keeps what it keeps over the same index built in memory (it said the dense index was not dense)."""
    from pgra.retrieval.candidates_stage import retrieve
    from pgra.retrieval.index import IndexConfig, build_index
    from pgra.retrieval.retrieve import RetrieveConfig

    index = build_index(from_dict(IndexConfig, {
        "corpus": str(corpus_txt), "out": str(tmp_path / "sharded"), "retriever": "dense", "show_progress": False,
        "dense": {"encoder": str(tiny_bert), "pooler": "mean", "bounded_memory": True, "shard_size": 7}}))
    assert not (index / "index.faiss").exists() and len(list((index / "vectors").iterdir())) > 1
    sharded = retrieve(RetrieveConfig(task=str(sky_task), index=str(index), out=str(tmp_path / "scands"), k=8,
                                      show_progress=False))
    got = rerank(_cfg(sharded, tmp_path / "ms", "mmr", k=6, top_d=3, mmr={"lambda_": 0.4}))
    want = rerank(_cfg(dense_candidates, tmp_path / "mf", "mmr", k=6, top_d=3, mmr={"lambda_": 0.4}))
    for split in ("train", "dev", "test"):
        a, b = _lines(got / f"{split}.jsonl"), _lines(want / f"{split}.jsonl")
        numerics.assert_same_rankings([r["ctxs"] for r in b], [r["ctxs"] for r in a], depth=numerics.TINY_MODEL)


def test_query_likelihood_is_upr_mean_log_likelihood(candidates, tmp_path, tiny_opt):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = rerank(_cfg(candidates, tmp_path / "u", "query_likelihood", lm=str(tiny_opt), k=4, top_d=4,
                      max_tokens_per_batch=300, max_batch_size=3, splits=["test"]))
    tok = AutoTokenizer.from_pretrained(str(tiny_opt))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_opt)).eval()
    template = "Passage: {evidence} Please write a sentence based on this passage."
    for cand, rec in zip(_lines(candidates / "test.jsonl"), _lines(out / "test.jsonl"), strict=True):
        want = {}
        for c in cand["ctxs"][:4]:  # one whole sequence per pair: mean log p of the input's tokens
            prompt = template.format(evidence=c["text"])
            n_prompt = len(tok(prompt)["input_ids"])
            ids = tok(prompt + " " + cand["text"])["input_ids"]
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
            target = range(n_prompt, len(ids))
            want[c["id"]] = float(np.mean([logp[t - 1, ids[t]].item() for t in target]))
        assert [c["id"] for c in rec["ctxs"]] == sorted(want, key=lambda i: -want[i])
        numerics.assert_close([c["score"] for c in rec["ctxs"]], [want[c["id"]] for c in rec["ctxs"]],
                              depth=numerics.TINY_MODEL, scale=1)
    m = json.loads((out / "manifest.json").read_text())  # one LM prompt per distinct candidate, not per pair
    distinct = {c["text"] for cand in _lines(candidates / "test.jsonl") for c in cand["ctxs"][:4]}
    assert m["cost"]["lm_calls"] == len(distinct) and m["cost"]["lm_tokens"] > 0


def test_query_likelihood_refuses_an_lm_whose_head_would_be_random(candidates, tmp_path):
    """A decoder-only checkpoint saved without its LM head (``LlamaModel``): its ``lm_head`` would be initialised
    at random at load (other scores on every run); refused at load, before anything is written."""
    from tests.matrix_r4_rerank import headless_lm_at

    lm = headless_lm_at(tmp_path / "headless")
    with pytest.raises(InputError) as e:
        rerank(_cfg(candidates, tmp_path / "u", "query_likelihood", lm=str(lm), k=4, top_d=2, splits=["test"]))
    msg = str(e.value)
    assert e.value.field == "lm" and f"'{lm}'" in msg and "lm_head.weight would be initialised at random" in msg, msg
    assert "a trained causal LM with its LM head" in msg, msg
    assert not (tmp_path / "u" / "test.jsonl").exists()


@pytest.mark.parametrize("reranker", ["query_likelihood", "prompt_guided"])
def test_an_encoder_as_the_rerankers_lm_is_refused_from_its_config(candidates, tmp_path, tiny_bert, reranker,
                                                                   monkeypatch):
    """A BERT given as the causal LM: refused from its config's architecture, before any weights load (the
    prompt-guided reranker crashed in the KV cache; UPR scored it through a randomly initialised LM head)."""
    import transformers

    def no_weights(*args, **kwargs):
        raise AssertionError("weights loaded")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", no_weights)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    with pytest.raises(InputError) as e:
        rerank(_cfg(candidates, tmp_path / "r", reranker, lm=str(tiny_bert), k=4, top_d=2, num_demos=1,
                    splits=["test"], cache_dir=str(tmp_path / "cache")))
    msg = str(e.value)
    assert e.value.field == "lm" and f"'{tiny_bert}' is a BertModel" in msg, msg
    assert "not a causal LM" in msg and "needs a causal (decoder-only) LM" in msg, msg
    assert not (tmp_path / "r" / "manifest.json").exists() and not (tmp_path / "cache").exists()


def _tiny_cross_encoder(tiny_bert: Path, out: Path, labels: int) -> Path:
    import shutil

    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(labels)
    config = BertConfig.from_pretrained(str(tiny_bert), num_labels=labels)
    BertForSequenceClassification(config).save_pretrained(str(out))
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_bert / name).exists():
            shutil.copy(tiny_bert / name, out / name)
    return out


@pytest.mark.parametrize("labels", [1, 2])
def test_cross_encoder_follows_the_sentence_transformers_conventions(candidates, tmp_path, tiny_bert, labels):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model_dir = _tiny_cross_encoder(tiny_bert, tmp_path / "ce", labels)
    out = rerank(_cfg(candidates, tmp_path / "c", "cross_encoder", k=5, top_d=2, splits=["test"],
                      cross_encoder={"model": str(model_dir), "max_length": 32, "batch_size": 3}))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    for cand, rec in zip(_lines(candidates / "test.jsonl"), _lines(out / "test.jsonl"), strict=True):
        want = {}
        for c in cand["ctxs"][:5]:  # one pair at a time, no padding
            enc = tok(cand["text"], c["text"], truncation=True, max_length=32, return_tensors="pt")
            with torch.no_grad():
                z = model(**enc).logits[0]
            want[c["id"]] = float(torch.sigmoid(z[0]) if labels == 1 else torch.softmax(z, -1)[-1])
        order = sorted(want, key=lambda i: -want[i])[:2]
        assert [c["id"] for c in rec["ctxs"]] == order
        numerics.assert_close([c["score"] for c in rec["ctxs"]], [want[i] for i in order], depth=numerics.TINY_MODEL, scale=1)


@pytest.mark.parametrize("kind", ["encoder", "causal LM"])
def test_cross_encoder_refuses_a_model_whose_head_would_be_random(candidates, tmp_path, tiny_bert, tiny_opt, kind):
    """A folder without a trained classification head (MiniLM, SmolLM2) is refused at load, naming the model, the
    field and the kind of model needed, never scored with a head initialised at random (other scores every run)."""
    model = tiny_bert if kind == "encoder" else tiny_opt
    head = "classifier.bias, classifier.weight" if kind == "encoder" else "score.weight"
    with pytest.raises(InputError) as e:
        rerank(_cfg(candidates, tmp_path / "c", "cross_encoder", k=4, top_d=2, splits=["test"],
                    cross_encoder={"model": str(model)}))
    msg = str(e.value)
    assert e.value.field == "rerank.cross_encoder.model" and f"'{model}'" in msg, msg
    assert f"{head} would be initialised at random" in msg and "sequence-classification model trained" in msg, msg
    assert not (tmp_path / "c" / "manifest.json").exists()


@pytest.mark.parametrize(("labels", "label", "ok"), [(2, 1, True), (2, -2, True), (2, 2, False), (2, -3, False),
                                                      (1, 0, True), (1, 1, False)])
def test_cross_encoder_label_must_be_one_of_the_models_labels(candidates, tmp_path, tiny_bert, labels, label, ok):
    model_dir = _tiny_cross_encoder(tiny_bert, tmp_path / "ce", labels)
    cfg = _cfg(candidates, tmp_path / "c", "cross_encoder", k=4, top_d=2, splits=["test"],
               cross_encoder={"model": str(model_dir), "label": label})
    if ok:
        assert (rerank(cfg) / "test.jsonl").exists()
        return
    with pytest.raises(InputError) as e:  # (was an IndexError from numpy while scoring)
        rerank(cfg)
    assert e.value.field == "rerank.cross_encoder.label", str(e.value)
    assert f"must lie in {-labels} .. {labels - 1}" in str(e.value) and f"got {label}" in str(e.value)
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_cross_encoder_needs_a_local_folder(candidates, tmp_path, capsys):
    from tests.conftest import one_error_line

    line = one_error_line(["rerank", "--candidates", str(candidates), "--out", str(tmp_path / "c"), "--reranker",
                           "cross_encoder", "cross_encoder.model=some-org/some-hub-model"], capsys)
    assert "rerank.cross_encoder.model" in line and "local model folder" in line


def test_defaults_stay_out_of_keys_and_records():
    cfg = RerankConfig()
    assert "reranker" not in to_dict(cfg) and not any(name in to_dict(cfg) for name in RERANKERS)
    mmr = from_dict(RerankConfig, {"reranker": "mmr", "mmr": {"lambda_": 0.3}})
    assert to_dict(mmr)["reranker"] == "mmr" and to_dict(mmr)["mmr"] == {"lambda_": 0.3}
    assert from_dict(RerankConfig, to_dict(mmr)) == mmr
    with pytest.raises(InputError, match="reranker"):
        from_dict(RerankConfig, {"reranker": "nope"})


class ReverseFirstStage(Reranker):
    """A toy plug-in (registered by the tests, outside ``pgra/``): the first stage's order, reversed."""

    name = "toy_reverse"

    def scores(self, queries, candidates):
        return [np.arange(len(cs), dtype=float) for cs in candidates]


@pytest.fixture()
def toy_reranker():
    from pgra.methods import METHODS, RUN_KINDS, register_method
    from pgra.methods.reader_method import ReaderMethod

    RERANKERS.register(ReverseFirstStage)

    class FiDToy(ReaderMethod):
        name = "fid_toy"
        data = "reranked-toy_reverse"  # the one stage it reads: the toy reranker's top d

    register_method(FiDToy)
    yield
    RERANKERS.pop("toy_reverse")
    METHODS.pop("fid_toy")
    assert "fid_toy" not in RUN_KINDS


def test_a_plug_in_reranker_runs_through_pgra_rerank(candidates, tmp_path, toy_reranker, capsys):
    out = tmp_path / "toy"
    assert main(["rerank", "--candidates", str(candidates), "--out", str(out), "--reranker", "toy_reverse",
                 "-k", "5", "--top-d", "2"]) == 0
    assert "toy_reverse, top-2 of 5" in capsys.readouterr().out
    for cand, rec in zip(_lines(candidates / "test.jsonl"), _lines(out / "test.jsonl"), strict=True):
        assert [c["id"] for c in rec["ctxs"]] == [cand["ctxs"][4]["id"], cand["ctxs"][3]["id"]]
        assert [c["retrieval_rank"] for c in rec["ctxs"]] == [5, 4]


def test_a_grid_with_several_rerankers(tmp_path, corpus_txt, sky_task, tiny_opt, tiny_t5, toy_reranker):
    """pgra, fid_random and the plug-in's fid_toy in one grid: a reranked folder and key each, the candidates
    shared, the prompt-guided key untouched by the others' options, and the per-reranker comparison."""
    import yaml

    from pgra.analysis.config import analyze_config
    from pgra.experiment import Experiment

    grid = {
        "out": str(tmp_path / "exp"), "tasks": [str(sky_task)], "seeds": [1],
        "methods": ["no_retrieval", "fid", "pgra", "fid_random", "fid_toy"],
        "index": {"corpus": str(corpus_txt), "out": str(tmp_path / "index"), "retriever": "bm25"},
        "retrieve": {"k": 8},
        "rerank": {"lm": str(tiny_opt), "top_d": 3, "num_demos": 2, "cache_dir": str(tmp_path / "cache"),
                   "max_tokens_per_batch": 700},
        "reader": {"model": str(tiny_t5), "n_passages": 3, "max_length": 48, "batch_size": 4, "max_steps": 2,
                   "eval_every": 2, "eval_batch_size": 8, "learning_rate": 1e-3},
        "analysis": {"analyses": ["consistency", "differences", "cost"]}, "show_progress": False, "report": False,
    }
    exp = Experiment(from_dict(analyze_config(), grid))
    assert exp.stages_needed() == ["candidates", "reranked", "reranked-random", "reranked-toy_reverse"]
    keys = exp.stage_keys(str(sky_task))
    assert len({keys[s] for s in exp.stages_needed()}) == 4
    assert exp.run() == []
    task_dir = tmp_path / "exp" / "sky"
    for stage in ("reranked-random", "reranked-toy_reverse"):
        m = json.loads((task_dir / stage / "manifest.json").read_text())
        assert m["candidates"]["path"] == str((task_dir / "candidates").resolve())
    toy = _lines(task_dir / "reranked-toy_reverse" / "test.jsonl")
    assert all([c["retrieval_rank"] for c in r["ctxs"]] == [8, 7, 6] for r in toy)
    cell = json.loads((task_dir / "fid_toy" / "seed-1" / "cell.json").read_text())
    assert cell["data"]["folder"] == str((task_dir / "reranked-toy_reverse").resolve())
    # another reranker's options change its own stage's key, never the prompt-guided one's
    keys = exp.stage_keys(str(sky_task))  # (the index is built now: its key is in every stage's)
    other = Experiment(from_dict(analyze_config(), {**grid, "rerank": {**grid["rerank"], "random": {"seed": 9}}}))
    keys2 = other.stage_keys(str(sky_task))
    assert keys2["reranked"] == keys["reranked"] and keys2["reranked-random"] != keys["reranked-random"]
    assert keys2["reranked-toy_reverse"] == keys["reranked-toy_reverse"]
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(grid))
    assert main(["analyze", "--config", str(path)]) == 0
    analysis = json.loads((tmp_path / "exp" / "analysis" / "analysis.json").read_text())
    compared = {r["reranker"]: r for r in analysis["tables"]["rerankers"]}
    assert set(compared) == {"first stage", "prompt_guided", "random", "toy_reverse"}
    assert compared["first stage"]["overlap"] == 1.0
    # the toy keeps first-stage ranks 8, 7, 6: none of the first stage's top 3
    assert compared["toy_reverse"]["overlap"] == 0.0 and compared["toy_reverse"]["promoted"] == 1.0
    pseudo = json.loads((tmp_path / "exp" / "analysis" / "sky" / "pseudo_labels.json").read_text())["labels"]
    for reranker, folder in (("random", "reranked-random"), ("toy_reverse", "reranked-toy_reverse")):
        recs = _lines(task_dir / folder / "test.jsonl")  # label consistency counted by hand from the stage's folder
        pairs = [(pseudo[str(c["id"])], r["label"]) for r in recs for c in r["ctxs"][:3]]
        assert compared[reranker]["evidence"] == len(pairs) == 3 * len(recs)
        assert compared[reranker]["consistent"] == sum(a == b for a, b in pairs)
    md = (tmp_path / "exp" / "analysis" / "analysis.md").read_text()
    assert "## Rerankers compared" in md and "fid_toy" in md
    cost = {r["method"]: r for r in analysis["tables"]["cost"]}  # each reader counts the stage it read
    assert cost["fid_random"]["stages"] == ["candidates", "reranked-random"]
    assert cost["pgra"]["stages"] == ["candidates", "reranked"]


def test_prompt_guided_through_the_interface_scores_as_the_stage_does(tiny_opt):
    """The registered prompt-guided reranker (in memory, given demonstrations) keeps what the in-memory reranker
    the stage and Pipeline use keeps, with the same probabilities."""
    from pgra.rerank.prompt_guided.in_memory import PromptGuidedReranker as StageReranker
    from pgra.rerank.prompt_guided.reranker import PromptGuided
    from pgra.tasks import Example
    from tests.conftest import SENTENCES, TASK

    cfg = from_dict(RerankConfig, {"lm": str(tiny_opt), "top_d": 2, "max_tokens_per_batch": 700})
    demos = [Example("d1", SENTENCES[0], TASK.labels[0]), Example("d2", SENTENCES[1], TASK.labels[1])]
    queries = [SENTENCES[2], SENTENCES[5]]
    cands = [[{"id": j, "text": SENTENCES[j], "score": 1.0 - j / 10} for j in range(3, 7)] for _ in queries]
    got = PromptGuided(cfg, TASK, demos=demos).rerank(queries, cands)
    want = StageReranker.from_config(cfg, TASK, demos).rerank(queries, cands)
    numerics.assert_same_rankings(got, want, depth=numerics.TINY_MODEL)


def test_a_killed_generic_stage_resumes_split_by_split(candidates, tmp_path, monkeypatch):
    """The splits a killed stage finished are kept (not scored again) when it reruns with the same key; the rest
    are scored, and the result equals an uninterrupted run's. Another key scores every split again."""
    cls = RERANKERS["random"]
    scored: list[int] = []
    original = cls.scores
    monkeypatch.setattr(cls, "scores", lambda self, q, c: scored.append(len(q)) or original(self, q, c))
    cfg = _cfg(candidates, tmp_path / "r", "random", k=6, top_d=3, splits=["train", "dev", "test"])
    out = rerank(cfg)
    full = {p.name: p.read_bytes() for p in out.glob("*.jsonl")}
    manifest = json.loads((out / "manifest.json").read_text())
    sizes = {s: len(_lines(candidates / f"{s}.jsonl")) for s in ("train", "dev", "test")}
    assert scored == [sizes["train"], sizes["dev"], sizes["test"]]
    (out / "manifest.json").unlink()  # killed while scoring test: train and dev were written and recorded
    (out / "test.jsonl").unlink()
    scored.clear()
    rerank(cfg)
    assert scored == [sizes["test"]]
    assert {p.name: p.read_bytes() for p in out.glob("*.jsonl")} == full
    assert json.loads((out / "manifest.json").read_text())["counts"] == manifest["counts"]
    (out / "dev.jsonl").write_text((out / "dev.jsonl").read_text().replace('"score"', '"score" ', 1))
    scored.clear()
    rerank(cfg)  # a recorded split whose file changed since is scored again
    assert scored == [sizes["dev"]] and (out / "dev.jsonl").read_bytes() == full["dev.jsonl"]
    done = json.loads((out / ".splits_done.json").read_text())  # a record edited by hand: that split rescored
    done["splits"]["train"] = {"file": "x"}
    done["splits"]["dev"]["count"] = "many"
    (out / ".splits_done.json").write_text(json.dumps(done))
    scored.clear()
    rerank(cfg)
    assert scored == [sizes["train"], sizes["dev"]]
    (out / ".splits_done.json").write_text("[1, 2]")
    scored.clear()
    rerank(cfg)
    assert scored == [sizes["train"], sizes["dev"], sizes["test"]]
    scored.clear()
    rerank(_cfg(candidates, tmp_path / "r", "random", k=6, top_d=3, splits=["train", "dev", "test"],
                random={"seed": 1}))
    assert scored == [sizes["train"], sizes["dev"], sizes["test"]]


def test_every_stage_that_loads_a_model_names_it_by_its_field():
    """The grid checks (before any stage runs) and the dry run sizes the model of every stage a method reads, as
    the stage's reranker names it: the cross-encoder too (local folders only), and UPR's LM."""
    from pgra.cli.experiment import models_needed
    from pgra.experiment.config import ExperimentConfig
    from pgra.stages import get_stage

    rerank = from_dict(RerankConfig, {"lm": "org/lm", "trust_remote_code": True, "cross_encoder": {"model": "/ce"}})
    needs = {stage: [(n.field, n.name, n.trust_remote_code, n.local_only) for n in get_stage(stage).models(rerank)]
             for stage in ("reranked", "reranked-query_likelihood", "reranked-cross_encoder", "full_search",
                           "reranked-mmr", "reranked-random", "candidates")}
    lm = [("rerank.lm", "org/lm", True, False)]
    assert needs == {"reranked": lm, "reranked-query_likelihood": lm, "full_search": lm,
                     "reranked-cross_encoder": [("rerank.cross_encoder.model", "/ce", False, True)],
                     "reranked-mmr": [], "reranked-random": [], "candidates": []}
    cfg = from_dict(ExperimentConfig, {"tasks": ["mr"], "methods": ["fid_cross_encoder", "fid_upr"],
                                       "index": {"retriever": "bm25"}, "rerank": {"lm": "org/lm",
                                       "cross_encoder": {"model": "/ce"}}, "reader": {"model": "t5-small"}})
    assert {(n.field, n.name) for n in models_needed(cfg)} == {
        ("rerank.cross_encoder.model", "/ce"), ("rerank.lm", "org/lm"), ("reader.model", "t5-small")}


def test_a_plug_in_of_the_old_interface_is_refused_or_still_checked():
    """A method that still sets ``reranker`` (``data`` names the stage now) is refused by name instead of reading
    the prompt-guided folder unseen; a reranker that runs the LM without a ``model_field`` still has ``rerank.lm``
    checked; a method whose stage is not installed reads no reranker (the grid's reranker check does not fail)."""
    from pgra.core.errors import InputError
    from pgra.methods import register_method
    from pgra.methods.reader_method import ReaderMethod
    from pgra.rerank.base import Reranker

    class Old(ReaderMethod):
        name = "fid_old_style"
        data = "reranked"
        reranker = "mmr"

    with pytest.raises(InputError, match="reranked-<reranker>"):
        register_method(Old)

    class UsesLM(Reranker):
        name = "toy_uses_lm"
        uses = ("k", "top_d", "splits", "lm")

        def scores(self, queries, candidates):
            return []

    rerank = from_dict(RerankConfig, {"lm": "org/lm"})
    assert [(n.field, n.name) for n in UsesLM.models(rerank)] == [("rerank.lm", "org/lm")]

    class Elsewhere(ReaderMethod):
        name = "fid_elsewhere"
        data = "no_such_stage"

    assert Elsewhere.reads_reranker() is None
