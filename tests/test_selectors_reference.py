"""Each demonstration strategy against a naive implementation of its paper's definition, on a hand-sized pool.

OpenICL's own retrievers are not the reference: openicl 0.1.8 pins transformers==4.28.1 and tokenizers==0.13.3
and needs nltk, openai, evaluate and faiss-gpu; installed beside pgra's dependencies without them
(``pip install openicl --no-deps``) its package fails to import (``No module named 'nltk'``), and with them it
would replace pgra's transformers (docs/selectors.md)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from pgra.selection import SelectorSettings, get_selector
from pgra.tasks import Example, get_task

TASK = get_task("sst2")
TEXTS = ["a fine film with a fine cast", "dull and slow", "the sun shines on the film", "rain all day long",
         "lovely music and a lovely film", "bad acting , bad plot", "great plot", "slow music", "a film",
         "the cast was great", "rain rain rain", "fine music"]
TRAIN = [Example(f"t{i}", t, "01"[i % 2]) for i, t in enumerate(TEXTS)]
QUERIES = [Example("q0", "a lovely film"), Example("q1", "rain and bad music"), Example("q2", "dull and slow"),
           Example("q3", "great fine cast")]
DIM = 6
VECTORS = {t: np.random.default_rng(zlib.crc32(t.encode())).normal(size=DIM) for t in TEXTS + [q.text for q in QUERIES]}


class FakeEncoder:
    """Stands in for CachedEncoder: fixed random vectors per text."""

    def __init__(self, settings, device=None, show_progress=False, loaded=None):
        self.encoder = type("E", (), {"fingerprint": "fake"})()

    def encode(self, texts, cache=True):
        return np.stack([VECTORS[t] for t in texts])


@pytest.fixture()
def fake_encoder(monkeypatch):
    import pgra.selection.encoded as encoded

    monkeypatch.setattr(encoded, "CachedEncoder", FakeEncoder)


def _unit(v):
    return np.asarray(v, np.float64) / np.linalg.norm(v)


def _cos(a, b):
    return float(_unit(a) @ _unit(b))


def _allowed(q):
    return [i for i, ex in enumerate(TRAIN) if ex.text.strip() != q.text.strip()]


def test_bm25_is_rank_bm25_okapi_top_m():
    from rank_bm25 import BM25Okapi

    bm = BM25Okapi([t.split(" ") for t in TEXTS])
    got = get_selector("bm25", 3).fit(TASK, TRAIN).select(QUERIES)
    for q, row in zip(QUERIES, got, strict=True):
        scores = bm.get_scores(q.text.split(" "))
        ranked = sorted(_allowed(q), key=lambda i: (-scores[i], i))[:3]
        assert row == ranked[::-1]  # the best next to the query
    assert 1 not in got[2]  # never the query itself (q2 is the text of training input 1)
    rev = get_selector("bm25", 3, settings=SelectorSettings(reverse=True)).fit(TASK, TRAIN).select(QUERIES)
    assert rev == [r[::-1] for r in got]
