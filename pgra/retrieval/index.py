"""Build, load and search a first-stage index: ``manifest.json`` + a corpus store + dense or BM25 arrays.

Layout of an index folder::

    manifest.json      written last: retriever, encoder + fingerprint, pooler, dim, corpus fingerprints, versions
    corpus/            memory-mapped copy of the corpus (texts.bin, offsets.npy, corpus.json[, ids.json])
    index.faiss        dense: the faiss index (positions 0..N-1)
    bm25/              bm25: term-by-document weights (npy) + vocab.json
    .build/            only while building: plan.json + one embedding shard per finished chunk (resume state)

Dense builds are split in fixed shards of ``shard_size`` texts; a killed build resumes from the finished
shards, and ``torchrun``/``accelerate launch`` ranks encode shards round-robin before rank 0 merges them, so
the index is the same for any number of processes and any number of interruptions.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import choices
from ..artifacts import (
    MANIFEST,
    atomic_path,
    check_own_folder,
    describe_path,
    file_record,
    load_npy,
    model_fingerprint,
    read_json,
    read_json_object,
    read_manifest,
    save_npy,
    verify_file,
    verify_files,
    write_json,
    write_manifest,
)
from ..config import check_config, option
from ..corpus import CorpusSource, CorpusStore, build_store
from ..distributed import DistContext, init_distributed, main_computes
from ..errors import IncompleteArtifactError, InputError, StaleArtifactError
from ..faults import fault_point
from ..loading import remote_code_allowed
from ..lock import locks_output
from ..progress import progress
from .bm25 import BM25Config, BM25Index
from .dense import INDEX_TYPES, FaissParams, build_faiss, load_faiss, save_faiss, search_faiss
from .encoder import POOLERS, DenseEncoder

INDEX_KIND = "index"
# what build-index writes inside its folder (and so may replace): anything else there is the user's
OWN_PARTS = {"corpus": ("texts.bin", "offsets.npy", "corpus.json", "ids.json"),
             "bm25": ("*.npy", "*.json"), ".build": ("plan.json", "emb_*.npy")}


@dataclass
class DenseConfig:
    """A dense retriever (``dense.*`` keys of a build-index config)."""

    encoder: str = option("bert-base-uncased", flag="--encoder", help="HF encoder name or local folder")
    pooler: str = option("cls", flag="--pooler", choices=choices.poolers,
                         help="cls = pooler_output (the paper's BERT), cls_before_pooler (SimCSE), mean")
    max_length: int = option(512, flag="--max-length", min=1, help="tokens per sentence")
    batch_size: int = option(64, flag="--batch-size", min=1, help="sentences per encoder batch")
    index_type: str = option("flat", flag="--index-type", choices=choices.index_types,
                             help="flat = exact cosine (the paper's); ivf / hnsw approximate")
    faiss: FaissParams = field(default_factory=FaissParams)
    device: str = option("auto", flag="--device", help="auto, cpu, cuda, cuda:1 ...")
    dtype: str = option("auto", choices=choices.DTYPES, help="auto = bf16/fp16 on GPU, fp32 on CPU")
    shard_size: int = option(65536, flag="--shard-size", min=1, help="texts per resumable shard")
    use_gpu_faiss: bool = option(True, help="train/search faiss on the GPU when faiss-gpu is installed")
    trust_remote_code: bool = option(False, help="allow the encoder's own code (off: never run hub code)")


@dataclass
class IndexConfig:
    """Everything ``pgra build-index`` needs (YAML in ``configs/``; CLI flags override)."""

    corpus: str = option("", help="txt (one sentence a line), .jsonl ({id, text}) or an HF dataset")
    corpus_format: str = option("auto", choices=("auto", "txt", "jsonl", "hf"), help="auto = by file name")
    text_field: str = option("text", help="text field of a JSONL/HF corpus")
    id_field: str = option("id", help="id field of a JSONL/HF corpus")
    split: str = option("train", help="split of an HF dataset corpus")
    skip_blank_lines: bool = option(False, help="skip blank lines of a txt corpus (ids stay line numbers)")
    out: str = option("", help="index folder to write")
    retriever: str = option("dense", choices=("dense", "bm25"), help="a dense encoder + faiss, or BM25")
    dense: DenseConfig = field(default_factory=DenseConfig)
    bm25: BM25Config = field(default_factory=BM25Config)
    overwrite: bool = option(False, help="replace an index or partial build made with other inputs")
    show_progress: bool = option(True, help="progress bars (a line every 30 s in a log)")

    def source(self) -> CorpusSource:
        return CorpusSource(path=self.corpus, format=self.corpus_format, text_field=self.text_field,
                            id_field=self.id_field, split=self.split, skip_blank_lines=self.skip_blank_lines)

    def validate(self) -> None:
        check_config(self)
        if not self.corpus:
            raise InputError("no corpus given (--corpus)", field="corpus")
        if not self.out:
            raise InputError("no output folder given (--out)", field="out")
        if self.retriever not in ("dense", "bm25"):
            raise InputError(f"unknown retriever '{self.retriever}', use dense or bm25", field="retriever")
        if self.retriever == "dense":
            if self.dense.pooler not in POOLERS:
                raise InputError(f"unknown pooler '{self.dense.pooler}', use one of {POOLERS}", field="pooler")
            if self.dense.index_type not in INDEX_TYPES:
                raise InputError(f"unknown index type '{self.dense.index_type}', use one of {INDEX_TYPES}",
                                 field="index_type")
            if self.dense.shard_size < 1:
                raise InputError("shard_size must be positive", field="dense.shard_size")


def _encoder_path(name: str) -> str:
    p = Path(name)
    return str(p.resolve()) if p.is_dir() else name


def _build_key(cfg: IndexConfig, corpus_fp: str, encoder_fp: str | None) -> str:
    """Identity of a build: what must match for finished shards or a finished index to be reused."""
    payload: dict[str, Any] = {"retriever": cfg.retriever, "corpus": corpus_fp}
    if cfg.retriever == "dense":
        d = cfg.dense
        payload.update(encoder=encoder_fp, pooler=d.pooler, max_length=d.max_length, index_type=d.index_type,
                       shard_size=d.shard_size, faiss=asdict(d.faiss), dtype=d.dtype)
    else:
        payload.update(bm25={k: v for k, v in asdict(cfg.bm25).items() if k != "query_batch_size"})
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@locks_output(kind=INDEX_KIND)
def build_index(cfg: IndexConfig, dist_ctx: DistContext | None = None) -> Path:
    """Build (or resume, or confirm up to date) the index described by ``cfg``; returns its folder."""
    cfg.validate()
    ctx = dist_ctx or init_distributed()
    out = Path(cfg.out)
    _check_own_parts(out)
    src = cfg.source()
    encoder_fp = None
    if cfg.retriever == "dense":  # an encoder that cannot load is refused before anything is written
        from transformers import AutoConfig

        from ..loading import load_pretrained

        load_pretrained(AutoConfig, cfg.dense.encoder, "encoder", "encoder",
                        trust_remote_code=cfg.dense.trust_remote_code)
        encoder_fp = model_fingerprint(cfg.dense.encoder)

    # The corpus store is written once by rank 0; the other ranks wait and open it.
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if cfg.overwrite:  # --overwrite always rebuilds: nothing of an earlier build is reused
            _clear(out)
        _drop_unreadable_manifest(out)
        source_fp = src.fingerprint()
        _check_existing(out, cfg, source_fp, encoder_fp)
        store = build_store(src, out / "corpus", show_progress=cfg.show_progress, source_fingerprint=source_fp)
    ctx.barrier()
    if not ctx.is_main:
        store = CorpusStore(out / "corpus")
    key = _build_key(cfg, store.fingerprint, encoder_fp)

    # One decision for every rank (the main process's): up to date, or (re)build.
    if main_computes(ctx, lambda: _up_to_date(out, key, store)):
        if ctx.is_main:
            print(f"{out}: index is up to date (same corpus, encoder and settings; files verified); nothing to do")
        return out

    build_dir = out / ".build"
    if ctx.is_main:
        (out / MANIFEST).unlink(missing_ok=True)
        plan_path = build_dir / "plan.json"
        if plan_path.exists() and read_json_object(plan_path).get("build_key") != key:
            shutil.rmtree(build_dir)  # a partial build of other settings; _check_existing allowed it
        build_dir.mkdir(parents=True, exist_ok=True)
        write_json(plan_path, {"build_key": key, "size": len(store)})
    ctx.barrier()

    if cfg.retriever == "dense":
        _encode_shards(cfg, store, build_dir, ctx)
        ctx.barrier()
        if ctx.is_main:
            files = _merge_dense(cfg, store, build_dir, out)
    elif ctx.is_main:
        files = _build_bm25(cfg, store, out)
    if not ctx.is_main:
        return out

    manifest = {
        "kind": INDEX_KIND, "build_key": key, "retriever": cfg.retriever, "size": len(store),
        "corpus": {"source": store.meta["source"], "source_fingerprint": store.meta["source_fingerprint"],
                   "content_sha256": store.fingerprint, "size": len(store)},
        "files": files, "config": asdict(cfg),
    }
    if cfg.retriever == "dense":
        manifest.update(encoder=_encoder_path(cfg.dense.encoder), encoder_fingerprint=encoder_fp,
                        pooler=cfg.dense.pooler, max_length=cfg.dense.max_length,
                        index_type=cfg.dense.index_type, dim=files.pop("_dim"))
    else:
        manifest.update(bm25=asdict(cfg.bm25))
    fault_point("index.manifest")
    write_manifest(out, manifest)
    shutil.rmtree(build_dir, ignore_errors=True)
    return out


def _check_own_parts(out: Path) -> None:
    """Refuse an output folder whose ``corpus/``, ``bm25/``, ``.build/`` or ``index.faiss`` is not what an index
    build writes there (a user's own ``corpus/`` folder beside the corpus file): a build replaces only its own
    parts. (Its manifest is checked by the lock: :func:`pgra.artifacts.claim_output`.)"""
    what = {"corpus": "an index's corpus store", "bm25": "an index's BM25 arrays", ".build": "a partial index build"}
    for sub, patterns in OWN_PARTS.items():
        check_own_folder(out / sub, patterns, what[sub])
    faiss_file = out / "index.faiss"
    if (faiss_file.exists() or faiss_file.is_symlink()) and (not faiss_file.is_file() or faiss_file.is_symlink()):
        raise InputError(f"{faiss_file} is {describe_path(faiss_file)}, not an index's faiss file; nothing was "
                         "changed: choose another output folder", field="out")


def _clear(out: Path) -> None:
    """Remove every part of an earlier index or partial build from ``out`` (for ``--overwrite``)."""
    (out / MANIFEST).unlink(missing_ok=True)
    (out / "index.faiss").unlink(missing_ok=True)
    for sub in (".build", "corpus", "bm25"):
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
    """Whether ``out`` holds a finished index of ``key`` whose files match its manifest (sizes, and checksums
    of files up to VERIFY_HASH_LIMIT); a damaged index is reported and counts as not built."""
    if not (out / MANIFEST).exists():
        return False
    manifest = read_json_object(out / MANIFEST)
    if manifest.get("build_key") != key:
        return False
    try:
        verify_files(out, manifest.get("files", {}))
        if store.fingerprint != manifest["corpus"]["content_sha256"] or len(store) != manifest["size"]:
            raise IncompleteArtifactError(f"{out / 'corpus'}: corpus store does not match the manifest")
    except IncompleteArtifactError as e:
        print(f"{e}; rebuilding the damaged index")
        (out / MANIFEST).unlink()
        return False
    return True


def _check_existing(out: Path, cfg: IndexConfig, source_fp: str, encoder_fp: str | None) -> None:
    """Refuse to silently replace a finished index, or mix a partial build, made with other inputs."""
    if cfg.overwrite:
        return
    manifest_path = out / MANIFEST
    plan_path = out / ".build" / "plan.json"
    if not manifest_path.exists() and not plan_path.exists():
        return
    store_meta_path = out / "corpus" / "corpus.json"
    store_meta = read_json_object(store_meta_path) if store_meta_path.exists() else {}
    corpus_fp = store_meta.get("content_sha256")
    if store_meta and store_meta.get("source_fingerprint") != source_fp:
        raise StaleArtifactError(
            f"{out} holds an index (or a partial build) of another corpus than {cfg.corpus}; "
            "choose another --out or pass --overwrite")
    key = _build_key(cfg, corpus_fp, encoder_fp) if corpus_fp else None
    existing = read_json_object(manifest_path) if manifest_path.exists() else read_json_object(plan_path)
    if existing.get("build_key") != key:
        what = "an index" if manifest_path.exists() else "a partial build"
        raise StaleArtifactError(
            f"{out} holds {what} made with other settings (retriever, encoder, pooler, index type or BM25 "
            "parameters); choose another --out or pass --overwrite to replace it")


def _shard_path(build_dir: Path, i: int) -> Path:
    return build_dir / f"emb_{i:05d}.npy"


def _encode_shards(cfg: IndexConfig, store: CorpusStore, build_dir: Path, ctx: DistContext) -> None:
    d = cfg.dense
    n = len(store)
    n_shards = (n + d.shard_size - 1) // d.shard_size
    todo = []
    for i in ctx.shard(n_shards):
        rows = min(d.shard_size, n - i * d.shard_size)
        path = _shard_path(build_dir, i)
        if path.exists():
            try:
                if load_npy(path, mmap=True).shape[0] == rows:
                    continue
            except IncompleteArtifactError:
                pass
        todo.append(i)
    if not todo:
        return
    encoder = DenseEncoder(d.encoder, pooler=d.pooler, max_length=d.max_length, batch_size=d.batch_size,
                           device=d.device, dtype=d.dtype, trust_remote_code=d.trust_remote_code)
    show = cfg.show_progress and ctx.is_main
    bar = progress(total=sum(min(d.shard_size, n - i * d.shard_size) for i in todo), desc="encoding corpus",
                   unit=" texts", disable=not show)
    for i in todo:
        start = i * d.shard_size
        texts = store.texts(range(start, min(n, start + d.shard_size)))
        save_npy(_shard_path(build_dir, i), encoder.encode(texts))
        fault_point("index.shard")
        bar.update(len(texts))
    bar.close()


def _merge_dense(cfg: IndexConfig, store: CorpusStore, build_dir: Path, out: Path) -> dict[str, Any]:
    d = cfg.dense
    n = len(store)
    n_shards = (n + d.shard_size - 1) // d.shard_size
    vectors = np.concatenate([load_npy(_shard_path(build_dir, i)) for i in range(n_shards)])
    if vectors.shape[0] != n:
        raise IncompleteArtifactError(f"{build_dir}: shards hold {vectors.shape[0]} vectors for {n} texts")
    if cfg.show_progress:
        print(f"building faiss '{d.index_type}' index over {n} x {vectors.shape[1]} vectors")
    index = build_faiss(vectors, d.index_type, d.faiss, use_gpu=d.use_gpu_faiss)
    with atomic_path(out / "index.faiss") as tmp:
        save_faiss(index, tmp)
    return {"index.faiss": file_record(out / "index.faiss"), "_dim": int(vectors.shape[1])}


def _build_bm25(cfg: IndexConfig, store: CorpusStore, out: Path) -> dict[str, Any]:
    n = len(store)
    texts = (store.text(i) for i in range(n))
    bm25 = BM25Index.build(texts, cfg.bm25, show_progress=cfg.show_progress)
    shutil.rmtree(out / "bm25", ignore_errors=True)
    bm25.save(out / "bm25")
    return {f"bm25/{p.name}": file_record(p) for p in sorted((out / "bm25").iterdir())}


class Index:
    """A loaded first-stage index: ``search(texts, k)`` returns corpus positions and scores.

    Checked on load against its manifest (files, encoder, corpus). The encoder runs code of its own only when
    the caller passes ``trust_remote_code=True``: the manifest's ``trust_remote_code`` never allows it (an index
    is a shared file), and an encoder with code of its own that the index was built with is refused without it::

        index = pgra.Index("indexes/demo-minilm")
        hits = index.search_hits(["The planet orbits the sun"], k=5)[0]
        print(hits[0]["text"], hits[0]["score"])
    """

    def __init__(self, directory: str | Path, encoder: str | None = None, corpus: CorpusSource | None = None,
                 verify: bool = True, device: str | None = None, use_gpu_faiss: bool = True,
                 trust_remote_code: bool = False) -> None:
        self.directory = Path(directory)
        # the caller's own permission: what the manifest recorded never lets an encoder run its code
        self._trust = bool(trust_remote_code)
        self.manifest = read_manifest(self.directory, INDEX_KIND)
        for name, record in self.manifest["files"].items():
            verify_file(self.directory, name, record, full=verify)
        self.corpus = CorpusStore(self.directory / "corpus")
        if self.corpus.fingerprint != self.manifest["corpus"]["content_sha256"] or \
                len(self.corpus) != self.manifest["size"]:
            raise IncompleteArtifactError(f"{self.directory / 'corpus'}: corpus store does not match the manifest")
        if corpus is not None:
            fp = corpus.fingerprint()
            if fp != self.manifest["corpus"]["source_fingerprint"]:
                raise StaleArtifactError(
                    f"corpus {corpus.path} does not match index {self.directory}, which was built from "
                    f"{self.manifest['corpus']['source']['path']} (fingerprints {fp[:19]}... vs "
                    f"{self.manifest['corpus']['source_fingerprint'][:19]}...)")
        self.retriever = self.manifest["retriever"]
        self._device = device
        self._encoder_override = encoder
        self._encoder: DenseEncoder | None = None
        if self.retriever == "dense":
            if encoder is not None:
                self._check_encoder(encoder)
            params = FaissParams(**self.manifest["config"]["dense"]["faiss"])
            self.faiss = load_faiss(self.directory / "index.faiss", params, use_gpu=use_gpu_faiss)
            if self.faiss.ntotal != len(self.corpus) or self.faiss.d != self.manifest["dim"]:
                raise IncompleteArtifactError(f"{self.directory / 'index.faiss'}: holds {self.faiss.ntotal} "
                                              f"vectors of dim {self.faiss.d}, the manifest says "
                                              f"{len(self.corpus)} of dim {self.manifest['dim']}")
        else:
            self.bm25 = BM25Index.load(self.directory / "bm25")
            if self.bm25.num_docs != len(self.corpus):
                raise IncompleteArtifactError(f"{self.directory / 'bm25'}: {self.bm25.num_docs} documents, "
                                              f"the corpus has {len(self.corpus)}")

    def _check_encoder(self, encoder: str) -> None:
        fp = model_fingerprint(encoder)
        if fp != self.manifest["encoder_fingerprint"]:
            raise StaleArtifactError(
                f"encoder {encoder} is not the one index {self.directory} was built with "
                f"({self.manifest['encoder']}, pooler {self.manifest['pooler']}): its files differ; "
                "queries must be embedded by the index's own encoder")

    @property
    def encoder(self) -> DenseEncoder:
        """The index's own encoder (the manifest's path, or the verified override), loaded on first use."""
        if self._encoder is None:
            path = self._encoder_override or self.manifest["encoder"]
            if self._encoder_override is None and Path(path).is_absolute() and not Path(path).exists():
                raise InputError(f"the index's encoder folder {path} no longer exists; pass --encoder with the "
                                 "same model's new location", path=self.directory / MANIFEST, field="encoder")
            if self._encoder_override is None and Path(path).is_dir():
                self._check_encoder(path)
            dense = self.manifest["config"]["dense"]
            trust = remote_code_allowed(path, self._trust, dense.get("trust_remote_code"), "index's encoder",
                                        self.directory / MANIFEST)
            self._encoder = DenseEncoder(path, pooler=self.manifest["pooler"],
                                         max_length=self.manifest["max_length"], batch_size=dense["batch_size"],
                                         device=self._device, dtype=dense["dtype"], trust_remote_code=trust)
        return self._encoder

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores, positions)`` arrays of shape ``(len(queries), min(k, N))``."""
        if self.retriever == "dense":
            return search_faiss(self.faiss, self.encoder.encode(queries), k)
        return self.bm25.search(queries, k)

    def search_hits(self, queries: list[str], k: int) -> list[list[dict[str, Any]]]:
        """Top-k hits per query as ``{"id", "score", "text"}`` dicts (the interchange format's ``ctxs``)."""
        scores, positions = self.search(queries, k)
        out = []
        for srow, prow in zip(scores, positions, strict=True):
            keep = prow >= 0
            pos = prow[keep]
            out.append([{"id": cid, "score": float(s), "text": t} for cid, s, t in
                        zip(self.corpus.external_ids(pos.tolist()), srow[keep], self.corpus.texts(pos),
                            strict=True)])
        return out


__all__ = ["BM25Config", "DenseConfig", "Index", "IndexConfig", "build_index"]
