"""The dense retriever: a sentence encoder (:mod:`.encoder`) + a faiss index over the corpus's unit vectors.

The corpus is encoded in fixed shards saved to ``.build/`` as they finish, ranks taking them round-robin: the
index is the same for any number of processes and interruptions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.config import recorded_settings, result_settings
from ..core.errors import IncompleteArtifactError, InputError, StaleArtifactError
from ..core.faults import fault_point
from ..core.progress import progress
from ..storage.artifacts import MANIFEST, load_npy, model_fingerprint, model_location, save_npy
from .base import LoadOptions, QueryEncoder, Retriever, Searcher, register_retriever
from .dense import OPQ_CENTROIDS, FaissParams, check_trainable, import_faiss, load_faiss
from .dense_build import FAISS_FILE, IVFDATA_FILE, VECTORS_DIR, shard_name, write_dense_index
from .dense_config import DenseConfig
from .shards import VectorShards, merge_over_ranks, search_index

if TYPE_CHECKING:
    from ..data.corpus import CorpusStore
    from ..runtime.distributed import DistContext
    from .encoder import DenseEncoder

# options added after indexes were built: in the build key (and the manifest's config) only when set
_ADDED = ("bounded_memory", "rescore")


def trained_pooler(encoder: str | Path) -> str | None:
    """The pooler an encoder folder was trained for, as its pgra manifest records it; None without one."""
    import json

    from .encoder import POOLERS

    path = Path(str(encoder)).expanduser() / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pooler = data.get("pooler") if isinstance(data, dict) and data.get("kind") == "simcse" else None
    return pooler if pooler in POOLERS else None


def check_pooler_of_encoder(encoder: str | Path, pooler: str, field: str, path: Path | None = None) -> None:
    """Refuse ``pooler`` for an encoder trained for another (:func:`trained_pooler`): a silently worse index."""
    trained = trained_pooler(encoder)
    if trained is not None and trained != pooler:
        raise InputError(f"the encoder {encoder} was trained (pgra train-simcse) for pooler '{trained}', as its "
                         f"manifest.json records, not '{pooler}': use pooler {trained}", path=path, field=field)


def check_index_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Refuse a dense index manifest that says other than how it was built: its pooler missing, unknown or not
    its build config's (or its encoder's trained one); vector shards not among its own files."""
    from ..storage.artifacts import own_file_name
    from .encoder import POOLERS

    path = directory / MANIFEST
    dense = manifest.get("config", {}).get("dense") if isinstance(manifest.get("config"), dict) else None
    if not isinstance(dense, dict):
        raise InputError("records no dense build settings (config.dense)", path=path, field="config")
    pooler = manifest.get("pooler")
    if pooler not in POOLERS:
        raise InputError(f"records pooler {pooler!r}, not one of {POOLERS}", path=path, field="pooler")
    if dense.get("pooler") != pooler:
        raise InputError(f"records query pooler '{pooler}', but the index was built with pooler "
                         f"{dense.get('pooler')!r} (config.dense.pooler): queries would be embedded unlike the "
                         "corpus (edited manifest?); rebuild the index", path=path, field="pooler")
    stored = manifest.get("vectors")
    if stored is not None:
        shards = stored.get("shards") if isinstance(stored, dict) else None
        files = manifest.get("files", {})
        if not isinstance(shards, list) or not all(isinstance(n, str) and n in files for n in shards):
            raise InputError("its vectors.shards must name files the manifest lists (files)", path=path,
                             field="vectors")
        for name in shards:
            own_file_name(directory, name)
    encoder = manifest.get("encoder")
    if isinstance(encoder, str) and encoder:
        check_pooler_of_encoder(encoder, pooler, "pooler", path)


