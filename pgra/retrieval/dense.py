"""faiss indexes over unit vectors (inner product = cosine): flat, IVF, HNSW, IVF-PQ (optionally OPQ), IVF-SQ8;
on GPU when faiss-gpu is present (faiss is imported on first use: BM25 needs none)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..core.config import MAX_HNSW_M, MAX_ITEMS, SEED_MAX, option
from ..core.errors import IncompleteArtifactError, InputError, whole_number

if TYPE_CHECKING:
    import faiss

IndexType = Literal["flat", "ivf", "hnsw", "ivfpq", "ivfsq8"]
INDEX_TYPES: tuple[str, ...] = ("flat", "ivf", "hnsw", "ivfpq", "ivfsq8")
IVF_TYPES: tuple[str, ...] = ("ivf", "ivfpq", "ivfsq8")  # trained on a sample; inverted lists mergeable on disk


@dataclass
class FaissParams:
    """Knobs of the approximate index types (ignored by ``flat``)."""

    nlist: int = option(0, min=0, help="IVF cells; 0 = 4 * sqrt(N), at most train_size")
    nprobe: int = option(32, min=1, help="IVF cells visited per query")
    train_size: int = option(262144, min=1, help="IVF training sample (seeded)")
    hnsw_m: int = option(32, min=2, max=MAX_HNSW_M, help="HNSW neighbours per node")
    ef_construction: int = option(200, min=1, max=MAX_ITEMS, help="HNSW build-time search width")
    ef_search: int = option(256, min=1, max=MAX_ITEMS, help="HNSW query-time search width")
    seed: int = option(0, min=0, max=SEED_MAX, help="seed of the IVF training sample")
    # added later: left out of build keys and manifests while at their defaults (:func:`pgra.core.config.recorded_settings`)
    pq_m: int = option(0, min=0, omit_default=True, record_default=False,
                       help="ivfpq: sub-quantisers (bytes a vector at 8 bits); 0 = the largest divisor of the dim "
                            "up to dim/8")
    pq_nbits: int = option(8, min=1, max=16, omit_default=True, record_default=False, help="ivfpq: bits per sub-quantiser code")
    opq: bool = option(False, omit_default=True, record_default=False, help="ivfpq: learn an OPQ rotation before the quantisers")
    recall_queries: int = option(256, min=0, max=MAX_ITEMS, cosmetic=True, omit_default=True, record_default=False,
                                 help="approximate indexes: corpus sentences (a seeded sample) searched at build "
                                      "time to record recall@k against exact search in the manifest; 0 = none")
    recall_k: int = option(150, min=1, max=MAX_ITEMS, cosmetic=True, omit_default=True, record_default=False, help="the k of the recorded recall@k")
    min_recall: float = option(0.0, min=0, max=1, cosmetic=True, omit_default=True, record_default=False,
                               help="refuse to finish an approximate index whose recorded recall@k is lower")

    def pq_subquantizers(self, dim: int) -> int:
        """The ``pq_m`` used at dimension ``dim`` (its value, or the largest divisor of dim up to dim/8)."""
        if self.pq_m:
            if dim % self.pq_m:
                raise InputError(f"pq_m {self.pq_m} does not divide the vectors' dimension {dim}",
                                 field="dense.faiss.pq_m")
            return self.pq_m
        return max(m for m in range(1, max(1, dim // 8) + 1) if dim % m == 0)


def import_faiss():
    """The ``faiss`` module; an InputError naming pgra's extras when none is installed."""
    try:
        import faiss
    except ImportError as e:
        raise InputError(f"faiss is not importable ({e}): install exactly one: pip install faiss-cpu "
                         "(pgra's cpu extra) or faiss-gpu-cu12 (its gpu extra, CUDA 12)") from None
    return faiss


