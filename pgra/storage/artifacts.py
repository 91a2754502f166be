"""Atomic writes, manifests and fingerprints shared by every stage.

A folder is complete when its ``manifest.json`` exists: files are written first (each atomically), the manifest
last, and it is removed before a folder is rewritten, so a killed run never looks complete."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import IncompleteArtifactError, InputError, StaleArtifactError, clip, shorten
from ..core.faults import fault_point

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
        if tmp_path.exists():  # a library may have replaced the file with its own (safetensors writes 0600)
            apply_umask(tmp_path)
        fault_point(f"write:{path.name}")  # tests: killed with the file written but not yet in place
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a temporary folder that replaces ``target`` (not a link) only if the block succeeds."""
    target = Path(target)
    refuse_link(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(0o777 & ~_umask())
    try:
        yield tmp
        apply_umask(tmp)  # what libraries wrote inside (save_pretrained's 0600 safetensors) gets the umask too
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def refuse_link(folder: Path, field: str | None = None) -> None:
    """An InputError when ``folder`` is a symbolic link: a folder pgra replaces whole is never a link."""
    if folder.is_symlink():
        raise InputError(f"{folder} is a symbolic link (to {shorten(os.readlink(folder))}); pgra replaces this folder "
                         "whole and does not replace a link: give the folder itself", field=field)


def apply_umask(path: str | Path) -> None:
    """Give ``path`` (and all under it) the permissions of the umask, not a library's 0600 (keeping exec bits)."""
    mask = _umask()
    path = Path(path)
    todo = [path]
    todo += list(path.rglob("*")) if path.is_dir() and not path.is_symlink() else []
    for p in todo:
        if p.is_symlink():
            continue
        mode = p.stat().st_mode
        if stat.S_ISDIR(mode):
            p.chmod(0o777 & ~mask)
        elif stat.S_ISREG(mode):
            p.chmod((0o777 if mode & 0o111 else 0o666) & ~mask)


# ---------------------------------------------------------------- what an input or output path is

def describe_path(path: str | Path) -> str:
    """What is at ``path``, for an error: ``a file``, ``a folder``, ``a FIFO (named pipe)`` ... ``not found``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "not found"
    except NotADirectoryError:
        return "not found (a folder above it is a file)"
    except OSError as e:
        return f"not accessible ({e.strerror})"
    except ValueError:  # a NUL character: no file system has such a name
        return "not found (the name holds a NUL character)"
    for test, what in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


def require_file(path: str | Path, what: str = "file", field: str | None = None, hint: str = "") -> Path:
    """``path`` if it is a regular file; else an InputError saying what it is (a FIFO would be read forever)."""
    path = Path(path)
    found = describe_path(path)
    if found == "a file":
        return path
    said = f"{what} {found}" if found.startswith("not ") else f"this is {found}, not a {what}"
    raise InputError(said + (f" ({hint})" if hint else ""), path=path, field=field)


def read_utf8(path: str | Path, what: str = "file", field: str | None = None) -> str:
    """The text of the regular file ``path`` (UTF-8, BOM dropped); other bytes: an InputError naming file and line."""
    path = require_file(path, what, field=field)
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        at = e.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        raise InputError(f"undecodable bytes (not UTF-8) at byte {at}: save the {what} as UTF-8", path=path,
                         line=raw[:at].count(b"\n") + 1, field=field) from None


SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")  # one path component pgra names (safe_name)


def safe_name(name: str, field: str = "name", source: str | Path | None = None, what: str = "a name") -> str:
    """``name`` if it can be one path component pgra writes (:data:`SAFE_NAME`, <= 100 characters), else InputError."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name) or len(name) > 100:
        raise InputError(f"{what} {shorten(name)} cannot be used as a folder name: use letters, digits, '-', '_' "
                         "and '.' (not first), at most 100 characters", path=source, field=field)
    return name


def path_under(root: str | Path, *parts: str) -> Path:
    """``root / parts...``, proved to stay inside ``root`` once resolved (links included); else an InputError."""
    root = Path(root)
    path = root.joinpath(*parts)
    if not path.resolve().is_relative_to(root.resolve()):
        raise InputError(f"{path} would lie outside {root}", path=root)
    return path


def _values(value: Any) -> Iterator[str]:
    if isinstance(value, (str, Path)):
        if str(value):
            yield str(value)
    elif isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        for v in value:
            yield from _values(v)


def check_disjoint(outputs: Mapping[str, Any], inputs: Mapping[str, Any], may_hold: Collection[str] = ()) -> None:
    """The one check that no output folder is, holds or lies inside an existing input (``may_hold``: may lie in)."""
    for out_field, out in outputs.items():
        for out_value in _values(out):
            o = Path(out_value).expanduser().resolve()
            for in_field, value in inputs.items():
                for in_value in _values(value):
                    p = Path(in_value).expanduser()
                    if not (p.exists() or p.is_symlink()):
                        continue
                    i = p.resolve()
                    if i == o:
                        how = "is"
                    elif i.is_relative_to(o):
                        how = "holds"
                    elif o.is_relative_to(i) and in_field not in may_hold:
                        how = "lies inside"
                    else:
                        continue
                    raise InputError(f"{out_value} {how} the input {in_value} (field '{in_field}'); an output may "
                                     "not be, hold or lie inside an input, which writing it would change or "
                                     "delete: choose an output folder apart from every input", field=out_field)


def _manifest_head(kind: str) -> bytes:
    """How a manifest of ``kind`` begins on disk (write_manifest puts ``kind`` first)."""
    return json.dumps({"kind": kind}, indent=2).encode()[:-2]


def claim_output(out: str | Path, kinds: str | Collection[str], field: str = "out") -> None:
    """Refuse to write into ``out`` unless its ``manifest.json`` is one of ``kinds`` (or cut off mid-write)."""
    accepted = [kinds] if isinstance(kinds, str) else list(kinds)
    path = Path(out) / MANIFEST
    if not (path.exists() or path.is_symlink()):
        return
    what = " or ".join(f"'{k}'" for k in accepted)
    if not path.is_file() or path.is_symlink():
        raise InputError(f"{path} is {describe_path(path)}, not a manifest pgra wrote, so {out} is not a folder "
                         f"of this stage ({what}): choose another output folder", field=field)
    raw = path.read_bytes()
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        heads = [_manifest_head(k) for k in accepted]
        if any(raw.startswith(h) or h.startswith(raw) for h in heads):
            return  # our own manifest, cut off mid-write: the stage drops it and rebuilds
        raise InputError(f"{path} is not a manifest pgra wrote (not JSON), so {out} is not a folder of this "
                         f"stage ({what}); nothing was changed: choose another output folder", field=field) from None
    if isinstance(manifest, dict) and manifest.get("kind") in accepted:
        return
    if isinstance(manifest, dict):
        found = f"a {shorten(manifest.get('kind'), 60)} artifact" if "kind" in manifest else \
            "a manifest.json pgra did not write"
    else:
        found = f"a manifest.json that is not a JSON object ({type(manifest).__name__})"
    raise InputError(f"{out} holds {found} (this stage writes {what} artifacts); writing there would replace "
                     "it: choose another output folder", field=field)


def verify_safetensors(folder: str | Path) -> None:
    """Check every ``*.safetensors`` file in ``folder`` against its own header: a truncated one is refused."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        size = path.stat().st_size
        try:
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                if size < 8 or n <= 0 or 8 + n > size:
                    raise ValueError(f"its header claims {n} bytes")
                header = json.loads(f.read(n).decode("utf-8"))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, AttributeError) as e:
            raise IncompleteArtifactError(f"{path}: unreadable weights file ({e}): truncated or corrupted; train "
                                          "the run again (a re-run resumes from its last checkpoint)") from None
        if 8 + n + end != size:
            raise IncompleteArtifactError(f"{path}: {size} bytes, its header says {8 + n + end}: truncated or "
                                          "corrupted weights; train the run again (a re-run resumes from its "
                                          "last checkpoint)")


def verify_run(run: str | Path) -> None:
    """Before a finished run's model loads: its manifest is a JSON object, and its weights are whole."""
    run = Path(run)
    if (run / MANIFEST).is_file():
        read_json_object(run / MANIFEST)
    for folder in (run, run / "best"):
        if folder.is_dir():
            verify_safetensors(folder)


def _loads(text: str | bytes) -> Any:
    """``json.loads`` of untrusted text, every way it fails a ValueError (bad JSON, not UTF-8, too deep)."""
    try:
        return json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_json(text: str | bytes, path: str | Path, line: int | None = None) -> Any:
    """One JSON document of user input; anything unreadable is an InputError naming the file (and line)."""
    try:
        return _loads(text)
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text ({e.reason} at byte {e.start})", path=path, line=line) from None
    except ValueError as e:
        raise InputError(f"invalid JSON ({clip(str(e))})", path=path, line=line) from None


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` per non-blank line; bad JSON, bytes or a non-object name the file and line."""
    path = require_file(path)
    with open(path, "rb") as f:  # decoded line by line: a byte that is not UTF-8 is named with its line
        for line_no, raw in enumerate(f, start=1):
            try:  # a UTF-8 byte order mark is not part of the first line
                line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"undecodable bytes (not UTF-8) at byte {e.start} of the line", path=path,
                                 line=line_no) from None
            if not line.strip():
                continue
            obj = parse_json(line, path, line_no)
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
    """Read a JSON file as :func:`parse_json` reads (nothing it holds is a traceback), naming the file."""
    path = Path(path)
    try:
        return _loads(path.read_bytes())
    except FileNotFoundError:
        raise IncompleteArtifactError(f"{path}: file is missing") from None
    except ValueError as e:
        raise IncompleteArtifactError(f"{path}: corrupted JSON ({clip(str(e))})") from None


def read_json_object(path: str | Path) -> dict[str, Any]:
    """Read a JSON file that must hold an object (another shape: an IncompleteArtifactError naming the file)."""
    obj = read_json(path)
    if not isinstance(obj, dict):
        raise IncompleteArtifactError(f"{path}: holds a JSON {type(obj).__name__}, not an object: not a manifest "
                                      "pgra wrote (replaced or corrupted); rebuild it with the command that "
                                      "made it")
    return obj


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
    """A model's identity: for a folder, SHA-256 of its config, tokenizer and each weight file's size and ends."""
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


def model_location(name: str) -> str:
    """A local model folder's resolved path, else ``name`` (a hub id)."""
    return str(Path(name).resolve()) if Path(name).is_dir() else name


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

    root = Path(__file__).resolve().parents[2]  # pgra/<room>/<module>.py
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        if Path(top).resolve() != root:  # pgra installed in a venv inside another project: not pgra's commit
            return None
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
    manifest = read_json_object(path)
    if manifest.get("kind") not in accepted:
        wanted = "a " + " or a ".join(f"'{k}'" for k in accepted)
        raise StaleArtifactError(f"{path}: this is a '{manifest.get('kind')}' artifact, not {wanted}")
    files = manifest.get("files")
    if isinstance(files, dict):  # sizes only: cheap enough for every load (stages hash where they reuse)
        verify_files(directory, files, hash_limit=-1)
    return manifest


def file_record(path: str | Path, hash_limit: int | None = None) -> dict[str, Any]:
    """Size and SHA-256 of an artifact file, as its manifest records it (the size alone past ``hash_limit``)."""
    path = Path(path)
    size = path.stat().st_size
    if hash_limit is not None and size > hash_limit:
        return {"size": size}
    return {"size": size, "sha256": sha256_file(path)}


def own_file_name(directory: str | Path, name: object) -> Path:
    """``directory / name`` for a file a manifest lists; a name outside the folder is an InputError."""
    text = name if isinstance(name, str) else ""
    parts = Path(text).parts
    if not text or "\0" in text or Path(text).is_absolute() or ".." in parts or not parts:
        raise InputError(f"lists the file {shorten(name)}, which is not inside its folder: an artifact lists only its "
                         "own files (edited or forged manifest?)", path=Path(directory) / MANIFEST, field="files")
    return Path(directory) / text


def verify_file(directory: str | Path, name: str, record: dict[str, Any], full: bool = True) -> Path:
    """Check an artifact file inside ``directory`` against its record (size; SHA-256 when ``full``)."""
    path = own_file_name(directory, name)
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
    """Check a finished artifact before reuse: every file's size, and the SHA-256 of those up to ``hash_limit``."""
    for name, record in records.items():
        if not isinstance(record, dict) or "size" not in record:
            continue
        verify_file(directory, name, record, full="sha256" in record and record["size"] <= hash_limit)
