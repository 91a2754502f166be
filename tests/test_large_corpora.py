"""Corpora beyond one machine's memory: shard-by-shard exact search, bounded-memory builds (IVF merged on disk),
compressed indexes with recall recorded, memory-mapped loading, search split over GPUs and over ranks."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import faiss
import numpy as np
import pytest

from pgra.retrieval.dense import FaissParams, build_faiss, load_faiss
from pgra.retrieval.dense_build import FAISS_FILE, IVFDATA_FILE, shard_name, write_dense_index
from pgra.retrieval.dense_retriever import DenseConfig
from pgra.retrieval.shards import VectorShards
from pgra.storage.artifacts import save_npy
from tests import numerics


@pytest.fixture(autouse=True)
def _one_faiss_thread():
    """faiss's OpenMP threads on tiny data only contend with each other (and on a shared machine, with others)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _shards(vectors: np.ndarray, size: int, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, start in enumerate(range(0, len(vectors), size)):
        save_npy(folder / shard_name(i), vectors[start:start + size])
        paths.append(folder / shard_name(i))
    return paths


@pytest.mark.parametrize("shard,chunk,k", [(97, 5, 10), (1, 37, 7), (250, 13, 150), (1003, 64, 2000)])
def test_shard_by_shard_search_equals_one_flat_index(tmp_path, shard, chunk, k):
    """The same ids and scores as one shard of every vector searched in one chunk (bit for bit), and as faiss's
    flat index over them (ids; scores to float32 rounding: faiss's kernels round by position)."""
    base, queries = _unit(1003, 384, 0), _unit(37, 384, 1)
    got = VectorShards(_shards(base, shard, tmp_path / "odd")).search(queries, k, query_chunk=chunk)
    one = VectorShards(_shards(base, 1003, tmp_path / "one")).search(queries, k, query_chunk=37)
    np.testing.assert_array_equal(got[1], one[1])
    np.testing.assert_array_equal(got[0], one[0])
    flat = faiss.IndexFlatIP(384)
    flat.add(base)
    want = flat.search(queries, min(k, 1003))
    # faiss picks its SIMD kernels at import (FAISS_OPT_LEVEL): near ties swap by the CPU, judged by score
    for r in range(len(queries)):
        numerics.assert_same_ranking(got[1][r], got[0][r], want[1][r], want[0][r], depth=384, scale=1)


def test_ties_go_to_the_lower_position_whatever_the_shards(tmp_path):
    base = np.repeat(_unit(6, 8, 2), 7, axis=0)  # each vector 7 times: every score ties 7 ways
    queries = _unit(9, 8, 3)
    results = [VectorShards(_shards(base, size, tmp_path / str(size))).search(queries, 10, query_chunk=chunk)
               for size, chunk in ((3, 2), (7, 9), (42, 4), (5, 1))]
    for scores, ids in results[1:]:
        np.testing.assert_array_equal(ids, results[0][1])
        np.testing.assert_array_equal(scores, results[0][0])
    scores, ids = results[0]
    for srow, irow in zip(scores, ids, strict=True):
        for value in np.unique(srow):
            tied = irow[srow == value]
            assert list(tied) == sorted(tied)


def _write(tmp_path: Path, vectors: np.ndarray, **settings) -> tuple[Path, dict, dict]:
    d = DenseConfig(**{"shard_size": 61, **settings})
    build, out = tmp_path / "build", tmp_path / "out"
    _shards(vectors, d.shard_size, build)
    out.mkdir()
    files, fields = write_dense_index(d, len(vectors), build, out, show=False)
    return out, files, fields


