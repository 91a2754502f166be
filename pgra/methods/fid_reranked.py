"""Fusion-in-Decoder on another reranker's top d: one method per reranker, beside ``pgra`` (the prompt-guided
one's), so that a grid compares the rerankers through the same reader. Each reads its own reranked folder
(``<task>/reranked-<reranker>``, built from the shared candidates)."""

from __future__ import annotations

from .reader_method import ReaderMethod


class FiDCrossEncoder(ReaderMethod):
    name = "fid_cross_encoder"
    data = "reranked"
    reranker = "cross_encoder"


class FiDUPR(ReaderMethod):
    name = "fid_upr"
    data = "reranked"
    reranker = "query_likelihood"


class FiDMMR(ReaderMethod):
    name = "fid_mmr"
    data = "reranked"
    reranker = "mmr"


class FiDRandom(ReaderMethod):
    name = "fid_random"
    data = "reranked"
    reranker = "random"


RERANKED_READERS = (FiDCrossEncoder, FiDUPR, FiDMMR, FiDRandom)

__all__ = ["RERANKED_READERS", "FiDCrossEncoder", "FiDMMR", "FiDRandom", "FiDUPR"]