def gpu_available() -> bool:
    faiss = import_faiss()
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def faiss_gpus(n_gpus: int, env: Mapping[str, str] | None = None) -> list[int]:
    """The GPUs this process puts its faiss index on: a rank its own, a lone process all of them."""
    from ..runtime.device import local_device_index, one_gpu_each  # (torch: imported where a GPU is used)

    if n_gpus <= 0:
        return []
    if one_gpu_each(env):
        return [local_device_index(n_gpus, env)]
    return list(range(n_gpus))


GPU_SHARED_MEMORY = 49_152  # bytes of shared memory a CUDA block gets (sharedMemPerBlock), faiss-gpu's IVFPQ limit
GPU_MAX_K = 2048  # the largest k a faiss-gpu search takes (GPU_MAX_SELECTION_K)


def pq_lookup_bytes(m: int, nbits: int, fp16: bool) -> int:
    """Shared memory faiss-gpu's IVFPQ scan needs for a query's lookup tables: ``m * 2^nbits`` x 4 bytes (2 in fp16)."""
    return m * (1 << nbits) * (2 if fp16 else 4)


def pq_fp16_lookup(index: faiss.Index, limit: int = GPU_SHARED_MEMORY) -> bool:
    """Whether an IVFPQ ``index`` needs fp16 lookup tables on the GPU (its fp32 ones exceed ``limit`` bytes); an
    InputError naming ``dense.faiss.pq_m`` when even fp16 ones do not fit."""
    faiss = import_faiss()
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return False
    ivf = faiss.downcast_index(ivf)
    if not isinstance(ivf, faiss.IndexIVFPQ):
        return False
    m, nbits = int(ivf.pq.M), int(ivf.pq.nbits)
    if pq_lookup_bytes(m, nbits, fp16=False) <= limit:
        return False
    need = pq_lookup_bytes(m, nbits, fp16=True)
    if need > limit:
        raise InputError(f"ivfpq's lookup tables (pq_m {m} x 2^{nbits} codes) need {need:,} bytes of GPU shared "
                         f"memory even in fp16, above faiss-gpu's {limit:,}: search this index on the CPU "
                         "(use_gpu_faiss=false) or rebuild it with pq_m * 2^pq_nbits at most "
                         f"{limit // 2:,}", field="dense.faiss.pq_m")
    return True


def _to_gpu(index: faiss.Index, train_only: bool = False) -> faiss.Index:
    """``index`` on this process's GPU(s), with fp16 lookup tables where :func:`pq_fp16_lookup` says."""
    faiss = import_faiss()
    devices = faiss_gpus(faiss.get_num_gpus())
    fp16 = pq_fp16_lookup(index)
    if len(devices) == 1 or train_only:
        options = faiss.GpuClonerOptions()
        options.useFloat16 = fp16
        return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), devices[0], index, options)
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True  # each GPU holds 1/n of the vectors; the searches' results are merged
    options.useFloat16 = fp16
    return faiss.index_cpu_to_gpus_list(index, co=options, gpus=devices)


_said: set[str] = set()


def _say_once(message: str) -> None:
    """``message`` on stderr once per process (on the node's first rank only, under a launcher)."""
    if message in _said:
        return
    _said.add(message)
    if not whole_number(os.environ.get("LOCAL_RANK") or 0):
        print(f"note: {message}", file=sys.stderr, flush=True)


class GpuIndex:
    """A faiss index on this process's GPU(s); a search for more than :data:`GPU_MAX_K` hits, which faiss-gpu
    refuses, runs on the CPU index (memory-mapped from its file on first need)."""

    def __init__(self, gpu: faiss.Index, cpu: Callable[[], faiss.Index]) -> None:
        self.gpu = gpu
        self._load_cpu = cpu
        self._cpu: faiss.Index | None = None

    def __getattr__(self, name: str):
        return getattr(self.__dict__["gpu"], name)

    @property
    def cpu(self) -> faiss.Index:
        """The CPU index (read on first use)."""
        if self._cpu is None:
            self._cpu = self._load_cpu()
        return self._cpu

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k <= GPU_MAX_K:
            return self.gpu.search(queries, k)
        _say_once(f"a search for {k} hits (faiss-gpu takes at most {GPU_MAX_K}) runs on the CPU copy of the index")
        return self.cpu.search(queries, k)