@register_retriever
class DenseRetriever(Retriever):
    """A dense encoder + faiss (exact inner product on unit vectors = cosine, or IVF / HNSW)."""

    name = "dense"
    options = DenseConfig
    cosine_scores = True
    files = {FAISS_FILE: "an index's faiss file", IVFDATA_FILE: "an index's on-disk inverted lists"}
    parts = {VECTORS_DIR: (("emb_*.npy",), "an index's stored vectors")}
    work_files = ("emb_*.npy", "ivf_*.index")

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.settings: DenseConfig = cfg.dense
        self.encoder_fingerprint: str | None = None

    def validate(self) -> None:
        """What the fields' own checks (IndexConfig.validate's check_config) cannot see."""
        d = self.settings
        if d.rescore and d.index_type == "flat":
            raise InputError("rescore re-scores an approximate index's candidates: a flat index's scores are "
                             "exact already (use ivf, ivfpq, ivfsq8 or hnsw, or rescore 0)", field="dense.rescore")
        import_faiss()  # a missing faiss is said before the corpus is encoded
        check_trainable(d.index_type, d.faiss)  # a training sample too small for the codebooks

    def _check_corpus_size(self) -> None:
        """Refuse an ``ivfpq`` corpus smaller than its codebooks before anything is written."""
        d = self.settings
        if d.index_type != "ivfpq":
            return
        from itertools import islice

        from ..data.corpus import iter_corpus

        need = max(2 ** d.faiss.pq_nbits, OPQ_CENTROIDS if d.faiss.opq else 1)
        check_trainable(d.index_type, d.faiss, sum(1 for _ in islice(iter_corpus(self.cfg.source()), need)))

    def prepare(self) -> None:
        """Refuse an encoder that cannot load, or a corpus too small for the index type, before anything is written."""
        from transformers import AutoConfig

        from ..lm.loading import load_pretrained

        d = self.settings
        self._check_corpus_size()
        load_pretrained(AutoConfig, d.encoder, "encoder", "encoder", trust_remote_code=d.trust_remote_code)
        check_pooler_of_encoder(d.encoder, d.pooler, "dense.pooler")
        self.encoder_fingerprint = model_fingerprint(d.encoder)

    def key_fields(self) -> dict[str, Any]:
        d = self.settings
        added = {k: v for k, v in result_settings(d).items() if k in _ADDED}
        return {"encoder": self.encoder_fingerprint, "pooler": d.pooler, "max_length": d.max_length,
                "index_type": d.index_type, "shard_size": d.shard_size,
                "faiss": recorded_settings(d.faiss, cosmetic=False), "dtype": d.dtype, **added}

    def build(self, store: CorpusStore, out: Path, work: Path, ctx: DistContext) -> tuple[dict[str, Any],
                                                                                         dict[str, Any]]:
        self._encode_shards(store, work, ctx)
        ctx.barrier()
        if not ctx.is_main:
            return {}, {}
        d = self.settings
        files, fields = write_dense_index(d, len(store), work, out, self.cfg.show_progress)
        return files, {"encoder": model_location(d.encoder), "encoder_fingerprint": self.encoder_fingerprint,
                       "pooler": d.pooler, "max_length": d.max_length, "index_type": d.index_type, **fields}

    def _encode_shards(self, store: CorpusStore, build_dir: Path, ctx: DistContext) -> None:
        """Encode this process's unfinished shards (round-robin over processes), each saved when done."""
        from .encoder import DenseEncoder

        d = self.settings
        n = len(store)
        n_shards = (n + d.shard_size - 1) // d.shard_size
        todo = []
        for i in ctx.shard(n_shards):
            rows = min(d.shard_size, n - i * d.shard_size)
            path = build_dir / shard_name(i)
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
        show = self.cfg.show_progress and ctx.is_main
        bar = progress(total=sum(min(d.shard_size, n - i * d.shard_size) for i in todo), desc="encoding corpus",
                       unit=" texts", disable=not show)
        for i in todo:
            start = i * d.shard_size
            texts = store.texts(range(start, min(n, start + d.shard_size)))
            save_npy(build_dir / shard_name(i), encoder.encode(texts))
            fault_point("index.shard")
            bar.update(len(texts))
        bar.close()

    def estimated_index_bytes(self, sentences: int) -> tuple[float | None, str]:
        """``sentences`` x dim x 4 B (flat), 1 B a dim for ``ivfsq8``, the sub-quantisers' bytes for ``ivfpq``."""
        from ..runtime.sizes import hidden_size

        dim = hidden_size(str(self.settings.encoder))  # a Hub model that is not here: its known size
        if dim is None:
            return None, "the encoder's dimension is unknown here"
        kind = self.settings.index_type
        per = {"ivfsq8": dim, "ivfpq": self.settings.faiss.pq_subquantizers(dim)}.get(kind, dim * 4)
        return float(sentences * per), (f"{sentences:,} sentences x "
                                        + (f"{dim} dims x 4 B" if per == dim * 4 else f"{per} B") + f", {kind}")

    def display_name(self) -> str:
        """The encoder's folder (or hub) name."""
        encoder = str(self.settings.encoder)
        return Path(encoder.rstrip("/")).name or encoder

    def search_settings(self) -> dict[str, Any]:
        d = self.settings
        return {"encoder": d.encoder, "pooler": d.pooler, "max_length": d.max_length}

    def query_encoder(self) -> QueryEncoder:
        d = self.settings
        return QueryEncoder(d.encoder, d.pooler, d.max_length, d.batch_size)

    def trusts_remote_code(self) -> bool:
        return bool(self.settings.trust_remote_code)

    @classmethod
    def load(cls, directory: Path, manifest: dict[str, Any], options: LoadOptions) -> DenseSearcher:
        return DenseSearcher(directory, manifest, options)

    @classmethod
    def describe(cls, manifest: dict[str, Any]) -> str:
        m = manifest
        recall = m.get("recall")  # an approximate index's, measured at build time
        measured = f", recall@{recall['k']} {recall['recall']:.3f} against exact" if recall else ""
        return f"{m['encoder']} ({m['pooler']}), dim {m['dim']}, {m['index_type']}{measured}"

    @classmethod
    def encoder_of(cls, record: dict[str, Any]) -> tuple[str, str | None] | None:
        """The recorded encoder and its pooler; a record without a known pooler is refused (no silent default)."""
        from .encoder import POOLERS

        if not record.get("encoder"):
            return None
        if record.get("pooler") not in POOLERS:
            raise InputError(f"an index record names the encoder {record['encoder']} with pooler "
                             f"{record.get('pooler')!r}, not one of {POOLERS}", field="pooler")
        return record["encoder"], record["pooler"]


