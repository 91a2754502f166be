"""A persistent, memory-mapped embedding cache: never embed the same evidence twice for a task.

One folder per key (LM fingerprint, template, demonstrations, prompt format, corpus fingerprint, dtype...):
``vectors.npy`` (a sparse ``(size, dim)`` memory map: rows cost disk only once written), ``done.npy``
(one byte per row) and ``key.json``. Rows are written before their ``done`` byte, so a killed run leaves
at worst unmarked rows that are embedded again. Processes of one node may fill disjoint rows concurrently.
Repair, by the process that creates caches (rank 0), saying so on one line; the others refuse damage by name:
a truncated ``vectors.npy`` keeps its whole rows (the rest are unmarked and extended back as empty); a truncated
``done.npy`` keeps its marks (rows past the cut are embedded again); an unreadable ``done.npy`` is recreated
empty; an unreadable or mismatched ``key.json`` or ``vectors.npy`` header rebuilds the folder. Rows marked filled
whose vector is not a unit vector (garbage, zeros) count as missing when asked for, so they are embedded again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ...core.errors import IncompleteArtifactError
from ...core.faults import fault_point
from ...storage.artifacts import write_json


def cache_key_hash(key: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]


class EmbeddingCache:
    """Rows ``0..size-1`` of unit vectors, filled lazily and kept across runs."""

    def __init__(self, root: str | Path, key: dict[str, Any], size: int, dim: int, dtype: str = "float32",
                 create: bool = True, report: bool = True, read_only: bool = False) -> None:
        """``create``: this process creates, repairs or rebuilds the cache (rank 0); otherwise it must exist intact.
        ``read_only`` (with ``create=False``): only read, mapped read-only (a cache in a folder this process may not
        write: an export's ``store/``)."""
        if read_only and create:
            raise ValueError("a read-only embedding cache is never created")
        self.key = key
        self.directory = Path(root) / cache_key_hash(key)
        self.size, self.dim = size, dim
        self.dtype = dtype
        self._reported = not report  # ranks but the first say nothing: one line per run
        if create:  # the process that creates caches (rank 0) repairs or rebuilds a damaged one
            self._repair()
            damage = self._damage()
            if damage:  # a cache only saves work: rebuild it rather than refuse it
                self._say(f"{damage}; rebuilding the embedding cache (its rows are embedded again)")
                shutil.rmtree(self.directory)
            if not (self.directory / "key.json").exists():
                self._create()
        elif not (self.directory / "key.json").exists():
            raise IncompleteArtifactError(f"{self.directory}: no such embedding cache")
        elif damage := self._damage():
            raise IncompleteArtifactError(f"{self.directory}: {damage}")
        mode = "r" if read_only else "r+"
        self.vectors = np.load(self.directory / "vectors.npy", mmap_mode=mode, allow_pickle=False)
        self.done = np.load(self.directory / "done.npy", mmap_mode=mode, allow_pickle=False)

    def _create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        np.lib.format.open_memmap(self.directory / "vectors.npy", mode="w+", dtype=self.dtype,
                                  shape=(self.size, self.dim)).flush()
        np.lib.format.open_memmap(self.directory / "done.npy", mode="w+", dtype=np.uint8, shape=(self.size,)).flush()
        write_json(self.directory / "key.json", {"key": self.key, "size": self.size, "dim": self.dim,
                                                 "dtype": self.dtype})

    def _repair(self) -> None:
        """Mend files of a readable key whose data is cut short or whose marks are unreadable, keeping every
        intact row; what this cannot mend is left for :meth:`_damage` (which rebuilds the folder)."""
        if not self.directory.exists() or self._key_problem():
            return
        done_path, vec_path = self.directory / "done.npy", self.directory / "vectors.npy"
        done_header = _header(done_path)
        if done_header is None or done_header[1:] != ((self.size,), np.dtype(np.uint8)):
            why = "is missing" if not done_path.exists() else "is unreadable"
            self._say(f"done.npy {why}; every row is embedded again")
            np.lib.format.open_memmap(done_path, mode="w+", dtype=np.uint8, shape=(self.size,)).flush()
        elif _extend(done_path, done_header[0] + self.size) is not None:
            self._say("done.npy is truncated; the rows past the cut are embedded again")
        vec_header = _header(vec_path)
        if vec_header is None or vec_header[1:] != ((self.size, self.dim), np.dtype(self.dtype)):
            return  # no row can be trusted: rebuilt whole
        row_bytes = self.dim * np.dtype(self.dtype).itemsize
        kept = _extend(vec_path, vec_header[0] + self.size * row_bytes)
        if kept is not None:
            whole = max(0, (kept - vec_header[0]) // row_bytes)
            done = np.load(done_path, mmap_mode="r+", allow_pickle=False)
            done[whole:] = 0
            done.flush()
            self._say(f"vectors.npy is truncated; its {whole} whole rows are kept, rows {whole} on are embedded "
                      "again")

    def _key_problem(self) -> str | None:
        """Why ``key.json`` does not describe this cache (None: it does)."""
        try:
            meta = json.loads((self.directory / "key.json").read_text(encoding="utf-8"))
            same = meta["key"] == json.loads(json.dumps(self.key)) and meta["size"] == self.size and \
                meta["dim"] == self.dim
        except FileNotFoundError:
            return "key.json is missing (a cache cut off while being created)"
        except (OSError, ValueError, KeyError, TypeError) as e:
            return f"key.json is unreadable ({type(e).__name__})"
        return None if same else "the folder holds another key or size"

    def _say(self, what: str) -> None:
        print(f"{self.directory}: {what}", file=sys.stderr)

    def _damage(self) -> str | None:
        """What is wrong with an existing cache folder (None: nothing, or no cache yet)."""
        if not self.directory.exists():
            return None
        problem = self._key_problem()
        if problem:
            return problem
        for name, shape in (("vectors.npy", (self.size, self.dim)), ("done.npy", (self.size,))):
            try:
                array = np.load(self.directory / name, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as e:
                return f"{name} is unreadable ({e})"
            if array.shape != shape:
                return f"{name} has shape {array.shape}, not {shape}"
        return None

    def missing(self, rows: np.ndarray) -> np.ndarray:
        """The rows (unique, sorted) not cached yet."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        marked = rows[self.done[rows] != 0]
        bad = marked[~_unit_rows(self.vectors, marked)]
        if len(bad) and not self._reported:
            self._reported = True
            self._say(f"{len(bad)} rows marked filled hold no unit vector (damaged); embedding them again")
        return np.union1d(rows[self.done[rows] == 0], bad)

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


def _header(path: Path) -> tuple[int, tuple[int, ...], np.dtype] | None:
    """(header length, shape, dtype) of a C-order ``.npy`` file; None when missing or unreadable."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            return (f.tell(), shape, dtype) if not fortran else None
    except (OSError, ValueError, EOFError):
        return None


def _extend(path: Path, size: int) -> int | None:
    """Grow a file cut short back to ``size`` bytes (the new bytes read as zeros); its old size, or None when
    it was not short."""
    have = path.stat().st_size
    if have >= size:
        return None
    os.truncate(path, size)
    return have


def _unit_rows(vectors: np.ndarray, rows: np.ndarray, tol: float = 1e-2, chunk: int = 4096) -> np.ndarray:
    """Which of ``rows`` hold a finite unit vector (read in chunks of rows)."""
    ok = np.ones(len(rows), dtype=bool)
    for start in range(0, len(rows), chunk):
        v = np.asarray(vectors[rows[start:start + chunk]], dtype=np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            norm = np.sqrt(np.square(v).sum(axis=1))
        ok[start:start + chunk] = np.isfinite(norm) & (np.abs(norm - 1) <= tol)
    return ok
