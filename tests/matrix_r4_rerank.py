"""Bad-input matrix cases of reliability round 4 (issue 53), rerank surfaces: (name, argv builder, expected text of the
one `error:` line), appended to tests/test_bad_input_matrix.py's CASES. Builders write under ``w["tmp"]`` only."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def tiny_bert_at(path: Path) -> Path:
    """A tiny random BERT encoder (``BertModel``: no classification head, no LM head) saved at ``path``."""
    from tests.conftest import _write_tiny_bert

    return path if path.exists() else _write_tiny_bert(path)


def sequence_classifier_at(path: Path, bert: Path, labels: int) -> Path:
    """A tiny ``BertForSequenceClassification`` with ``labels`` labels (every weight saved) at ``path``."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    if path.exists():
        return path
    torch.manual_seed(labels)
    BertForSequenceClassification(BertConfig.from_pretrained(str(bert), num_labels=labels)).save_pretrained(str(path))
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if (bert / name).exists():
            shutil.copy(bert / name, path / name)
    return path


def causal_lm_at(path: Path) -> Path:
    """A tiny random Llama causal LM (with its own ``lm_head``) saved at ``path``."""
    from tests.conftest import _write_tiny_causal_lm

    return path if path.exists() else _write_tiny_causal_lm(path, "llama")


def headless_lm_at(path: Path) -> Path:
    """A tiny Llama saved without its LM head (``LlamaModel``, untied embeddings): a decoder-only checkpoint whose
    ``lm_head`` a causal-LM load would initialise at random."""
    from transformers import AutoModelForCausalLM

    if (path / "config.json").exists() and "LlamaModel" in (path / "config.json").read_text():
        return path
    causal_lm_at(path)
    model = AutoModelForCausalLM.from_pretrained(str(path))
    assert not model.config.tie_word_embeddings
    for name in ("model.safetensors", "config.json"):
        (path / name).unlink()
    model.model.save_pretrained(str(path))
    return path


def _rerank(w: dict, *extra: str) -> list[str]:
    return ["rerank", "--candidates", str(w["cands"]), "--out", str(w["tmp"] / "o"), "-k", "4", "--top-d", "2",
            "--splits", "test", *extra]


def _bert(w: dict) -> Path:
    return tiny_bert_at(w["tmp"] / "r4r-bert")


CASES: list[tuple[str, Callable[[dict], list[str]], Any]] = [
    # 1. a cross-encoder without a trained classification head (an encoder, a causal LM): refused, not random scores
    ("rerank cross_encoder: an encoder without a classification head",
     lambda w: _rerank(w, "--reranker", "cross_encoder", f"cross_encoder.model={_bert(w)}"),
     lambda w: f"field 'rerank.cross_encoder.model': the cross-encoder '{w['tmp'] / 'r4r-bert'}' lacks weights"),
    ("rerank cross_encoder: a causal LM as the cross-encoder",
     lambda w: _rerank(w, "--reranker", "cross_encoder",
                       f"cross_encoder.model={causal_lm_at(w['tmp'] / 'r4r-llama')}"),
     "score.weight would be initialised at random"),
    # 1. UPR on an LM whose head its checkpoint lacks
    ("rerank query_likelihood: an LM without its LM head",
     lambda w: _rerank(w, "--reranker", "query_likelihood", "--lm", str(headless_lm_at(w["tmp"] / "r4r-headless"))),
     "field 'lm': the causal LM"),
    # 2. a label beyond the model's labels
    ("rerank cross_encoder.label=2 of 2 labels",
     lambda w: _rerank(w, "--reranker", "cross_encoder",
                       f"cross_encoder.model={sequence_classifier_at(w['tmp'] / 'r4r-ce2', _bert(w), 2)}",
                       "cross_encoder.label=2"),
     "field 'rerank.cross_encoder.label': the cross-encoder"),
    ("rerank cross_encoder.label=-3 of 2 labels",
     lambda w: _rerank(w, "--reranker", "cross_encoder",
                       f"cross_encoder.model={sequence_classifier_at(w['tmp'] / 'r4r-ce2', _bert(w), 2)}",
                       "cross_encoder.label=-3"),
     "must lie in -2 .. 1"),
    # 3. an encoder given as a causal LM: refused from its config, before any weights load
    ("rerank: an encoder as the prompt-guided LM",
     lambda w: _rerank(w, "--lm", str(_bert(w)), "--num-demos", "1", "--cache-dir", str(w["tmp"] / "o" / "cache")),
     lambda w: f"field 'lm': '{w['tmp'] / 'r4r-bert'}' is a BertModel (model type 'bert', an encoder), not a causal LM"),
    ("rerank query_likelihood: an encoder as the LM",
     lambda w: _rerank(w, "--reranker", "query_likelihood", "--lm", str(_bert(w))),
     "not a causal LM; this field needs a causal (decoder-only) LM"),
    ("icl: an encoder as the LM",
     lambda w: ["icl", "--data", str(w["cands"]), "--out", str(w["tmp"] / "o"), "--lm", str(_bert(w)),
                "--selection", "random", "--num-demos", "1"],
     "(model type 'bert', an encoder), not a causal LM"),
    # 4. MMR over an index that stores no vectors: what is wrong and what to do
    ("rerank mmr over a BM25 index",
     lambda w: _rerank(w, "--reranker", "mmr"),
     "is a 'bm25' index, which stores none; rerank candidates retrieved from a dense index"),
]