class DenseSearcher(Searcher):
    """A dense index loaded: its faiss index and its own query encoder (loaded on first use; its own code runs
    only with the caller's ``trust_remote_code``)."""

    def __init__(self, directory: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        check_index_manifest(directory, manifest)
        self.directory, self.manifest, self.options = directory, manifest, options
        self._encoder: DenseEncoder | None = None
        if options.encoder is not None:
            self._check_encoder(options.encoder)
        dense = manifest["config"]["dense"]
        params = FaissParams(**dense["faiss"])
        mmap = bool(dense.get("mmap", False) if options.mmap is None else options.mmap)
        stored = manifest.get("vectors")  # the stored vector shards (a bounded flat index, or for re-scoring)
        self.vectors = VectorShards([directory / name for name in stored["shards"]], mmap=mmap) if stored else None
        self.rescore = int(dense.get("rescore", 0))
        self.faiss = None
        if FAISS_FILE in manifest["files"]:
            self.faiss = load_faiss(directory / FAISS_FILE, params, use_gpu=options.use_gpu, mmap=mmap,
                                    on_disk=IVFDATA_FILE in manifest["files"])
            what, total, dim = directory / FAISS_FILE, self.faiss.ntotal, self.faiss.d
        elif self.vectors is not None:
            what, total, dim = directory / VECTORS_DIR, len(self.vectors), self.vectors.dim
        else:
            raise IncompleteArtifactError(f"{directory / MANIFEST}: records neither {FAISS_FILE} nor {VECTORS_DIR}/")
        if total != manifest["size"] or dim != manifest["dim"]:
            raise IncompleteArtifactError(f"{what}: holds {total} vectors of dim {dim}, the manifest says "
                                          f"{manifest['size']} of dim {manifest['dim']}")
        # a flat index kept as shards may be split over the ranks of a process group: each searches its own shards
        ranks = options.ranks
        self.ranks = ranks if self.faiss is None and ranks is not None and ranks.world_size > 1 else None

    @property
    def spans_ranks(self) -> bool:
        """Whether every rank of the process group must search the same queries together (each holds a part)."""
        return self.ranks is not None

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
            from ..lm.loading import remote_code_allowed
            from .encoder import DenseEncoder

            override = self.options.encoder
            path = override or self.manifest["encoder"]
            if override is None and Path(path).is_absolute() and not Path(path).exists():
                raise InputError(f"the index's encoder folder {path} no longer exists; pass --encoder with the "
                                 "same model's new location", path=self.directory / MANIFEST, field="encoder")
            if override is None and Path(path).is_dir():
                self._check_encoder(path)
            dense = self.manifest["config"]["dense"]
            trust = remote_code_allowed(path, self.options.trust_remote_code, dense.get("trust_remote_code"),
                                        "index's encoder", self.directory / MANIFEST)
            self._encoder = DenseEncoder(path, pooler=self.manifest["pooler"],
                                         max_length=self.manifest["max_length"], batch_size=dense["batch_size"],
                                         device=self.options.device, dtype=dense["dtype"], trust_remote_code=trust)
        return self._encoder

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.search_vectors(self.encoder.encode(queries), k)

    def search_vectors(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores, positions)`` of query vectors: from the faiss index (re-scored with ``rescore``) or the
        stored shards (this rank's only, merged across ranks, when the index spans a process group)."""
        if self.faiss is not None:
            return search_index(self.faiss, queries, k, self.vectors, self.rescore)
        vectors = self.vectors
        k = min(k, len(vectors))
        if self.ranks is None:
            return vectors.search(queries, k)
        mine = self.ranks.shard(len(vectors.arrays))
        return merge_over_ranks(self.ranks, *vectors.search(queries, k, shards=mine), k)


__all__ = ["FAISS_FILE", "DenseConfig", "DenseRetriever", "DenseSearcher", "check_index_manifest",
           "check_pooler_of_encoder", "trained_pooler"]
