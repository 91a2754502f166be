"""faiss indexes over unit vectors: exact inner product (default), IVF, HNSW; on GPU when faiss-gpu is present.

Inner product on L2-normalised vectors is cosine similarity, and ranks exactly as the paper's L2 search does.
faiss comes from one of pgra's extras, ``cpu`` (faiss-cpu) or ``gpu`` (faiss-gpu-cu12): both install the
module ``faiss``, so only one may be installed; it is imported on first use (BM25 needs none).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..config import SEED_MAX, option
from ..errors import IncompleteArtifactError, InputError

if TYPE_CHECKING:
    import faiss

IndexType = Literal["flat", "ivf", "hnsw"]
INDEX_TYPES: tuple[str, ...] = ("flat", "ivf", "hnsw")


@dataclass
class FaissParams:
    """Knobs of the approximate index types (ignored by ``flat``)."""

    nlist: int = option(0, min=0, help="IVF cells; 0 = 4 * sqrt(N)")
    nprobe: int = option(32, min=1, help="IVF cells visited per query")
    train_size: int = option(262144, min=1, help="IVF training sample (seeded)")
    hnsw_m: int = option(32, min=2, help="HNSW neighbours per node")
    ef_construction: int = option(200, min=1, help="HNSW build-time search width")
    ef_search: int = option(256, min=1, help="HNSW query-time search width")
    seed: int = option(0, min=0, max=SEED_MAX, help="seed of the IVF training sample")


def import_faiss():
    """The ``faiss`` module; an InputError naming pgra's extras when none is installed."""
    try:
        import faiss
    except ImportError as e:
        raise InputError(f"faiss is not importable ({e}): install one of pgra's extras, pip install 'pgra[cpu]' "
                         "(faiss-cpu) or 'pgra[gpu]' (faiss-gpu-cu12, CUDA 12), not both") from None
    return faiss


def gpu_available() -> bool:
    faiss = import_faiss()
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def faiss_gpus(n_gpus: int, env: Mapping[str, str] | None = None) -> list[int]:
    """The GPUs this process puts its faiss index on. Under a launcher with several processes on the node
    (``LOCAL_WORLD_SIZE`` > 1, or a ``LOCAL_RANK`` without it) each takes its own, ``LOCAL_RANK`` modulo the GPUs
    it sees (one when the launcher hides the others); a lone process shards the index over all of them."""
    env = os.environ if env is None else env
    if n_gpus <= 0:
        return []
    if "LOCAL_RANK" in env and int(env.get("LOCAL_WORLD_SIZE", "2")) > 1:
        return [int(env["LOCAL_RANK"]) % n_gpus]
    return list(range(n_gpus))


def _to_gpu(index: faiss.Index, train_only: bool = False) -> faiss.Index:
    """``index`` on this process's GPU (:func:`faiss_gpus`), sharded when it has several (not for training)."""
    faiss = import_faiss()
    devices = faiss_gpus(faiss.get_num_gpus())
    if len(devices) == 1 or train_only:
        return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), devices[0], index)
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True  # each GPU holds 1/n of the vectors; the searches' results are merged
    return faiss.index_cpu_to_gpus_list(index, co=options, gpus=devices)


def build_faiss(vectors: np.ndarray, index_type: IndexType = "flat", params: FaissParams | None = None,
                use_gpu: bool = False) -> faiss.Index:
    """Build an inner-product index over ``vectors`` (float32, unit norm). Returns a CPU index."""
    faiss = import_faiss()
    params = params or FaissParams()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "ivf":
        nlist = params.nlist or max(1, int(4 * np.sqrt(n)))
        nlist = min(nlist, n)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(params.seed)
        sample = vectors if n <= params.train_size else vectors[np.sort(rng.choice(n, params.train_size,
                                                                                   replace=False))]
        if use_gpu and gpu_available():
            gpu = _to_gpu(index, train_only=True)
            gpu.train(sample)
            index = faiss.index_gpu_to_cpu(gpu)
        else:
            index.train(sample)
        index.nprobe = params.nprobe
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.ef_construction
        index.hnsw.efSearch = params.ef_search
    else:
        raise InputError(f"unknown index type '{index_type}', use one of {INDEX_TYPES}", field="index_type")
    index.add(vectors)
    return index


def save_faiss(index: faiss.Index, path: str | Path) -> None:
    import_faiss().write_index(index, str(path))


def load_faiss(path: str | Path, params: FaissParams | None = None, use_gpu: bool = False) -> faiss.Index:
    """Read an index file (a truncated or corrupted file raises IncompleteArtifactError naming it)."""
    faiss = import_faiss()
    try:
        index = faiss.read_index(str(path))
    except RuntimeError as e:
        raise IncompleteArtifactError(f"{path}: unreadable faiss index ({str(e).splitlines()[0]})") from None
    params = params or FaissParams()
    if isinstance(index, faiss.IndexIVF):
        index.nprobe = params.nprobe
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = params.ef_search
    if use_gpu and gpu_available() and not isinstance(index, faiss.IndexHNSW):
        index = _to_gpu(index)
    return index


def search_faiss(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k ``(scores, positions)``, each ``(n_queries, k)``; positions are -1 where fewer than k exist."""
    k = min(k, index.ntotal)
    scores, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return scores, ids
