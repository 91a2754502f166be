"""``build_index``: build, resume or confirm up to date the index folder an :class:`IndexConfig` describes.

The folder holds ``manifest.json`` (written last), ``corpus/``, the retriever's own files and, while building,
``.build/``. The build key: the retriever's name, the corpus's content and :meth:`Retriever.key_fields`."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from ..core.config import recorded_settings
from ..core.errors import IncompleteArtifactError, InputError, StaleArtifactError
from ..core.faults import fault_point
from ..core.registry import plug_in_key
from ..data.corpus import CorpusStore, build_store
from ..runtime.distributed import DistContext, init_distributed, main_computes
from ..storage.artifacts import (
    MANIFEST,
    describe_path,
    read_json,
    read_json_object,
    verify_files,
    write_json,
    write_manifest,
)
from ..storage.lock import locks_output
from ..storage.ownership import PART_CHECKS, check_own_folder
from .base import INDEX_KIND, RETRIEVERS, Retriever, get_retriever, load_builtin
from .config import IndexConfig

CORPUS_DIR = "corpus"
BUILD_DIR = ".build"
PLAN_FILE = "plan.json"


def own_parts() -> dict[str, tuple[tuple[str, ...], str]]:
    """The sub-folders build-index writes in an index folder (and so may replace), with what each is."""
    load_builtin()
    parts = {CORPUS_DIR: (("texts.bin", "offsets.npy", "corpus.json", "ids.json"), "an index's corpus store")}
    for cls in RETRIEVERS.values():
        parts.update(cls.parts)
    work = tuple(dict.fromkeys(p for cls in RETRIEVERS.values() for p in cls.work_files))
    parts[BUILD_DIR] = ((PLAN_FILE, *work), "a partial index build")
    return parts


def own_files() -> dict[str, str]:
    """The top-level files of every registered retriever (besides the manifest), with what each is."""
    load_builtin()
    return {name: what for cls in RETRIEVERS.values() for name, what in cls.files.items()}


def _build_key(retriever: Retriever, corpus_fp: str) -> str:
    """Identity of a build: what must match for finished shards or a finished index to be reused."""
    payload: dict[str, Any] = {"retriever": retriever.name, "corpus": corpus_fp, **retriever.key_fields(),
                               **plug_in_key(retriever)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@locks_output(kind=INDEX_KIND)
def build_index(cfg: IndexConfig, dist_ctx: DistContext | None = None) -> Path:
    """Build (or resume, or confirm up to date) the index described by ``cfg``; returns its folder."""
    cfg.validate()
    retriever = get_retriever(cfg)
    ctx = dist_ctx or init_distributed()
    out = Path(cfg.out)
    _check_own_parts(out)
    src = cfg.source()
    retriever.prepare()  # e.g. an encoder that cannot load is refused before anything is written

    # The corpus store is written once by rank 0; the other ranks wait and open it.
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if cfg.overwrite:  # --overwrite always rebuilds: nothing of an earlier build is reused
            _clear(out)
        _drop_unreadable_manifest(out)
        source_fp = src.fingerprint()
        _check_existing(out, cfg, retriever, source_fp)
        store = build_store(src, out / CORPUS_DIR, show_progress=cfg.show_progress, source_fingerprint=source_fp)
    ctx.barrier()
    if not ctx.is_main:
        store = CorpusStore(out / CORPUS_DIR)
    key = _build_key(retriever, store.fingerprint)

    # One decision for every rank (the main process's): up to date, or (re)build.
    if main_computes(ctx, lambda: _up_to_date(out, key, store)):
        if ctx.is_main:
            print(f"{out}: index is up to date (same corpus, encoder and settings; files verified); nothing to do")
        return out

    build_dir = out / BUILD_DIR
    if ctx.is_main:
        _start_plan(out, build_dir, key, len(store))
    ctx.barrier()
    files, fields = retriever.build(store, out, build_dir, ctx)
    if not ctx.is_main:
        return out

    manifest = {
        "kind": INDEX_KIND, "build_key": key, "retriever": cfg.retriever, "size": len(store),
        "corpus": {"source": store.meta["source"], "source_fingerprint": store.meta["source_fingerprint"],
                   "content_sha256": store.fingerprint, "size": len(store)},
        "files": files, "config": recorded_settings(cfg), **fields,
    }
    fault_point("index.manifest")
    write_manifest(out, manifest)
    shutil.rmtree(build_dir, ignore_errors=True)
    return out


def _start_plan(out: Path, build_dir: Path, key: str, size: int) -> None:
    """Unfinish the folder and record the build's key in ``.build/plan.json`` (another build's resume state dropped)."""
    (out / MANIFEST).unlink(missing_ok=True)
    plan_path = build_dir / PLAN_FILE
    if plan_path.exists() and read_json_object(plan_path).get("build_key") != key:
        shutil.rmtree(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    write_json(plan_path, {"build_key": key, "size": size})


def _check_own_parts(out: Path) -> None:
    """Refuse an output folder whose ``corpus/``, retriever parts or ``.build/`` is not what a build writes there:
    a build replaces only its own parts."""
    for sub, (patterns, what) in own_parts().items():
        check_own_folder(out / sub, patterns, what)
    for name, what in own_files().items():
        path = out / name
        if (path.exists() or path.is_symlink()) and (not path.is_file() or path.is_symlink()):
            raise InputError(f"{path} is {describe_path(path)}, not {what}; nothing was changed: choose another "
                             "output folder", field="out")


PART_CHECKS[INDEX_KIND] = lambda out, cfg: _check_own_parts(out)  # a folder pgra did not make: names the part


def _clear(out: Path) -> None:
    """Remove every part of an earlier index or partial build from ``out`` (for ``--overwrite``)."""
    (out / MANIFEST).unlink(missing_ok=True)
    for name in own_files():
        (out / name).unlink(missing_ok=True)
    for sub in own_parts():
        shutil.rmtree(out / sub, ignore_errors=True)


def _drop_unreadable_manifest(out: Path) -> None:
    """A manifest that is not valid JSON was cut off mid-write: drop it, so the folder counts as unfinished."""
    path = out / MANIFEST
    if path.exists():
        try:
            read_json(path)
        except IncompleteArtifactError as e:
            print(f"{e}; rebuilding the index")
            path.unlink()


def _up_to_date(out: Path, key: str, store: CorpusStore) -> bool:
    """Whether ``out`` holds a finished index of ``key`` whose files match its manifest (damaged: reported, False)."""
    if not (out / MANIFEST).exists():
        return False
    manifest = read_json_object(out / MANIFEST)
    if manifest.get("build_key") != key:
        return False
    try:
        verify_files(out, manifest.get("files", {}))
        if store.fingerprint != manifest["corpus"]["content_sha256"] or len(store) != manifest["size"]:
            raise IncompleteArtifactError(f"{out / CORPUS_DIR}: corpus store does not match the manifest")
    except IncompleteArtifactError as e:
        print(f"{e}; rebuilding the damaged index")
        (out / MANIFEST).unlink()
        return False
    return True


def _check_existing(out: Path, cfg: IndexConfig, retriever: Retriever, source_fp: str) -> None:
    """Refuse to silently replace a finished index, or mix a partial build, made with other inputs."""
    if cfg.overwrite:
        return
    manifest_path = out / MANIFEST
    plan_path = out / BUILD_DIR / PLAN_FILE
    if not manifest_path.exists() and not plan_path.exists():
        return
    store_meta_path = out / CORPUS_DIR / "corpus.json"
    store_meta = read_json_object(store_meta_path) if store_meta_path.exists() else {}
    corpus_fp = store_meta.get("content_sha256")
    if store_meta and store_meta.get("source_fingerprint") != source_fp:
        raise StaleArtifactError(
            f"{out} holds an index (or a partial build) of another corpus than {cfg.corpus}; "
            "choose another --out or pass --overwrite")
    key = _build_key(retriever, corpus_fp) if corpus_fp else None
    existing = read_json_object(manifest_path) if manifest_path.exists() else read_json_object(plan_path)
    if existing.get("build_key") != key:
        what = "an index" if manifest_path.exists() else "a partial build"
        raise StaleArtifactError(
            f"{out} holds {what} made with other settings (retriever, encoder, pooler, index type or BM25 "
            "parameters); choose another --out or pass --overwrite to replace it")


__all__ = ["BUILD_DIR", "CORPUS_DIR", "build_index", "own_files", "own_parts"]
