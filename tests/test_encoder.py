import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from pgra.core.errors import InputError
from pgra.retrieval.encoder import DenseEncoder
from tests import numerics
from tests.conftest import SENTENCES


def _reference(path, texts, pooler):
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModel.from_pretrained(str(path)).eval()
    outs = []
    with torch.no_grad():
        for t in texts:  # one at a time: no padding at all
            enc = tok(t, return_tensors="pt")
            o = model(**enc)
            v = {"cls": o.pooler_output, "cls_before_pooler": o.last_hidden_state[:, 0],
                 "mean": o.last_hidden_state.mean(1)}[pooler]
            outs.append(torch.nn.functional.normalize(v, dim=-1)[0].numpy())
    return np.stack(outs)


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "mean"])
def test_poolers_match_unbatched_reference(tiny_bert, pooler):
    enc = DenseEncoder(str(tiny_bert), pooler=pooler, batch_size=5, dtype="fp32")
    got = enc.encode(SENTENCES)
    numerics.assert_close(got, _reference(tiny_bert, SENTENCES, pooler), depth=numerics.TINY_MODEL)
    numerics.assert_close(np.linalg.norm(got, axis=1), np.ones(len(got)), depth=32)  # unit rows


def test_batch_size_and_order_invariance(tiny_bert):
    enc = DenseEncoder(str(tiny_bert), pooler="cls")
    a = enc.encode(SENTENCES, batch_size=1)
    b = enc.encode(SENTENCES, batch_size=7)
    c = enc.encode(SENTENCES[::-1], batch_size=3)[::-1]
    numerics.assert_close(a, b, depth=numerics.TINY_MODEL)
    numerics.assert_close(a, c, depth=numerics.TINY_MODEL)
    assert enc.encode([]).shape == (0, enc.dim)


def test_cls_pooler_refuses_model_without_pooler_weights(tiny_bert_no_pooler):
    with pytest.raises(InputError, match="no pretrained pooler"):
        DenseEncoder(str(tiny_bert_no_pooler), pooler="cls")
    DenseEncoder(str(tiny_bert_no_pooler), pooler="cls_before_pooler")  # fine


def test_unknown_pooler(tiny_bert):
    with pytest.raises(InputError, match="unknown pooler"):
        DenseEncoder(str(tiny_bert), pooler="max")


def test_encode_ids_and_an_in_memory_model_encode_like_encode(tiny_bert):
    """``encode_ids`` (what ``encode`` runs after tokenizing) and ``DenseEncoder.from_model`` (a loaded model, no
    tokenizer: the GPU benchmark's path) give ``encode``'s vectors, in input order, for odd batch sizes."""
    texts = ["a b c", "the planet orbits the sun", "x", "a river runs through the old town", "b"] * 3
    enc = DenseEncoder(str(tiny_bert), pooler="mean", max_length=16, batch_size=4)
    ref = enc.encode(texts)
    ids = enc.tokenizer(texts, truncation=True, max_length=16)["input_ids"]
    for bs in (1, 3, 7, 100):
        for kept in (None, 1, 5, 8, 1000):  # rows held before one copy back (a GPU's path; None: CPU's every batch)
            enc.rows_on_device = kept
            numerics.assert_close(enc.encode_ids(ids, enc.tokenizer.pad_token_id, batch_size=bs), ref, depth=numerics.TINY_MODEL)
    enc.rows_on_device = None
    loaded = DenseEncoder.from_model(enc.model, pooler="mean", batch_size=5)
    assert loaded.dim == enc.dim and loaded.tokenizer is None
    numerics.assert_close(loaded.encode_ids(ids, enc.tokenizer.pad_token_id), ref, depth=numerics.TINY_MODEL)
    assert enc.encode_ids([]).shape == (0, enc.dim) and enc.encode([]).shape == (0, enc.dim)


def test_an_encoder_without_a_tokenizer_says_to_encode_ids(tiny_bert):
    enc = DenseEncoder(str(tiny_bert), pooler="mean", max_length=16)
    loaded = DenseEncoder.from_model(enc.model, pooler="mean")
    with pytest.raises(InputError, match="without a tokenizer.*encode_ids"):
        loaded.encode(["a b c"])
