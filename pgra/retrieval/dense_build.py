"""The dense index's files, made from the encoded shards in ``.build/`` (``emb_*.npy``, in position order):
concatenated into one faiss index, or with ``dense.bounded_memory`` never concatenated (docs/large-corpora.md)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import IncompleteArtifactError, InputError
from ..storage.artifacts import atomic_path, file_record
from .dense import IVF_TYPES, build_faiss, empty_index, import_faiss, save_faiss, train_index, train_positions
from .shards import VectorShards, held_out_recall, search_index

if TYPE_CHECKING:
    import faiss

    from .dense_config import DenseConfig

FAISS_FILE = "index.faiss"
IVFDATA_FILE = "index.ivfdata"
VECTORS_DIR = "vectors"


def shard_name(i: int) -> str:
    return f"emb_{i:05d}.npy"


def write_dense_index(d: DenseConfig, n: int, build_dir: Path, out: Path, show: bool) -> tuple[dict[str, Any],
                                                                                            dict[str, Any]]:
    """Write the index of the ``n`` encoded vectors in ``build_dir`` into ``out``: its file records and fields."""
    n_shards = (n + d.shard_size - 1) // d.shard_size
    names = [shard_name(i) for i in range(n_shards)]
    shards = VectorShards([build_dir / name for name in names], mmap=True)
    if len(shards) != n:
        raise IncompleteArtifactError(f"{build_dir}: shards hold {len(shards)} vectors for {n} texts")
    sharded_flat = d.bounded_memory and d.index_type == "flat"
    files: dict[str, Any] = {}
    fields: dict[str, Any] = {"dim": shards.dim}
    if show:
        how = "shard by shard" if d.bounded_memory else "in memory"
        print(f"building faiss '{d.index_type}' index over {n} x {shards.dim} vectors ({how})")
    if not sharded_flat:
        index = _bounded_faiss(d, shards, build_dir, out) if d.bounded_memory else \
            build_faiss(np.concatenate(shards.arrays), d.index_type, d.faiss, use_gpu=d.use_gpu_faiss)
        with atomic_path(out / FAISS_FILE) as tmp:
            save_faiss(index, tmp)
        files[FAISS_FILE] = file_record(out / FAISS_FILE)
        if (out / IVFDATA_FILE).exists() and d.bounded_memory and d.index_type in IVF_TYPES:
            files[IVFDATA_FILE] = file_record(out / IVFDATA_FILE)
        if d.index_type != "flat" and d.faiss.recall_queries and n > 1:
            stored = shards if d.rescore else None
            fields["recall"] = held_out_recall(lambda q, k: search_index(index, q, k, stored, d.rescore), shards,
                                               d.faiss.recall_queries, d.faiss.recall_k, d.faiss.seed)
            r = fields["recall"]
            if show:
                print(f"recall@{r['k']} against exact search: {r['recall']:.4f} ({r['queries']} held-out queries)")
            if r["recall"] < d.faiss.min_recall:
                raise InputError(f"the '{d.index_type}' index finds {r['recall']:.4f} of the exact top {r['k']} "
                                 f"(held-out corpus sentences), below min_recall {d.faiss.min_recall}: probe more "
                                 "cells (nprobe), compress less (pq_m, pq_nbits) or re-score (dense.rescore)",
                                 field="dense.faiss.min_recall")
    if sharded_flat or d.rescore:
        target = out / VECTORS_DIR
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in names:
            (build_dir / name).replace(target / name)
            files[f"{VECTORS_DIR}/{name}"] = file_record(target / name)
        fields["vectors"] = {"shards": [f"{VECTORS_DIR}/{name}" for name in names]}
    return files, fields


def _bounded_faiss(d: DenseConfig, shards: VectorShards, build_dir: Path, out: Path) -> faiss.Index:
    """A faiss index built one shard at a time: IVF types merged on disk into ``out/index.ivfdata``."""
    faiss = import_faiss()
    n = len(shards)
    index = empty_index(shards.dim, n, d.index_type, d.faiss)
    keep = train_positions(n, d.faiss)
    sample = np.concatenate(shards.arrays) if keep is None else shards.rows(keep)
    index = train_index(index, sample, d.faiss, d.use_gpu_faiss)
    del sample
    if d.index_type not in IVF_TYPES:  # hnsw: its graph grows shard by shard
        for array in shards.arrays:
            index.add(np.ascontiguousarray(array, dtype=np.float32))
        return index
    parts = []
    for i, array in enumerate(shards.arrays):
        part = faiss.clone_index(index)
        start = int(shards.offsets[i])
        part.add_with_ids(np.ascontiguousarray(array, dtype=np.float32),
                          np.arange(start, start + len(array), dtype=np.int64))
        path = build_dir / f"ivf_{i:05d}.index"
        with atomic_path(path) as tmp:
            save_faiss(part, tmp)
        parts.append(str(path))
        del part
    (out / IVFDATA_FILE).unlink(missing_ok=True)
    from faiss.contrib.ondisk import merge_ondisk

    merge_ondisk(index, parts, str(out / IVFDATA_FILE))
    return index


__all__ = ["FAISS_FILE", "IVFDATA_FILE", "VECTORS_DIR", "shard_name", "write_dense_index"]