@pytest.mark.parametrize("kind", ["ivf", "ivfsq8", "ivfpq"])
def test_ivf_merged_on_disk_equals_the_in_memory_index(tmp_path, kind):
    params = FaissParams(nlist=8, nprobe=3, train_size=150, pq_nbits=4)
    base, queries = _unit(500, 16, 4), _unit(20, 16, 5)
    out, files, _ = _write(tmp_path, base, index_type=kind, faiss=params, bounded_memory=True)
    assert set(files) == {FAISS_FILE, IVFDATA_FILE}  # lists on disk, no vectors kept
    memory = build_faiss(base, kind, params)
    want = memory.search(queries, 10)
    for mmap in (False, True):
        disk = load_faiss(out / FAISS_FILE, params, mmap=mmap, on_disk=True)
        assert isinstance(faiss.downcast_InvertedLists(faiss.extract_index_ivf(disk).invlists),
                          faiss.OnDiskInvertedLists)
        got = disk.search(queries, 10)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def test_the_folder_moves_with_its_on_disk_lists(tmp_path):
    params = FaissParams(nlist=4, nprobe=4)
    base = _unit(200, 8, 6)
    out, _, _ = _write(tmp_path, base, index_type="ivf", faiss=params, bounded_memory=True)
    moved = out.rename(tmp_path / "moved")
    index = load_faiss(moved / FAISS_FILE, params, on_disk=True)
    assert index.search(base[:3], 1)[1].ravel().tolist() == [0, 1, 2]


def test_bounded_flat_keeps_the_shards_as_the_index(tmp_path):
    base = _unit(300, 8, 7)
    out, files, fields = _write(tmp_path, base, bounded_memory=True)
    assert FAISS_FILE not in files and fields["vectors"]["shards"][0] == "vectors/emb_00000.npy"
    assert not list((tmp_path / "build").glob("emb_*.npy"))  # moved, not copied
    shards = VectorShards([out / name for name in fields["vectors"]["shards"]])
    np.testing.assert_array_equal(shards.rows(np.array([299, 0, 61])), base[[299, 0, 61]])


def _peak(tmp_path: Path, vectors: np.ndarray, **settings) -> int:
    """The traced (numpy) peak of indexing ``vectors`` already encoded in shards."""
    d = DenseConfig(**settings)
    build, out = tmp_path / "build", tmp_path / "out"
    _shards(vectors, d.shard_size, build)
    out.mkdir()
    tracemalloc.start()
    try:
        write_dense_index(d, len(vectors), build, out, show=False)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_a_bounded_build_does_not_grow_with_the_corpus(tmp_path, kind):
    """Twice the corpus at the same shard size: the bounded build's peak (numpy's, traced) stays put; the in-memory
    build's holds every vector (so the measure can tell)."""
    params = FaissParams(nlist=16, train_size=1000, recall_queries=0)
    peaks = {}
    for bounded in (True, False):
        for n in (20000, 40000):
            peaks[bounded, n] = _peak(tmp_path / f"{bounded}-{n}", _unit(n, 64, n), index_type=kind, faiss=params,
                                      shard_size=1000, bounded_memory=bounded)
    corpus = 40000 * 64 * 4  # bytes of the larger corpus's vectors
    assert peaks[True, 40000] < 1.1 * peaks[True, 20000]
    assert peaks[False, 40000] >= corpus and peaks[False, 40000] > peaks[True, 40000]


def test_new_options_at_their_defaults_leave_keys_and_records_as_they_were():
    from pgra.core.config import recorded_settings
    from pgra.retrieval.config import IndexConfig
    from pgra.retrieval.dense_retriever import DenseRetriever

    cfg = IndexConfig(corpus="c.txt", out="o")
    retriever = DenseRetriever(cfg)
    retriever.encoder_fingerprint = "fp"
    key = retriever.key_fields()
    assert key == {"encoder": "fp", "pooler": "cls", "max_length": 512, "index_type": "flat", "shard_size": 65536,
                   "faiss": {"nlist": 0, "nprobe": 32, "train_size": 262144, "hnsw_m": 32, "ef_construction": 200,
                             "ef_search": 256, "seed": 0}, "dtype": "auto"}
    dense = recorded_settings(cfg)["dense"]
    assert not {"bounded_memory", "rescore", "mmap"} & set(dense)
    assert not {"pq_m", "pq_nbits", "opq", "recall_queries", "recall_k"} & set(dense["faiss"])
    cfg.dense.bounded_memory, cfg.dense.faiss.pq_m = True, 4
    changed = retriever.key_fields()
    assert changed["bounded_memory"] is True and changed["faiss"]["pq_m"] == 4
    cfg.dense.mmap, cfg.dense.faiss.recall_queries = True, 10  # how it is loaded or measured: not the index
    assert retriever.key_fields() == changed
    json.dumps(changed)


