"""``Index``: a built first-stage index, checked against its manifest, loaded by its retriever and searched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import IncompleteArtifactError, InputError, StaleArtifactError
from ..data.corpus import CorpusSource, CorpusStore
from ..storage.artifacts import MANIFEST, read_manifest, verify_file
from .base import INDEX_KIND, RETRIEVERS, LoadOptions, recorded_retriever
from .bm25 import BM25Config
from .build import CORPUS_DIR, build_index
from .config import IndexConfig
from .dense_retriever import DenseConfig


class Index:
    """A loaded first-stage index: ``search(texts, k)`` returns corpus positions and scores.

    Checked on load against its manifest (files, encoder, corpus). The encoder runs code of its own only when
    the caller passes ``trust_remote_code=True``: the manifest's ``trust_remote_code`` never allows it (an index
    is a shared file), and an encoder with code of its own that the index was built with is refused without it.
    ``mmap`` searches it from disk (None: as built, ``dense.mmap``); ``ranks`` (a DistContext) splits an index that
    can be split (a flat one kept as shards) over the process group, every rank then searching the same queries::

        index = pgra.Index("indexes/demo-minilm")
        hits = index.search_hits(["The planet orbits the sun"], k=5)[0]
        print(hits[0]["text"], hits[0]["score"])
    """

    def __init__(self, directory: str | Path, encoder: str | None = None, corpus: CorpusSource | None = None,
                 verify: bool = True, device: str | None = None, use_gpu_faiss: bool = True,
                 trust_remote_code: bool = False, mmap: bool | None = None, ranks: Any = None) -> None:
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory, INDEX_KIND)
        for name, record in self.manifest["files"].items():
            verify_file(self.directory, name, record, full=verify)
        self.corpus = CorpusStore(self.directory / CORPUS_DIR)
        if self.corpus.fingerprint != self.manifest["corpus"]["content_sha256"] or \
                len(self.corpus) != self.manifest["size"]:
            raise IncompleteArtifactError(f"{self.directory / CORPUS_DIR}: corpus store does not match the manifest")
        if corpus is not None:
            self._check_corpus(corpus)
        self.retriever: str = self.manifest["retriever"]
        # the caller's own permission: what the manifest recorded never lets an encoder run its code
        options = LoadOptions(encoder=encoder, device=device, use_gpu=use_gpu_faiss,
                              trust_remote_code=bool(trust_remote_code), mmap=mmap, ranks=ranks)
        cls = recorded_retriever(self.manifest)
        if cls is None:
            raise InputError(f"index {self.directory} was built by retriever '{self.retriever}', which is not "
                             f"registered here (registered: {', '.join(RETRIEVERS)})",
                             path=self.directory / MANIFEST)
        self.searcher = cls.load(self.directory, self.manifest, options)

    def _check_corpus(self, corpus: CorpusSource) -> None:
        fp = corpus.fingerprint()
        if fp != self.manifest["corpus"]["source_fingerprint"]:
            raise StaleArtifactError(
                f"corpus {corpus.path} does not match index {self.directory}, which was built from "
                f"{self.manifest['corpus']['source']['path']} (fingerprints {fp[:19]}... vs "
                f"{self.manifest['corpus']['source_fingerprint'][:19]}...)")

    @property
    def spans_ranks(self) -> bool:
        """Whether its ranks each hold a part, so that every rank must search the same queries together."""
        return bool(getattr(self.searcher, "spans_ranks", False))

    @property
    def encoder(self) -> Any:
        """The index's own query encoder (a dense index's), loaded on first use."""
        return self.searcher.encoder

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores, positions)`` arrays of shape ``(len(queries), min(k, N))``."""
        return self.searcher.search(queries, k)

    def search_hits(self, queries: list[str], k: int) -> list[list[dict[str, Any]]]:
        """Top-k hits per query as ``{"id", "score", "text"}`` dicts (the interchange format's ``ctxs``)."""
        return self.hits(*self.search(queries, k))

    def hits(self, scores: np.ndarray, positions: np.ndarray) -> list[list[dict[str, Any]]]:
        """A search's ``(scores, positions)`` rows as hit dicts (-1 positions, none found, dropped)."""
        out = []
        for srow, prow in zip(scores, positions, strict=True):
            pos = prow[prow >= 0]
            out.append([{"id": cid, "score": float(s), "text": t} for cid, s, t in
                        zip(self.corpus.external_ids(pos.tolist()), srow[prow >= 0], self.corpus.texts(pos),
                            strict=True)])
        return out


__all__ = ["BM25Config", "DenseConfig", "Index", "IndexConfig", "build_index"]
