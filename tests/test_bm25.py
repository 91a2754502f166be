import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from pgra.retrieval.bm25 import BM25Config, BM25Index, topk_positions


def _random_corpus(n=300, seed=0):
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(60)] + ["The", "the", "a", "A", "x,"]
    docs = []
    for _ in range(n):
        words = rng.choice(vocab, size=rng.integers(1, 25), p=None)
        text = " ".join(words)
        if rng.random() < 0.1:
            text = text.replace(" ", "  ", 1)  # double spaces give empty tokens, as in the paper's split(" ")
        docs.append(text)
    return docs


def test_okapi_scores_equal_rank_bm25():
    docs = _random_corpus()
    ours = BM25Index.build(docs, BM25Config(method="okapi"), show_progress=False)
    ref = BM25Okapi([d.split(" ") for d in docs])
    queries = docs[:15] + ["w1 w1 w2 unknownword", "The the", "nothing-matches-here", "x, A"]
    got = ours.scores(queries)
    for q, row in zip(queries, got, strict=True):
        expected = ref.get_scores(q.split(" "))
        np.testing.assert_allclose(row, expected, rtol=1e-9, atol=1e-12)


def test_okapi_negative_idf_floor():
    # 'common' appears in every document: rank_bm25 floors its negative idf at epsilon * mean idf
    docs = ["common a", "common b", "common c", "common d", "common a b"]
    ours = BM25Index.build(docs, BM25Config(), show_progress=False)
    ref = BM25Okapi([d.split(" ") for d in docs])
    np.testing.assert_allclose(ours.scores(["common"])[0], ref.get_scores(["common"]), rtol=1e-12)


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_bm25s_methods_match_bm25s(method):
    import bm25s

    from pgra.retrieval.bm25 import tokenize

    docs = [d.replace("w", "word") for d in _random_corpus(120, seed=1)]
    ours = BM25Index.build(docs, BM25Config(method=method), show_progress=False)
    ref = bm25s.BM25(method=method)
    ref.index([tokenize(d, "word_lower") for d in docs], show_progress=False)
    for q in docs[:5]:
        np.testing.assert_allclose(ours.scores([q])[0], ref.get_scores(tokenize(q, "word_lower")), rtol=1e-5)


def test_topk_tie_break_and_order():
    scores = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 0.5])
    assert topk_positions(scores, 2).tolist() == [1, 2]
    assert topk_positions(scores, 4).tolist() == [1, 2, 4, 3]
    assert topk_positions(scores, 10).tolist() == [1, 2, 4, 3, 0, 5]


def test_search_and_save_load(tmp_path):
    docs = _random_corpus(50)
    idx = BM25Index.build(docs, BM25Config(), show_progress=False)
    s1, p1 = idx.search(docs[:3], 5)
    idx.save(tmp_path / "bm25")
    s2, p2 = BM25Index.load(tmp_path / "bm25").search(docs[:3], 5)
    assert (p1 == p2).all() and np.array_equal(s1, s2)
    full = idx.scores(docs[:3])
    for row, ids, sc in zip(full, p1, s1, strict=True):
        assert ids.tolist() == topk_positions(row, 5).tolist() and np.array_equal(sc, row[ids])
        assert (np.diff(sc) <= 0).all()