def _build(corpus: Path, out: Path, encoder: Path, **dense) -> Path:
    from pgra.retrieval.index import IndexConfig, build_index

    return build_index(IndexConfig(corpus=str(corpus), out=str(out), show_progress=False,
                                   dense=DenseConfig(encoder=str(encoder), batch_size=8, shard_size=7, **dense)))


def test_a_bounded_build_searches_as_the_in_memory_one(corpus_txt, tmp_path, tiny_bert):
    from pgra.retrieval.index import Index

    queries = ["the planet orbits the sun", "a film about a dog"]
    plain = Index(_build(corpus_txt, tmp_path / "plain", tiny_bert))
    manifest = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert "bounded_memory" not in manifest["config"]["dense"] and "vectors" not in manifest
    want = plain.search(queries, 9)
    bounded = Index(_build(corpus_txt, tmp_path / "bounded", tiny_bert, bounded_memory=True))
    assert not (tmp_path / "bounded" / FAISS_FILE).exists()
    for index in (bounded, Index(tmp_path / "bounded", mmap=True)):
        scores, ids = index.search(queries, 9)
        np.testing.assert_array_equal(ids, want[1])
        numerics.assert_close(scores, want[0], depth=numerics.TINY_MODEL)
    ivf = _build(corpus_txt, tmp_path / "ivf", tiny_bert, index_type="ivf", bounded_memory=True,
                 faiss=FaissParams(nlist=2, nprobe=2))
    assert (ivf / IVFDATA_FILE).exists()
    np.testing.assert_array_equal(Index(ivf).search(queries, 9)[1], want[1])  # every cell probed: exact
    from pgra.retrieval.dense_retriever import DenseRetriever

    manifest = json.loads((ivf / "manifest.json").read_text())
    assert manifest["recall"]["recall"] == 1.0  # every cell probed
    assert "recall@" in DenseRetriever.describe(manifest) and "recall" not in DenseRetriever.describe(
        json.loads((tmp_path / "plain" / "manifest.json").read_text()))


