"""The dense retriever: a sentence encoder (:mod:`.encoder`) + a faiss index over the corpus's unit vectors
(:mod:`.dense`). Settings: the ``dense.*`` section of an index config.

Its index folder adds ``index.faiss`` (positions 0..N-1). The corpus is encoded in fixed shards of ``shard_size``
texts, each saved to ``.build/emb_*.npy`` when done: a killed build resumes from the finished shards, and
``torchrun``/``accelerate launch`` ranks encode shards round-robin before rank 0 merges them, so the index is the
same for any number of processes and any number of interruptions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import choices
from ..artifacts import MANIFEST, atomic_path, file_record, load_npy, model_fingerprint, save_npy
from ..config import option
from ..errors import IncompleteArtifactError, InputError, StaleArtifactError
from ..faults import fault_point
from ..progress import progress
from .base import LoadOptions, QueryEncoder, Retriever, Searcher, register_retriever
from .dense import INDEX_TYPES, FaissParams, build_faiss, import_faiss, load_faiss, save_faiss, search_faiss

if TYPE_CHECKING:
    from ..corpus import CorpusStore
    from ..distributed import DistContext
    from .encoder import DenseEncoder

FAISS_FILE = "index.faiss"


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
    dtype: str = option("auto", choices=choices.DTYPES,
                        help="auto = bf16/fp16 on GPU, fp32 on CPU; bf16-if-native = auto but bf16 on CPUs with "
                             "avx512_bf16 or AMX")
    shard_size: int = option(65536, flag="--shard-size", min=1, help="texts per resumable shard")
    use_gpu_faiss: bool = option(True, help="train/search faiss on the GPU when faiss-gpu is installed")
    trust_remote_code: bool = option(False, help="allow the encoder's own code (off: never run hub code)")


def _encoder_path(name: str) -> str:
    p = Path(name)
    return str(p.resolve()) if p.is_dir() else name


def _shard_path(build_dir: Path, i: int) -> Path:
    return build_dir / f"emb_{i:05d}.npy"


@register_retriever
class DenseRetriever(Retriever):
    """A dense encoder + faiss (exact inner product on unit vectors = cosine, or IVF / HNSW)."""

    name = "dense"
    options = DenseConfig
    cosine_scores = True
    files = {FAISS_FILE: "an index's faiss file"}
    work_files = ("emb_*.npy",)

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.settings: DenseConfig = cfg.dense
        self.encoder_fingerprint: str | None = None

    def validate(self) -> None:
        from .encoder import POOLERS

        d = self.settings
        if d.pooler not in POOLERS:
            raise InputError(f"unknown pooler '{d.pooler}', use one of {POOLERS}", field="pooler")
        if d.index_type not in INDEX_TYPES:
            raise InputError(f"unknown index type '{d.index_type}', use one of {INDEX_TYPES}", field="index_type")
        if d.shard_size < 1:
            raise InputError("shard_size must be positive", field="dense.shard_size")
        import_faiss()  # a missing faiss is said before the corpus is encoded

    def prepare(self) -> None:
        """An encoder that cannot load is refused before anything is written."""
        from transformers import AutoConfig

        from ..loading import load_pretrained

        d = self.settings
        load_pretrained(AutoConfig, d.encoder, "encoder", "encoder", trust_remote_code=d.trust_remote_code)
        self.encoder_fingerprint = model_fingerprint(d.encoder)

    def key_fields(self) -> dict[str, Any]:
        d = self.settings
        return {"encoder": self.encoder_fingerprint, "pooler": d.pooler, "max_length": d.max_length,
                "index_type": d.index_type, "shard_size": d.shard_size, "faiss": asdict(d.faiss), "dtype": d.dtype}

    def build(self, store: CorpusStore, out: Path, work: Path, ctx: DistContext) -> tuple[dict[str, Any],
                                                                                         dict[str, Any]]:
        self._encode_shards(store, work, ctx)
        ctx.barrier()
        if not ctx.is_main:
            return {}, {}
        files, dim = self._merge_shards(store, work, out)
        d = self.settings
        return files, {"encoder": _encoder_path(d.encoder), "encoder_fingerprint": self.encoder_fingerprint,
                       "pooler": d.pooler, "max_length": d.max_length, "index_type": d.index_type, "dim": dim}

    def _encode_shards(self, store: CorpusStore, build_dir: Path, ctx: DistContext) -> None:
        """Encode this process's unfinished shards (round-robin over processes), each saved when done."""
        from .encoder import DenseEncoder

        d = self.settings
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
        show = self.cfg.show_progress and ctx.is_main
        bar = progress(total=sum(min(d.shard_size, n - i * d.shard_size) for i in todo), desc="encoding corpus",
                       unit=" texts", disable=not show)
        for i in todo:
            start = i * d.shard_size
            texts = store.texts(range(start, min(n, start + d.shard_size)))
            save_npy(_shard_path(build_dir, i), encoder.encode(texts))
            fault_point("index.shard")
            bar.update(len(texts))
        bar.close()

    def _merge_shards(self, store: CorpusStore, build_dir: Path, out: Path) -> tuple[dict[str, Any], int]:
        """Build and save the faiss index over every shard's vectors; its file record and the vectors' dim."""
        d = self.settings
        n = len(store)
        n_shards = (n + d.shard_size - 1) // d.shard_size
        vectors = np.concatenate([load_npy(_shard_path(build_dir, i)) for i in range(n_shards)])
        if vectors.shape[0] != n:
            raise IncompleteArtifactError(f"{build_dir}: shards hold {vectors.shape[0]} vectors for {n} texts")
        if self.cfg.show_progress:
            print(f"building faiss '{d.index_type}' index over {n} x {vectors.shape[1]} vectors")
        index = build_faiss(vectors, d.index_type, d.faiss, use_gpu=d.use_gpu_faiss)
        with atomic_path(out / FAISS_FILE) as tmp:
            save_faiss(index, tmp)
        return {FAISS_FILE: file_record(out / FAISS_FILE)}, int(vectors.shape[1])

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
        return f"{m['encoder']} ({m['pooler']}), dim {m['dim']}, {m['index_type']}"

    @classmethod
    def encoder_of(cls, record: dict[str, Any]) -> tuple[str, str | None] | None:
        return (record["encoder"], record.get("pooler")) if record.get("encoder") else None