def ivf_nlist(n: int, params: FaissParams) -> int:
    """IVF cells for ``n`` vectors: ``nlist``, or 4 * sqrt(N), at most the training sample and N."""
    if params.nlist:
        return min(params.nlist, n)
    return min(max(1, int(4 * np.sqrt(n))), n, params.train_size)


def train_positions(n: int, params: FaissParams) -> np.ndarray | None:
    """The sorted corpus positions of the seeded IVF training sample, or None for all ``n`` vectors."""
    if n <= params.train_size:
        return None
    return np.sort(np.random.default_rng(params.seed).choice(n, params.train_size, replace=False))


OPQ_CENTROIDS = 256  # faiss's OPQ rotation trains its own 8-bit product quantiser, whatever pq_nbits is


def check_trainable(index_type: str, params: FaissParams, n: int | None = None) -> None:
    """Refuse settings faiss cannot train, naming the field and the minimum: a training sample smaller than
    ``nlist`` or than ``ivfpq``'s codebooks (or, ``n`` known, such a corpus); an ``nlist`` above ``n`` is cut."""
    if index_type not in IVF_TYPES:
        return
    if params.nlist and params.nlist > params.train_size:
        raise InputError(f"nlist {params.nlist} IVF cells need at least {params.nlist} training vectors, but "
                         f"train_size is {params.train_size}: raise dense.faiss.train_size to {params.nlist} or lower "
                         "nlist (0 = 4 * sqrt(N))", field="dense.faiss.nlist")
    if index_type != "ivfpq":
        return
    codebook = 2 ** params.pq_nbits
    need = max(codebook, OPQ_CENTROIDS if params.opq else 1)
    why = (f"pq_nbits {params.pq_nbits} trains {codebook} centroids per sub-quantiser"
           + (f" and opq's rotation trains {OPQ_CENTROIDS}" if params.opq and codebook < OPQ_CENTROIDS else ""))
    if params.train_size < need:
        raise InputError(f"ivfpq needs at least {need} training vectors ({why}), but train_size is "
                         f"{params.train_size}: raise dense.faiss.train_size to {need}", field="dense.faiss.train_size")
    if n is None or n >= need:
        return
    fits = n.bit_length() - 1  # the largest pq_nbits whose codebook n vectors can train
    fixes = [f"dense.faiss.pq_nbits={fits} (2^{fits} = {2 ** fits} centroids)"] if codebook > n and fits >= 1 else []
    if params.opq and n < OPQ_CENTROIDS:
        fixes.append("dense.faiss.opq=false")
    fix = "set " + " and ".join(fixes) + ", or use" if fixes and (codebook <= n or fits >= 1) else "use"
    raise InputError(f"ivfpq needs at least {need} corpus sentences to train on ({why}); this corpus has {n}: {fix} "
                     "index_type flat (exact search, and small at this size)",
                     field="dense.faiss.pq_nbits" if codebook > n else "dense.faiss.opq")


def empty_index(dim: int, n: int, index_type: str, params: FaissParams) -> faiss.Index:
    """An untrained, empty inner-product index of ``index_type`` (:func:`check_trainable` first)."""
    faiss = import_faiss()
    check_trainable(index_type, params, n)
    ip = faiss.METRIC_INNER_PRODUCT
    if index_type == "flat":
        return faiss.IndexFlatIP(dim)
    if index_type == "ivf":
        return faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, ivf_nlist(n, params), ip)
    if index_type == "ivfsq8":
        return faiss.index_factory(dim, f"IVF{ivf_nlist(n, params)},SQ8", ip)
    if index_type == "ivfpq":
        m = params.pq_subquantizers(dim)
        rotation = f"OPQ{m}," if params.opq else ""
        return faiss.index_factory(dim, f"{rotation}IVF{ivf_nlist(n, params)},PQ{m}x{params.pq_nbits}", ip)
    if index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.hnsw_m, ip)
        index.hnsw.efConstruction = params.ef_construction
        index.hnsw.efSearch = params.ef_search
        return index
    raise InputError(f"unknown index type '{index_type}', use one of {INDEX_TYPES}", field="index_type")


