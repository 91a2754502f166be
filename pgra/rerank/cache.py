"""A persistent, memory-mapped embedding cache: never embed the same evidence twice for a task.

One folder per key (LM fingerprint, template, demonstrations, prompt format, corpus fingerprint, dtype...):
``vectors.npy`` (a sparse ``(size, dim)`` memory map: rows cost disk only once written), ``done.npy``
(one byte per row) and ``key.json``. Rows are written before their ``done`` byte, so a killed run leaves
at worst unmarked rows that are embedded again. Processes of one node may fill disjoint rows concurrently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import read_json, write_json
from ..errors import IncompleteArtifactError
from ..faults import fault_point


def cache_key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]


class EmbeddingCache:
    """Rows ``0..size-1`` of unit vectors, filled lazily and kept across runs."""

    def __init__(self, root: str | Path, key: dict[str, Any], size: int, dim: int, dtype: str = "float32",
                 create: bool = True) -> None:
        self.key = key
        self.directory = Path(root) / cache_key_hash(key)
        self.size, self.dim = size, dim
        vec_path, done_path, key_path = (self.directory / n for n in ("vectors.npy", "done.npy", "key.json"))
        if not key_path.exists():
            if not create:
                raise IncompleteArtifactError(f"{self.directory}: no such embedding cache")
            self.directory.mkdir(parents=True, exist_ok=True)
            np.lib.format.open_memmap(vec_path, mode="w+", dtype=dtype, shape=(size, dim)).flush()
            np.lib.format.open_memmap(done_path, mode="w+", dtype=np.uint8, shape=(size,)).flush()
            write_json(key_path, {"key": key, "size": size, "dim": dim, "dtype": dtype})
        meta = read_json(key_path)
        if meta["key"] != json.loads(json.dumps(key)) or meta["size"] != size or meta["dim"] != dim:
            raise IncompleteArtifactError(f"{self.directory}: cache folder holds another key/size; delete it")
        try:
            self.vectors = np.load(vec_path, mmap_mode="r+", allow_pickle=False)
            self.done = np.load(done_path, mmap_mode="r+", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise IncompleteArtifactError(f"{self.directory}: unreadable cache ({e}); delete the folder") from None
        if self.vectors.shape != (size, dim) or self.done.shape != (size,):
            raise IncompleteArtifactError(f"{self.directory}: cache arrays have the wrong shape; delete the folder")

    def missing(self, rows: np.ndarray) -> np.ndarray:
        """The rows (unique, sorted) not cached yet."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        return rows[self.done[rows] == 0]

    def put(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        self.vectors[rows] = vectors.astype(self.vectors.dtype)
        self.vectors.flush()  # the vectors are on disk before their rows are marked filled
        fault_point("cache.put")
        self.done[rows] = 1
        self.done.flush()

    def get(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and not self.done[rows].all():
            raise IncompleteArtifactError(f"{self.directory}: {int((self.done[rows] == 0).sum())} requested rows "
                                          "were never embedded")
        return np.asarray(self.vectors[rows], dtype=np.float32)
