"""The retrieval corpus (txt, JSONL or an HF dataset), streamed once, then stored memory-mapped."""

from __future__ import annotations

import hashlib
import json
import mmap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import option
from ..core.errors import IncompleteArtifactError, InputError
from ..core.progress import progress
from ..storage.artifacts import (
    atomic_dir,
    describe_path,
    load_npy,
    read_json,
    read_json_object,
    require_file,
    save_npy,
    sha256_file,
    write_json,
)

CorpusId = int | str
FORMATS = ("auto", "txt", "jsonl", "hf")
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark (Windows editors write one): not part of the first text
_FILE_HINT = "a txt corpus (one sentence a line), a .jsonl file, or an HF dataset folder or id"


@dataclass
class CorpusOptions:
    """Where a stage's corpus comes from: the config fields the index build and SimCSE training share."""

    corpus: str = option("", help="txt (one sentence a line), .jsonl ({id, text}) or an HF dataset")
    corpus_format: str = option("auto", choices=FORMATS, help="auto = by file name")
    text_field: str = option("text", help="text field of a JSONL/HF corpus")

    def corpus_source(self, **more: Any) -> CorpusSource:
        """The corpus to read (``more``: the other :class:`CorpusSource` fields the stage has)."""
        return CorpusSource(path=self.corpus, format=self.corpus_format, text_field=self.text_field, **more)


@dataclass(frozen=True)
class CorpusSource:
    """Where a corpus comes from and how to read it."""

    path: str
    format: str = "auto"  # txt | jsonl | hf | auto (by extension; a folder or unknown name = hf)
    text_field: str = "text"
    id_field: str = "id"
    split: str = "train"  # hf only
    skip_blank_lines: bool = False  # txt only: skip instead of failing; ids stay line numbers

    def resolved_format(self) -> str:
        found = describe_path(self.path)
        if found not in ("a file", "a folder") and not found.startswith("not found"):
            # a FIFO or a device would be read forever (or taken for a hub id): say what it is
            raise InputError(f"this is {found}, not a corpus file ({_FILE_HINT})", path=self.path, field="corpus")
        if self.format != "auto":
            if self.format not in FORMATS:
                raise InputError(f"unknown corpus format '{self.format}', use one of {FORMATS}", field="format")
            return self.format
        suffixes = Path(self.path).suffixes
        if suffixes[-1:] in ([".jsonl"], [".json"]) or suffixes[-2:] == [".jsonl", ".gz"]:
            return "jsonl"
        if Path(self.path).is_file() or suffixes[-1:] == [".txt"]:
            return "txt"
        return "hf"  # a dataset folder or a hub id

    def fingerprint(self) -> str:
        """Fingerprint of the raw source (file SHA-256, or the dataset's own fingerprint)."""
        fmt = self.resolved_format()
        if fmt in ("txt", "jsonl"):
            require_file(self.path, "corpus file", hint=_FILE_HINT)
            return "sha256:" + sha256_file(self.path)
        from .hfdata import open_hf_dataset

        ds = open_hf_dataset(self.path, self.split)
        return f"hf:{self.path}:{self.split}:{ds._fingerprint}"


def _iter_txt(src: CorpusSource) -> Iterator[tuple[CorpusId, str]]:
    path = require_file(src.path, "corpus file", hint=_FILE_HINT)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f):
            raw = raw.rstrip(b"\n").rstrip(b"\r")
            if lineno == 0:
                raw = raw.removeprefix(BOM)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"undecodable bytes (not UTF-8) at byte {e.start} of the line",
                                 path=path, line=lineno + 1) from None
            if not text.strip():
                if src.skip_blank_lines:
                    continue
                raise InputError("blank or whitespace-only line (one sentence a line expected; "
                                 "set skip_blank_lines to skip such lines)", path=path, line=lineno + 1)
            yield lineno, text