def _clustered(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, d))
    x = (centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_compressed_index_records_its_recall_and_rescoring_raises_it(tmp_path):
    from pgra.retrieval.shards import search_index

    base = _clustered(800, 32, 8)
    params = FaissParams(nlist=8, nprobe=8, pq_m=4, pq_nbits=5, recall_queries=100, recall_k=20)
    _, files, plain = _write(tmp_path / "pq", base, index_type="ivfpq", faiss=params)
    assert set(files) == {FAISS_FILE} and 0.3 < plain["recall"]["recall"] < 0.95
    assert plain["recall"]["k"] == 20 and plain["recall"]["queries"] == 100
    out, files, rescored = _write(tmp_path / "rescored", base, index_type="ivfpq", faiss=params, rescore=4)
    assert rescored["recall"]["recall"] >= 0.95 > plain["recall"]["recall"]
    assert f"vectors/{shard_name(0)}" in files  # kept for re-scoring
    index = load_faiss(out / FAISS_FILE, params)
    stored = VectorShards([out / name for name in rescored["vectors"]["shards"]])
    scores, ids = search_index(index, base[:5], 10, stored, 4)
    numerics.assert_close(scores, np.einsum("qd,qkd->qk", base[:5], base[ids]), depth=32)  # exact scores
    sq8 = _write(tmp_path / "sq8", base, index_type="ivfsq8", faiss=params)[2]
    assert sq8["recall"]["recall"] >= 0.9


def test_an_index_below_its_recall_floor_is_refused(tmp_path):
    from pgra.core.errors import InputError

    params = FaissParams(nlist=16, nprobe=1, recall_queries=50, recall_k=10, min_recall=0.99)
    with pytest.raises(InputError, match="below min_recall 0.99") as e:
        _write(tmp_path, _unit(600, 16, 9), index_type="ivf", faiss=params)
    assert e.value.field == "dense.faiss.min_recall"


def test_opq_and_the_pq_defaults(tmp_path):
    assert FaissParams().pq_subquantizers(384) == 48 and FaissParams().pq_subquantizers(30) == 3
    with pytest.raises(Exception, match="does not divide"):
        FaissParams(pq_m=5).pq_subquantizers(32)
    params = FaissParams(nlist=4, pq_m=4, pq_nbits=4, opq=True, recall_queries=50, recall_k=10)
    out, _, fields = _write(tmp_path, _clustered(300, 16, 10), index_type="ivfpq", faiss=params,
                            bounded_memory=True)
    index = load_faiss(out / FAISS_FILE, params, on_disk=True)
    assert isinstance(index, faiss.IndexPreTransform) and fields["recall"]["recall"] > 0.3


@pytest.mark.parametrize("kind", ["flat", "ivf", "ivfsq8"])
def test_a_memory_mapped_index_searches_as_the_loaded_one(tmp_path, kind):
    params = FaissParams(nlist=8, nprobe=4, recall_queries=0)
    base, queries = _unit(3000, 64, 11), _unit(10, 64, 12)
    out, files, _ = _write(tmp_path, base, index_type=kind, faiss=params)
    assert set(files) == {FAISS_FILE}  # today's single-file layout
    loaded = load_faiss(out / FAISS_FILE, params)
    mapped = load_faiss(out / FAISS_FILE, params, mmap=True)
    want, got = loaded.search(queries, 10), mapped.search(queries, 10)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])


def test_the_mmap_option_is_read_from_the_manifest_and_overridden_by_the_caller(corpus_txt, tmp_path, tiny_bert):
    from pgra.retrieval.index import Index

    out = _build(corpus_txt, tmp_path / "idx", tiny_bert, bounded_memory=True, mmap=True)
    assert json.loads((out / "manifest.json").read_text())["config"]["dense"]["mmap"] is True
    assert isinstance(Index(out).searcher.vectors.arrays[0], np.memmap)
    assert not isinstance(Index(out, mmap=False).searcher.vectors.arrays[0], np.memmap)


class _FakeGpuFaiss:
    """The faiss calls a GPU search makes, recorded (no GPU here)."""

    METRIC_INNER_PRODUCT = 0
    IO_FLAG_ONDISK_SAME_DIR, IO_FLAG_MMAP, IO_FLAG_MMAP_IFC = 4, 8, 512
    IndexHNSW = type("IndexHNSW", (), {})
    StandardGpuResources = type("StandardGpuResources", (), {})

    class GpuClonerOptions:
        useFloat16 = False

    class GpuMultipleClonerOptions(GpuClonerOptions):
        shard = False

    def __init__(self, n_gpus: int) -> None:
        self.n_gpus, self.calls = n_gpus, []

    def get_num_gpus(self) -> int:
        return self.n_gpus

    def read_index(self, path, flags=0):
        self.calls.append(("read_index", flags))
        return "cpu-index"

    def try_extract_index_ivf(self, index):
        return None

    def index_cpu_to_gpu(self, resources, device, index, co=None):
        self.calls.append(("index_cpu_to_gpu", device, index))
        return f"gpu{device}"

    def index_cpu_to_gpus_list(self, index, co=None, gpus=None):
        self.calls.append(("index_cpu_to_gpus_list", index, co.shard, list(gpus)))
        return "sharded"


