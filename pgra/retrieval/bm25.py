"""BM25 as one sparse term-by-document weight matrix W, searched with a sparse product: score(q, d) is the sum
of W[token, d] over the query's tokens (repeats count). ``okapi`` gives rank_bm25's ``BM25Okapi`` scores (the
paper's retriever, float64); bm25s's variants use lowercased word tokens."""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..core.config import MAX_BATCH, option
from ..core.errors import InputError
from ..core.progress import progress
from ..storage.artifacts import load_npy, read_json, save_npy, write_json
from . import bm25_kernel

METHODS = ("okapi", "lucene", "robertson", "atire", "bm25l", "bm25+")
_WORD = re.compile(r"(?u)\b\w\w+\b")


@dataclass
class BM25Config:
    """BM25 scoring (``bm25.*`` keys of a build-index config)."""

    method: str = option("okapi", flag="--bm25-method", choices=METHODS,
                         help="okapi = rank_bm25's BM25Okapi (the paper's); the others are bm25s's variants")
    k1: float = option(1.5, min=0, help="term-frequency saturation")
    b: float = option(0.75, min=0, max=1, help="length normalisation")
    epsilon: float = option(0.25, min=0, help="okapi: negative idf floored to epsilon * mean idf")
    delta: float = option(0.5, min=0, help="bm25l / bm25+ delta")
    tokenizer: str = option("auto", choices=("auto", "whitespace", "word_lower"),
                            help="whitespace (okapi's text.split(' ')), word_lower (bm25s's) or auto (by method)")
    query_batch_size: int = option(32, min=1, max=MAX_BATCH, help="queries per sparse product")


def tokenizer_for(cfg: BM25Config) -> str:
    if cfg.tokenizer != "auto":
        return cfg.tokenizer
    return "whitespace" if cfg.method == "okapi" else "word_lower"


def tokenize(text: str, kind: str) -> list[str]:
    """``whitespace``: ``text.split(" ")`` exactly as the paper's code; ``word_lower``: lowercased words."""
    if kind == "whitespace":
        return text.split(" ")
    if kind == "word_lower":
        return _WORD.findall(text.lower())
    raise InputError(f"unknown BM25 tokenizer '{kind}', use whitespace or word_lower", field="tokenizer")