def _iter_jsonl(src: CorpusSource) -> Iterator[tuple[CorpusId, str]]:
    path = require_file(src.path, "corpus file", hint=_FILE_HINT)
    opener = open
    if path.suffix == ".gz":
        import gzip
        opener = gzip.open
    with opener(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1:
                raw = raw.removeprefix(BOM)
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise InputError(f"not a JSON object ({e})", path=path, line=lineno) from None
            if not isinstance(obj, dict):
                raise InputError("not a JSON object", path=path, line=lineno)
            yield _record(obj, src, path, lineno, default_id=lineno - 1)


def _record(obj: dict[str, Any], src: CorpusSource, path: Any, lineno: int,
            default_id: int) -> tuple[CorpusId, str]:
    if src.text_field not in obj:
        raise InputError(f"missing text field (keys: {sorted(obj)})", path=path, line=lineno,
                         field=src.text_field)
    text = obj[src.text_field]
    if not isinstance(text, str) or not text.strip():
        raise InputError("empty or non-string text", path=path, line=lineno, field=src.text_field)
    cid = obj.get(src.id_field, default_id)
    if not isinstance(cid, (int, str)) or isinstance(cid, bool):
        raise InputError(f"id must be an int or a string, got {cid!r}", path=path, line=lineno,
                         field=src.id_field)
    return cid, text


def _iter_hf(src: CorpusSource) -> Iterator[tuple[CorpusId, str]]:
    from .hfdata import open_hf_dataset

    ds = open_hf_dataset(src.path, src.split)
    if src.text_field not in ds.column_names:
        raise InputError(f"column not found (columns: {ds.column_names})", path=src.path, field=src.text_field)
    has_id = src.id_field in ds.column_names
    for i, row in enumerate(ds):
        yield _record(row if has_id else {src.text_field: row[src.text_field]}, src, src.path, i, default_id=i)


def iter_corpus(src: CorpusSource) -> Iterator[tuple[CorpusId, str]]:
    """Stream ``(id, text)`` pairs from a source, validating every record."""
    fmt = src.resolved_format()
    return {"txt": _iter_txt, "jsonl": _iter_jsonl, "hf": _iter_hf}[fmt](src)


class CorpusStore:
    """Memory-mapped ``id -> text`` store of a corpus (positions 0..N-1, external ids kept)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.meta = read_json_object(self.directory / "corpus.json")
        self.offsets = load_npy(self.directory / "offsets.npy", mmap=True)
        n = int(self.meta["size"])
        if self.offsets.shape != (n + 1,):
            raise IncompleteArtifactError(f"{self.directory / 'offsets.npy'}: {self.offsets.shape[0]} offsets "
                                          f"for {n} texts: corrupted corpus store")
        texts_path = self.directory / "texts.bin"
        size = texts_path.stat().st_size if texts_path.exists() else -1
        if size != int(self.offsets[-1]):
            raise IncompleteArtifactError(f"{texts_path}: {size} bytes, offsets expect {int(self.offsets[-1])}: "
                                          "truncated or corrupted corpus store")
        self._file = open(texts_path, "rb")  # noqa: SIM115 (held open for the memory map; see close())
        self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else b""
        ids_path = self.directory / "ids.json"
        self._ids: list[CorpusId] | None = read_json(ids_path) if ids_path.exists() else None
        self._pos: dict[CorpusId, int] | None = None

    def __len__(self) -> int:
        return int(self.meta["size"])

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the stored content (ids and texts), independent of the source format."""
        return self.meta["content_sha256"]

    def text(self, pos: int) -> str:
        a, b = int(self.offsets[pos]), int(self.offsets[pos + 1])
        return self._mm[a:b].decode("utf-8")

    def texts(self, positions: Iterable[int]) -> list[str]:
        """Texts at the given positions (vectorised offset lookup)."""
        pos = np.asarray(list(positions) if not isinstance(positions, np.ndarray) else positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= len(self)):
            raise IndexError(f"corpus position out of range 0..{len(self) - 1}")
        starts, ends = self.offsets[pos], self.offsets[pos + 1]
        mm = self._mm
        return [mm[a:b].decode("utf-8") for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]

    def external_ids(self, positions: Sequence[int]) -> list[CorpusId]:
        if self._ids is None:
            return [int(p) for p in positions]
        return [self._ids[p] for p in positions]

    def position(self, cid: CorpusId) -> int:
        """Position of an external id."""
        if self._ids is None:
            if not isinstance(cid, int) or not 0 <= cid < len(self):
                raise KeyError(cid)
            return cid
        if self._pos is None:
            self._pos = {c: i for i, c in enumerate(self._ids)}
        return self._pos[cid]

    def close(self) -> None:
        if isinstance(self._mm, mmap.mmap):
            self._mm.close()
        self._file.close()


def build_store(src: CorpusSource, out_dir: str | Path, show_progress: bool = True,
                source_fingerprint: str | None = None) -> CorpusStore:
    """Stream ``src`` into a store at ``out_dir`` atomically, or reuse one there of the same source fingerprint."""
    out_dir = Path(out_dir)
    source_fp = source_fingerprint or src.fingerprint()
    if (out_dir / "corpus.json").exists():
        try:
            meta = read_json_object(out_dir / "corpus.json")
            if meta.get("source_fingerprint") == source_fp and meta.get("source", {}) == _source_meta(src):
                return CorpusStore(out_dir)
        except IncompleteArtifactError as e:
            print(f"{e}; rebuilding the corpus store")
    with atomic_dir(out_dir) as tmp:
        h = hashlib.sha256()
        offsets = [0]
        ids: list[CorpusId] = []
        identity = True
        seen: set[CorpusId] = set()
        with open(tmp / "texts.bin", "wb") as f:
            it = iter_corpus(src)
            for i, (cid, text) in enumerate(progress(it, desc=f"reading {Path(src.path).name}", unit=" texts",
                                                     disable=not show_progress)):
                if cid in seen:
                    raise InputError(f"duplicate corpus id {cid!r}", path=src.path, line=i + 1,
                                     field=src.id_field)
                seen.add(cid)
                data = text.encode("utf-8")
                f.write(data)
                offsets.append(offsets[-1] + len(data))
                ids.append(cid)
                identity = identity and cid == i
                h.update(f"{cid}\x00".encode())
                h.update(data)
                h.update(b"\n")
        if not ids:
            raise InputError("empty corpus: no texts found", path=src.path)
        save_npy(tmp / "offsets.npy", np.asarray(offsets, dtype=np.int64))
        if not identity:
            write_json(tmp / "ids.json", ids)
        write_json(tmp / "corpus.json", {
            "size": len(ids), "source": _source_meta(src), "source_fingerprint": source_fp,
            "content_sha256": h.hexdigest(), "ids": "positions" if identity else "ids.json",
        })
    return CorpusStore(out_dir)


def _source_meta(src: CorpusSource) -> dict[str, Any]:
    return {"path": str(Path(src.path).resolve()) if src.resolved_format() != "hf" or Path(src.path).exists()
            else src.path, "format": src.resolved_format(), "text_field": src.text_field,
            "id_field": src.id_field, "split": src.split, "skip_blank_lines": src.skip_blank_lines}
