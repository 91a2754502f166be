"""Atomic writes, manifests and fingerprints shared by every stage.

An artifact directory is complete when its ``manifest.json`` exists: every stage writes its files first
(each one atomically: temp file + rename) and the manifest last, and removes the manifest before it
starts rewriting a directory, so a killed run never leaves a partial result that looks complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Collection, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .errors import IncompleteArtifactError, StaleArtifactError
from .faults import fault_point

MANIFEST = "manifest.json"
VERIFY_HASH_LIMIT = 256 << 20  # up-to-date checks hash files up to this size; larger ones are checked by size
_HASH_CHUNK = 1 << 22


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~_umask())  # mkstemp makes 0600; an artifact gets the user's usual permissions
    try:
        yield tmp_path
        fault_point(f"write:{path.name}")  # tests: killed with the file written but not yet in place
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; it replaces ``target`` only if the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(0o777 & ~_umask())
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line; bad JSON or a non-object names the file and line."""
    from .errors import InputError

    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", path=path)
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON ({e})", path=path, line=line_no) from None
            if not isinstance(obj, dict):
                raise InputError("expected a JSON object", path=path, line=line_no)
            yield line_no, obj


def write_json(path: str | Path, obj: Any) -> None:
    """Write JSON atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")


def write_text(path: str | Path, text: str) -> None:
    """Write a UTF-8 text file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def save_npy(path: str | Path, array: np.ndarray) -> None:
    """Save a numpy array atomically (never pickled)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


def load_npy(path: str | Path, mmap: bool = False) -> np.ndarray:
    """Load a numpy array without unpickling; a truncated or corrupted file is an IncompleteArtifactError."""
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise IncompleteArtifactError(f"{path}: file is missing") from None
    except (ValueError, OSError, EOFError) as e:
        raise IncompleteArtifactError(f"{path}: unreadable or truncated array ({e})") from None


def read_json(path: str | Path) -> Any:
    """Read a JSON file, naming the file in any error."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IncompleteArtifactError(f"{path}: file is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IncompleteArtifactError(f"{path}: corrupted JSON ({e})") from None


def sha256_file(path: str | Path) -> str:
    """Full SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_fingerprint(name_or_path: str) -> str:
    """Identify a model's weights and tokenizer.

    A local folder: SHA-256 over its config and tokenizer files, plus for each weight file its size and the
    hashes of its first and last MiB (hashing 26 GB of OPT-13b on every run would cost minutes; a changed
    checkpoint changes its size or its header/tail in practice). A hub id: the id itself (the hub's commit
    is recorded separately by the stage when it is known).
    """
    path = Path(name_or_path)
    if not path.is_dir():
        return f"hub:{name_or_path}"
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path).as_posix()
        if rel.startswith(".") or "/." in rel or rel.endswith(".md"):
            continue
        h.update(rel.encode())
        size = f.stat().st_size
        if f.suffix in {".safetensors", ".bin", ".pt", ".gguf", ".h5", ".msgpack", ".onnx"}:
            h.update(str(size).encode())
            with open(f, "rb") as fh:
                h.update(fh.read(1 << 20))
                if size > 2 << 20:
                    fh.seek(-(1 << 20), os.SEEK_END)
                    h.update(fh.read())
        else:
            h.update(f.read_bytes())
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose behaviour shapes the artifacts."""
    out = {"python": platform.python_version()}
    for name in ("pgra", "torch", "transformers", "accelerate", "faiss-cpu", "faiss-gpu-cu12", "bm25s",
                 "numpy", "datasets"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def source_commit() -> str | None:
    """The git commit of the pgra source in use (``+dirty`` when it has uncommitted changes), or None."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def write_manifest(directory: str | Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` (last step of a stage) with library versions added."""
    manifest = dict(manifest)
    manifest.setdefault("versions", library_versions())
    write_json(Path(directory) / MANIFEST, manifest)


def read_manifest(directory: str | Path, kinds: str | Collection[str]) -> dict[str, Any]:
    """Read a complete artifact's manifest, refusing partial directories and kinds other than ``kinds``."""
    directory = Path(directory)
    accepted = [kinds] if isinstance(kinds, str) else list(kinds)
    what = " or ".join(accepted)
    if not directory.is_dir():
        raise IncompleteArtifactError(f"{directory}: no such {what} directory")
    path = directory / MANIFEST
    if not path.exists():
        raise IncompleteArtifactError(
            f"{directory}: no {MANIFEST}; this {what} was never finished (interrupted run?). "
            f"Re-run the command that builds it to resume or rebuild it.")
    manifest = read_json(path)
    if manifest.get("kind") not in accepted:
        wanted = "a " + " or a ".join(f"'{k}'" for k in accepted)
        raise StaleArtifactError(f"{path}: this is a '{manifest.get('kind')}' artifact, not {wanted}")
    files = manifest.get("files")
    if isinstance(files, dict):  # sizes only: cheap enough for every load (stages hash where they reuse)
        verify_files(directory, files, hash_limit=-1)
    return manifest


def file_record(path: str | Path, hash_limit: int | None = None) -> dict[str, Any]:
    """Size and SHA-256 of an artifact file, stored in the manifest and checked on load (the size alone for a
    file over ``hash_limit`` bytes, when one is given)."""
    path = Path(path)
    size = path.stat().st_size
    if hash_limit is not None and size > hash_limit:
        return {"size": size}
    return {"size": size, "sha256": sha256_file(path)}


def verify_file(directory: str | Path, name: str, record: dict[str, Any], full: bool = True) -> Path:
    """Check an artifact file against its manifest record (size always, SHA-256 when ``full``)."""
    path = Path(directory) / name
    if not path.exists():
        raise IncompleteArtifactError(f"{path}: file listed in the manifest is missing")
    size = path.stat().st_size
    if size != record["size"]:
        raise IncompleteArtifactError(
            f"{path}: size {size} bytes, the manifest says {record['size']}: truncated or replaced file")
    if full and sha256_file(path) != record["sha256"]:
        raise IncompleteArtifactError(f"{path}: checksum does not match the manifest: corrupted file")
    return path


def verify_files(directory: str | Path, records: dict[str, dict[str, Any]],
                 hash_limit: int = VERIFY_HASH_LIMIT) -> None:
    """The cheap check of a finished artifact before a stage reuses it: every file's size, and the SHA-256
    of those up to ``hash_limit`` bytes (an IncompleteArtifactError names the first damaged file)."""
    for name, record in records.items():
        if not isinstance(record, dict) or "size" not in record:
            continue
        verify_file(directory, name, record, full="sha256" in record and record["size"] <= hash_limit)
