"""The dense retriever's settings (``dense.*``), apart so that the index writer need not import the retriever."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core import choices
from ..core.config import MAX_BATCH, MAX_ITEMS, MAX_SHARD, MAX_TOKENS, option
from .dense import INDEX_TYPES, FaissParams

POOLERS: tuple[str, ...] = ("cls", "cls_before_pooler", "mean")  # how a dense encoder pools a sentence


@dataclass
class DenseConfig:
    """A dense retriever (``dense.*`` keys of a build-index config)."""

    encoder: str = option("bert-base-uncased", flag="--encoder", help="HF encoder name or local folder")
    pooler: str = option("cls", flag="--pooler", choices=POOLERS,
                         help="cls = pooler_output (the paper's BERT), cls_before_pooler (SimCSE), mean")
    max_length: int = option(512, flag="--max-length", min=1, max=MAX_TOKENS, help="tokens per sentence")
    batch_size: int = option(64, flag="--batch-size", min=1, max=MAX_BATCH, help="sentences per encoder batch")
    index_type: str = option("flat", flag="--index-type", choices=INDEX_TYPES,
                             help="flat = exact cosine (the paper's); ivf / hnsw approximate")
    faiss: FaissParams = field(default_factory=FaissParams)
    device: str = option("auto", flag="--device", help="auto, cpu, cuda, cuda:1 ...")
    dtype: str = option("auto", choices=choices.DTYPES,
                        help="auto = bf16/fp16 on GPU, fp32 on CPU; bf16-if-native = auto but bf16 on CPUs with "
                             "avx512_bf16 or AMX")
    shard_size: int = option(65536, flag="--shard-size", min=1, max=MAX_SHARD, help="texts per resumable shard")
    use_gpu_faiss: bool = option(True, help="train/search faiss on the GPU when faiss-gpu is installed")
    trust_remote_code: bool = option(False, help="allow the encoder's own code (off: never run hub code)")
    bounded_memory: bool = option(False, omit_default=True, record_default=False,
                                  help="never hold the corpus's vectors in memory: flat keeps the encoded shards "
                                       "as the index (searched shard by shard), IVF types add each shard into "
                                       "lists merged on disk, hnsw adds shard by shard")
    rescore: int = option(0, min=0, max=MAX_ITEMS, omit_default=True, record_default=False,
                          help="re-score an approximate index's top k x rescore candidates exactly from the stored "
                               "vectors (kept in vectors/); 0 = off")
    mmap: bool = option(False, cosmetic=True, omit_default=True, record_default=False,
                        help="search from disk: the faiss file and stored vectors memory-mapped, not read into RAM "
                             "(an index larger than memory; Index(mmap=...) overrides)")


__all__ = ["DenseConfig"]
