import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from pgra.retrieval.bm25 import BM25Config, BM25Index, topk_positions
from tests import numerics


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
        numerics.assert_close(row, expected, dtype="float64", depth=64)


def test_okapi_negative_idf_floor():
    # 'common' appears in every document: rank_bm25 floors its negative idf at epsilon * mean idf
    docs = ["common a", "common b", "common c", "common d", "common a b"]
    ours = BM25Index.build(docs, BM25Config(), show_progress=False)
    ref = BM25Okapi([d.split(" ") for d in docs])
    numerics.assert_close(ours.scores(["common"])[0], ref.get_scores(["common"]), dtype="float64", depth=64)


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
def test_bm25s_methods_match_bm25s(method):
    import bm25s

    from pgra.retrieval.bm25 import tokenize

    docs = [d.replace("w", "word") for d in _random_corpus(120, seed=1)]
    ours = BM25Index.build(docs, BM25Config(method=method), show_progress=False)
    ref = bm25s.BM25(method=method)
    ref.index([tokenize(d, "word_lower") for d in docs], show_progress=False)
    for q in docs[:5]:
        numerics.assert_close(ours.scores([q])[0], ref.get_scores(tokenize(q, "word_lower")), depth=64)


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


def _zipf_corpus(n, seed, vocab_size=400):
    """Sentences whose words follow a Zipf law (a few very common words, many rare ones), like real text."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab_size + 1)
    p /= p.sum()
    words = np.array([f"t{i}" for i in range(vocab_size)])
    return [" ".join(rng.choice(words, size=rng.integers(1, 30), p=p)) for _ in range(n)]


@pytest.mark.parametrize("method", ["okapi", "lucene", "bm25+"])
@pytest.mark.parametrize("k", [1, 7, 150, 899, 2000])
def test_compiled_search_equals_brute_force_top_k(method, k):
    # the compiled kernel returns exactly the top k of the full score matrix: same ids, same scores bit for bit,
    # same order (score, then position), for rare-word, common-word, repeated-word, unknown-word and empty
    # queries (ties at 0 filled by position), in odd batch sizes, k up to past the corpus
    pytest.importorskip("numba")
    docs = _zipf_corpus(899, seed=3)
    idx = BM25Index.build(docs, BM25Config(method=method, query_batch_size=5), show_progress=False)
    rng = np.random.default_rng(4)
    queries = docs[:40] + ["t0 t1 t2", "t399 t398", "t0 t0 t0 t377", "unknown words only", "t5", "", "t1 t1"]
    queries += [" ".join(rng.choice([f"t{i}" for i in range(400)], size=12)) for _ in range(20)]
    scores, ids = idx.search(queries, k, compiled=True)
    slow_scores, slow_ids = idx.search(queries, k, compiled=False)
    assert np.array_equal(ids, slow_ids) and np.array_equal(scores, slow_scores)
    full = idx.scores(queries)
    for row, got_ids, got_scores in zip(full, ids, scores, strict=True):
        expected = topk_positions(row, min(k, len(docs)))
        assert got_ids.tolist() == expected.tolist()
        assert np.array_equal(got_scores, row[expected])


def test_compiled_search_on_a_loaded_memory_mapped_index(tmp_path):
    pytest.importorskip("numba")
    docs = _zipf_corpus(300, seed=6)
    BM25Index.build(docs, BM25Config(), show_progress=False).save(tmp_path / "bm25")
    idx = BM25Index.load(tmp_path / "bm25")
    got = idx.search(docs[:9], 11, compiled=True)
    want = idx.search(docs[:9], 11, compiled=False)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_search_for_no_documents_returns_empty_rows():
    # k=0 (or a request on an empty batch) must not reach the compiled heap, which reads its first slot
    idx = BM25Index.build(_zipf_corpus(50, seed=7), BM25Config(), show_progress=False)
    scores, ids = idx.search(["t0 t1", "t2"], 0)
    assert scores.shape == ids.shape == (2, 0)
    assert idx.search([], 5)[0].shape == (0, 5)


def test_compiled_search_leaves_torch_s_thread_count_alone():
    # numba's OpenMP layer sets the process's OpenMP threads to every core when a parallel region starts, which
    # torch reads: a search between two torch computations changed the second's thread count (and its floats'
    # last digits: a grid cell run after the retrieve stage differed from the same cell in a fresh process)
    numba = pytest.importorskip("numba")
    torch = pytest.importorskip("torch")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one core: numba has no other thread count to leak")
    docs = _zipf_corpus(200, seed=8)
    idx = BM25Index.build(docs, BM25Config(query_batch_size=7), show_progress=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        got = idx.search(docs[:20], 5, compiled=True)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    want = idx.search(docs[:20], 5, compiled=False)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