class BM25Index:
    """Term-by-document BM25 weights (CSR) + vocabulary; ``search`` returns top-k positions and scores."""

    def __init__(self, weights: sp.csr_matrix, vocab: list[str], cfg: BM25Config,
                 nonoccurrence: np.ndarray | None = None) -> None:
        self.weights = weights  # (n_terms, n_docs)
        self.vocab = vocab
        self.term_id = {t: i for i, t in enumerate(vocab)}
        self.cfg = cfg
        self.tokenizer = tokenizer_for(cfg)
        self.nonoccurrence = nonoccurrence

    @property
    def num_docs(self) -> int:
        return self.weights.shape[1]

    @classmethod
    def build(cls, texts: Iterable[str], cfg: BM25Config, show_progress: bool = True) -> BM25Index:
        if cfg.method not in METHODS:
            raise InputError(f"unknown BM25 method '{cfg.method}', use one of {METHODS}", field="method")
        kind = tokenizer_for(cfg)
        token_lists = (tokenize(t, kind) for t in texts)
        if cfg.method == "okapi":
            total = len(texts) if isinstance(texts, Sized) else None
            return cls._build_okapi(token_lists, cfg, show_progress, total)
        return cls._build_bm25s(list(token_lists), cfg, show_progress)

    @classmethod
    def _build_okapi(cls, token_lists: Iterable[list[str]], cfg: BM25Config, show_progress: bool,
                     total: int | None = None) -> BM25Index:
        vocab: dict[str, int] = {}
        cols = array("q")
        indptr = array("q", [0])
        for tokens in progress(token_lists, total=total, desc="bm25 counting", unit=" docs",
                               disable=not show_progress):
            cols.extend(vocab.setdefault(t, len(vocab)) for t in tokens)
            indptr.append(len(cols))
        n_docs, n_terms = len(indptr) - 1, len(vocab)
        cols_np = np.frombuffer(cols, dtype=np.int64)
        indptr_np = np.frombuffer(indptr, dtype=np.int64)
        tf = sp.csr_matrix((np.ones(len(cols_np)), cols_np, indptr_np), shape=(n_docs, n_terms))
        tf.sum_duplicates()  # tf[d, t] = count of t in d
        doc_len = np.diff(indptr_np).astype(np.float64)  # rank_bm25: len(document)
        avgdl = doc_len.sum() / n_docs
        df = np.bincount(tf.indices, minlength=n_terms).astype(np.float64)
        idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        eps = cfg.epsilon * (idf.sum() / n_terms)
        idf = np.where(idf < 0, eps, idf)
        rows = np.repeat(np.arange(n_docs), np.diff(tf.indptr))
        freq = tf.data
        norm = cfg.k1 * (1 - cfg.b + cfg.b * doc_len[rows] / avgdl)
        tf.data = idf[tf.indices] * (freq * (cfg.k1 + 1) / (freq + norm))
        return cls(tf.T.tocsr(), list(vocab), cfg)  # ids in insertion order: vocab's keys are the terms by id

    @classmethod
    def _build_bm25s(cls, token_lists: list[list[str]], cfg: BM25Config, show_progress: bool) -> BM25Index:
        import bm25s

        kwargs = {"method": cfg.method, "k1": cfg.k1, "b": cfg.b}
        if cfg.method in ("bm25l", "bm25+"):
            kwargs["delta"] = cfg.delta
        retriever = bm25s.BM25(**kwargs)
        retriever.index(token_lists, show_progress=show_progress)
        s = retriever.scores
        weights = sp.csr_matrix((np.asarray(s["data"], dtype=np.float32), np.asarray(s["indices"]),
                                 np.asarray(s["indptr"])), shape=(len(s["indptr"]) - 1, s["num_docs"]))
        terms = [""] * weights.shape[0]
        for t, i in retriever.vocab_dict.items():
            if i < len(terms):  # bm25s appends an empty-token id past the matrix
                terms[i] = t
        nonocc = getattr(retriever, "nonoccurrence_array", None)
        return cls(weights, terms, cfg, None if nonocc is None else np.asarray(nonocc, dtype=np.float32))

    def query_matrix(self, queries: Sequence[str]) -> sp.csr_matrix:
        """Token counts of each query over the vocabulary (unknown tokens dropped)."""
        indptr, cols = [0], []
        for q in queries:
            cols.extend(self.term_id[t] for t in tokenize(q, self.tokenizer) if t in self.term_id)
            indptr.append(len(cols))
        q = sp.csr_matrix((np.ones(len(cols), dtype=self.weights.dtype), np.asarray(cols, dtype=np.int64),
                           np.asarray(indptr, dtype=np.int64)), shape=(len(queries), len(self.vocab)))
        q.sum_duplicates()
        return q

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """Dense ``(n_queries, n_docs)`` BM25 scores."""
        q = self.query_matrix(queries)
        out = (q @ self.weights).toarray()
        if self.nonoccurrence is not None:
            out += (q @ self.nonoccurrence)[:, None]
        return out

    def search(self, queries: Sequence[str], k: int, compiled: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores, positions)`` by score then position (``compiled``: :mod:`.bm25_kernel`, bit-equal)."""
        k = max(0, min(k, self.num_docs))
        all_scores = np.empty((len(queries), k), dtype=np.float64)
        all_ids = np.empty((len(queries), k), dtype=np.int64)
        if k <= 0 or not len(queries):  # nothing to rank (the compiled heap needs k >= 1)
            return all_scores, all_ids
        compiled = bm25_kernel.available() if compiled is None else compiled
        bs = self.cfg.query_batch_size
        rows = np.empty((min(bs, len(queries)), self.num_docs), dtype=self.weights.dtype) if compiled else None
        for start in range(0, len(queries), bs):
            batch = queries[start:start + bs]
            if compiled:
                q = self.query_matrix(batch)
                shift = q @ self.nonoccurrence if self.nonoccurrence is not None else np.zeros(len(batch))
                scores, ids = bm25_kernel.search_batch(self.weights, q, shift, k, rows)
                all_scores[start:start + len(batch)], all_ids[start:start + len(batch)] = scores, ids
                continue
            for r, row in enumerate(self.scores(batch)):
                ids = topk_positions(row, k)
                all_ids[start + r], all_scores[start + r] = ids, row[ids]
        return all_scores, all_ids

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for n in ("data", "indices", "indptr"):
            save_npy(directory / f"weights_{n}.npy", getattr(self.weights, n))
        if self.nonoccurrence is not None:
            save_npy(directory / "nonoccurrence.npy", self.nonoccurrence)
        write_json(directory / "vocab.json", self.vocab)
        write_json(directory / "bm25.json", {"num_docs": self.num_docs, "num_terms": len(self.vocab),
                                             "config": vars(self.cfg)})

    @classmethod
    def load(cls, directory: str | Path) -> BM25Index:
        directory = Path(directory)
        meta = read_json(directory / "bm25.json")
        vocab = read_json(directory / "vocab.json")
        data, indices, indptr = (load_npy(directory / f"weights_{n}.npy", mmap=True)
                                 for n in ("data", "indices", "indptr"))
        if len(vocab) != meta["num_terms"] or indptr.shape[0] != len(vocab) + 1 or data.shape != indices.shape:
            raise InputError("BM25 arrays do not agree with the vocabulary: corrupted index", path=directory)
        weights = sp.csr_matrix((data, indices, indptr), shape=(len(vocab), meta["num_docs"]))
        nonocc_path = directory / "nonoccurrence.npy"
        nonocc = load_npy(nonocc_path) if nonocc_path.exists() else None
        return cls(weights, vocab, BM25Config(**meta["config"]), nonocc)


def topk_positions(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k highest scores, ties broken by lower position, highest first."""
    n = scores.shape[0]
    k = min(k, n)
    if k == n:
        cand = np.arange(n)
    else:
        part = np.argpartition(-scores, k - 1)[:k]
        thr = scores[part].min()
        above = np.flatnonzero(scores > thr)
        equal = np.flatnonzero(scores == thr)[: k - len(above)]
        cand = np.concatenate([above, equal])
    return cand[np.lexsort((cand, -scores[cand]))]