def train_index(index: faiss.Index, sample: np.ndarray, params: FaissParams, use_gpu: bool = False) -> faiss.Index:
    """``index`` trained on ``sample`` (IVF types; others returned as they are), its ``nprobe`` set."""
    faiss = import_faiss()
    if not isinstance(index, faiss.IndexIVF) and faiss.try_extract_index_ivf(index) is None:
        return index
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    if use_gpu and gpu_available() and isinstance(index, faiss.IndexIVFFlat):
        gpu = _to_gpu(index, train_only=True)
        gpu.train(sample)
        index = faiss.index_gpu_to_cpu(gpu)
    else:
        index.train(sample)
    faiss.extract_index_ivf(index).nprobe = params.nprobe
    return index


def build_faiss(vectors: np.ndarray, index_type: IndexType = "flat", params: FaissParams | None = None,
                use_gpu: bool = False) -> faiss.Index:
    """Build an inner-product index over ``vectors`` (float32, unit norm) held in memory. Returns a CPU index."""
    params = params or FaissParams()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    index = empty_index(dim, n, index_type, params)
    keep = train_positions(n, params)
    index = train_index(index, vectors if keep is None else vectors[keep], params, use_gpu)
    index.add(vectors)
    return index


def save_faiss(index: faiss.Index, path: str | Path) -> None:
    import_faiss().write_index(index, str(path))


def load_faiss(path: str | Path, params: FaissParams | None = None, use_gpu: bool = False,
               mmap: bool = False, on_disk: bool = False) -> faiss.Index:
    """Read an index file (damaged: IncompleteArtifactError). ``on_disk``: IVF lists in the ``.ivfdata`` beside it;
    ``mmap``: vectors mapped, not read; ``use_gpu``: a :class:`GpuIndex`, except for a mapped, HNSW or on-disk index."""
    faiss = import_faiss()
    mapped = getattr(faiss, "IO_FLAG_MMAP_IFC", faiss.IO_FLAG_MMAP)  # flat codes, IVF lists
    flags = faiss.IO_FLAG_ONDISK_SAME_DIR if on_disk else mapped if mmap else 0
    params = params or FaissParams()
    index = _read(path, flags, params)
    if use_gpu and not mmap and gpu_available() and not isinstance(index, faiss.IndexHNSW):
        if on_disk or _lists_on_disk(index):
            _say_once(f"{path}: an IVF index whose lists are on disk is searched on the CPU (faiss-gpu would copy "
                      "every list into GPU memory)")
            return index
        return GpuIndex(_to_gpu(index), lambda: _read(path, mapped, params))
    return index


def _read(path: str | Path, flags: int, params: FaissParams) -> faiss.Index:
    """The index file read with ``flags``, its search settings (``nprobe``, ``ef_search``) set."""
    faiss = import_faiss()
    try:
        index = faiss.read_index(str(path), flags)
    except RuntimeError as e:
        raise IncompleteArtifactError(f"{path}: unreadable faiss index ({str(e).splitlines()[0]})") from None
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = params.nprobe
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = params.ef_search
    return index


def _lists_on_disk(index: faiss.Index) -> bool:
    """Whether ``index`` is an IVF index whose inverted lists are faiss's ``OnDiskInvertedLists``."""
    faiss = import_faiss()
    ivf = faiss.try_extract_index_ivf(index)
    return ivf is not None and isinstance(faiss.downcast_InvertedLists(ivf.invlists), faiss.OnDiskInvertedLists)


def search_faiss(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k ``(scores, positions)``, each ``(n_queries, k)``; positions are -1 where fewer than k exist."""
    k = min(k, index.ntotal)
    scores, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return scores, ids