class DenseSearcher(Searcher):
    """A dense index loaded: its faiss index, and its own encoder for the queries (loaded on first use).

    The encoder runs code of its own only when the caller passes ``trust_remote_code=True``: the manifest's
    ``trust_remote_code`` never allows it (an index is a shared file), and an encoder with code of its own that
    the index was built with is refused without it.
    """

    def __init__(self, directory: Path, manifest: dict[str, Any], options: LoadOptions) -> None:
        self.directory, self.manifest, self.options = directory, manifest, options
        self._encoder: DenseEncoder | None = None
        if options.encoder is not None:
            self._check_encoder(options.encoder)
        params = FaissParams(**manifest["config"]["dense"]["faiss"])
        self.faiss = load_faiss(directory / FAISS_FILE, params, use_gpu=options.use_gpu)
        if self.faiss.ntotal != manifest["size"] or self.faiss.d != manifest["dim"]:
            raise IncompleteArtifactError(f"{directory / FAISS_FILE}: holds {self.faiss.ntotal} vectors of dim "
                                          f"{self.faiss.d}, the manifest says {manifest['size']} of dim "
                                          f"{manifest['dim']}")

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
            from ..loading import remote_code_allowed
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
        return search_faiss(self.faiss, self.encoder.encode(queries), k)


__all__ = ["FAISS_FILE", "DenseConfig", "DenseRetriever", "DenseSearcher"]