@pytest.mark.parametrize("env,call", [
    ({}, ("index_cpu_to_gpus_list", "cpu-index", True, [0, 1, 2])),  # one process: split over every GPU
    ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, ("index_cpu_to_gpu", 1, "cpu-index")),  # a rank: its own GPU
    ({"LOCAL_RANK": "4", "LOCAL_WORLD_SIZE": "8"}, ("index_cpu_to_gpu", 1, "cpu-index")),
])
def test_a_loaded_index_is_split_over_the_nodes_gpus_or_put_on_the_ranks_own(monkeypatch, env, call):
    from pgra.retrieval import dense

    fake = _FakeGpuFaiss(3)
    monkeypatch.setattr(dense, "import_faiss", lambda: fake)
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    dense.load_faiss("index.faiss", use_gpu=True)
    assert fake.calls == [("read_index", 0), call]
    fake.calls.clear()
    assert dense.load_faiss("index.faiss", use_gpu=True, mmap=True) == "cpu-index"  # mapped: searched on CPU
    assert fake.calls == [("read_index", 512)]


@pytest.mark.distributed
def test_two_ranks_each_holding_half_the_index_retrieve_as_one_process(corpus_txt, tmp_path, tiny_bert, sky_task):
    """`torchrun` (gloo, 2 processes): each rank searches its own vector shards, the top-k merged across ranks."""
    import os
    import subprocess
    import sys

    from tests.conftest import launch_failure

    index = _build(corpus_txt, tmp_path / "idx", tiny_bert, bounded_memory=True)
    assert len(json.loads((index / "manifest.json").read_text())["vectors"]["shards"]) >= 3
    root = Path(__file__).resolve().parents[1]
    args = [str(root / "scripts" / "retrieve.py"), "--task", str(sky_task), "--index", str(index), "-k", "10",
            "--no-show-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the same float rounding in both runs' encoders
    for cmd in ([sys.executable, *args, "--out", str(tmp_path / "one")],
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args,
                 "--out", str(tmp_path / "two"), "--split-index-over-ranks"]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, launch_failure(proc)
    one = tmp_path / "one"
    for split in ("train", "dev", "test"):
        assert (tmp_path / "two" / f"{split}.jsonl").read_text() == (one / f"{split}.jsonl").read_text()
    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert manifest["config"]["split_index_over_ranks"] is True
    assert "split_index_over_ranks" not in json.loads((one / "manifest.json").read_text())["config"]


# --- issue 53 (reliability round 4): codebooks faiss cannot train on so few vectors ---

def test_ivfpq_and_opq_on_too_few_vectors_are_an_input_error_naming_the_minimum(tmp_path):
    """In memory, bounded or from Python: pgra's InputError (field and minimum), never faiss's RuntimeError."""
    from pgra.core.errors import InputError

    base = _unit(100, 16, 11)
    cases = [(FaissParams(nlist=4, pq_m=4), "dense.faiss.pq_nbits", "pq_nbits=6"),
             (FaissParams(nlist=4, pq_m=4, pq_nbits=4, opq=True), "dense.faiss.opq", "opq=false"),
             (FaissParams(nlist=4, pq_m=4, opq=True), "dense.faiss.pq_nbits", "pq_nbits=6 (2^6 = 64 centroids) and")]
    for i, (params, field, fix) in enumerate(cases):
        with pytest.raises(InputError, match="at least 256 corpus sentences") as e:
            build_faiss(base, "ivfpq", params)
        assert e.value.field == field and fix in str(e.value)
        with pytest.raises(InputError) as e:
            _write(tmp_path / str(i), base, index_type="ivfpq", faiss=params, bounded_memory=True)
        assert e.value.field == field
    assert build_faiss(base, "ivfpq", FaissParams(nlist=4, pq_m=4, pq_nbits=6)).ntotal == 100  # the fix works


def test_ivf_cells_fit_the_training_sample(tmp_path):
    """The default nlist (4 * sqrt(N)) is at most the training sample (k-means needs a point per cell); an explicit
    nlist above train_size is refused by name."""
    from pgra.core.errors import InputError

    index = build_faiss(_unit(1000, 8, 12), "ivf", FaissParams(train_size=10))
    assert faiss.extract_index_ivf(index).nlist == 10 and index.ntotal == 1000
    with pytest.raises(InputError, match="train_size is 10") as e:
        build_faiss(_unit(1000, 8, 12), "ivfsq8", FaissParams(nlist=50, train_size=10))
    assert e.value.field == "dense.faiss.nlist"
