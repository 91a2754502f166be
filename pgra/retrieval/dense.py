"""faiss indexes over unit vectors: exact inner product (default), IVF, HNSW; on GPU when faiss-gpu is present.

Inner product on L2-normalised vectors is cosine similarity, and ranks exactly as the paper's L2 search does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import faiss
import numpy as np

from ..config import SEED_MAX, option
from ..errors import IncompleteArtifactError, InputError

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


def gpu_available() -> bool:
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def build_faiss(vectors: np.ndarray, index_type: IndexType = "flat", params: FaissParams | None = None,
                use_gpu: bool = False) -> faiss.Index:
    """Build an inner-product index over ``vectors`` (float32, unit norm). Returns a CPU index."""
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
            gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
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
    faiss.write_index(index, str(path))


def load_faiss(path: str | Path, params: FaissParams | None = None, use_gpu: bool = False) -> faiss.Index:
    """Read an index file (a truncated or corrupted file raises IncompleteArtifactError naming it)."""
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
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    return index


def search_faiss(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k ``(scores, positions)``, each ``(n_queries, k)``; positions are -1 where fewer than k exist."""
    k = min(k, index.ntotal)
    scores, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return scores, ids
