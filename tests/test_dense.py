import numpy as np
import pytest

from pgra.cli import main
from pgra.core.errors import IncompleteArtifactError
from pgra.retrieval.dense import FaissParams, build_faiss, load_faiss, save_faiss, search_faiss
from tests import numerics


def _unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_flat_equals_numpy_bruteforce():
    base, queries = _unit(2000, 32, 0), _unit(50, 32, 1)
    scores, ids = search_faiss(build_faiss(base, "flat"), queries, 20)
    ref = np.argsort(-(queries @ base.T), axis=1, kind="stable")[:, :20]
    for row in range(len(ids)):  # faiss's SIMD sums against numpy's: ids may swap at ties only
        numerics.assert_same_ranking(ids[row], scores[row], ref[row], (queries @ base.T)[row, ref[row]], depth=32)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_have_high_recall(kind):
    base, queries = _unit(3000, 16, 2), _unit(40, 16, 3)
    _, exact = search_faiss(build_faiss(base, "flat"), queries, 10)
    params = FaissParams(nlist=32, nprobe=16)
    _, approx = search_faiss(build_faiss(base, kind, params), queries, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=True)])
    assert recall > 0.9


def test_truncated_index_file_is_reported(tmp_path):
    path = tmp_path / "index.faiss"
    save_faiss(build_faiss(_unit(100, 8, 0), "flat"), path)
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(IncompleteArtifactError, match="index.faiss: unreadable"):
        load_faiss(path)


@pytest.mark.parametrize("n_gpus,env,expected", [
    (8, {}, list(range(8))),                                         # one process: sharded over the node
    (8, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, list(range(8))),  # torchrun with one process
    (8, {"LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "8"}, [5]),          # each rank its own GPU
    (8, {"LOCAL_RANK": "3"}, [3]),
    (4, {"LOCAL_RANK": "6", "LOCAL_WORLD_SIZE": "8"}, [2]),          # more ranks than GPUs
    (1, {"LOCAL_RANK": "6", "LOCAL_WORLD_SIZE": "8"}, [0]),          # the launcher shows each rank one GPU
    (1, {}, [0]),
    (0, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, []),
    (8, {"RANK": "3", "WORLD_SIZE": "4"}, [3]),                      # mpirun-style ranks (issue 68 item 7)
    (4, {"RANK": "6"}, [2]),
    (8, {"RANK": "0", "WORLD_SIZE": "1"}, list(range(8))),           # a lone process
])
def test_each_rank_puts_its_faiss_index_on_its_own_gpu(n_gpus, env, expected):
    from pgra.retrieval.dense import faiss_gpus
    from pgra.runtime.device import local_device_index

    assert faiss_gpus(n_gpus, env) == expected
    if len(expected) == 1:  # one GPU: the one its models use (the device index agrees)
        assert expected == [local_device_index(n_gpus, env)]


def test_a_missing_faiss_is_one_error_line_naming_the_extras(monkeypatch, corpus_txt, tiny_bert, tmp_path, capsys):
    import sys

    from tests.conftest import one_error_line

    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` raises ImportError
    line = one_error_line(["build-index", "--corpus", str(corpus_txt), "--encoder", str(tiny_bert),
                           "--out", str(tmp_path / "dense")], capsys)
    assert "faiss is not importable" in line and "pip install faiss-cpu" in line and "faiss-gpu-cu12" in line
    assert not (tmp_path / "dense").exists()  # said before anything was encoded or written
    # BM25 needs no faiss
    assert main(["build-index", "--corpus", str(corpus_txt), "--retriever", "bm25", "--out", str(tmp_path / "b")]) == 0
