"""The BM25 retriever (:mod:`.bm25`); its index folder adds ``bm25/`` (weights as npy arrays + ``vocab.json``)."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import IncompleteArtifactError
from ..storage.artifacts import file_record
from .base import LoadOptions, Retriever, Searcher, register_retriever
from .bm25 import BM25Config, BM25Index

if TYPE_CHECKING:
    from ..data.corpus import CorpusStore
    from ..runtime.distributed import DistContext

BM25_DIR = "bm25"


@register_retriever
class BM25Retriever(Retriever):
    """BM25 (the paper's rank_bm25 Okapi, or one of bm25s's variants) over the corpus's tokens."""

    name = "bm25"
    options = BM25Config
    title = "BM25"
    parts = {BM25_DIR: (("*.npy", "*.json"), "an index's BM25 arrays")}

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.settings: BM25Config = cfg.bm25

    def key_fields(self) -> dict[str, Any]:
        return {"bm25": {k: v for k, v in asdict(self.settings).items() if k != "query_batch_size"}}

    def build(self, store: CorpusStore, out: Path, work: Path, ctx: DistContext) -> tuple[dict[str, Any],
                                                                                         dict[str, Any]]:
        """Built by the main process alone (one pass over the corpus)."""
        if not ctx.is_main:
            return {}, {}
        texts = (store.text(i) for i in range(len(store)))
        bm25 = BM25Index.build(texts, self.settings, show_progress=self.cfg.show_progress)
        shutil.rmtree(out / BM25_DIR, ignore_errors=True)
        bm25.save(out / BM25_DIR)
        files = {f"{BM25_DIR}/{p.name}": file_record(p) for p in sorted((out / BM25_DIR).iterdir())}
        return files, {"bm25": asdict(self.settings)}

    def search_settings(self) -> dict[str, Any]:
        return asdict(self.settings)

    @classmethod
    def load(cls, directory: Path, manifest: dict[str, Any], options: LoadOptions) -> BM25Searcher:
        return BM25Searcher(directory, manifest)

    @classmethod
    def describe(cls, manifest: dict[str, Any]) -> str:
        return f"BM25 {manifest['bm25']['method']}"


class BM25Searcher(Searcher):
    """A BM25 index loaded (its weights memory-mapped)."""

    def __init__(self, directory: Path, manifest: dict[str, Any]) -> None:
        self.bm25 = BM25Index.load(directory / BM25_DIR)
        if self.bm25.num_docs != manifest["size"]:
            raise IncompleteArtifactError(f"{directory / BM25_DIR}: {self.bm25.num_docs} documents, "
                                          f"the corpus has {manifest['size']}")

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.bm25.search(queries, k)


__all__ = ["BM25_DIR", "BM25Retriever", "BM25Searcher"]
