"""Fusion-in-Decoder on another reranker's top d: one method per reranker, beside ``pgra`` (the prompt-guided
one's), so that a grid compares the rerankers through the same reader. Each reads its own reranked folder
(``<task>/reranked-<reranker>``, built from the shared candidates). The built-in rerankers' methods are named here
(``fid_upr`` for query likelihood, as UPR's paper names it); every other registered reranker ``r`` (a plug-in's too)
gets ``fid_<r>`` from :func:`fid_method` (:class:`pgra.methods.MethodRegistry`)."""

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


def fid_method(reranker: str) -> type[ReaderMethod]:
    """The method ``fid_<reranker>``: Fusion-in-Decoder on ``reranker``'s top d (its own ``reranked-<reranker>``
    stage), as the built-in rerankers' methods are."""
    return type(f"FiD_{reranker}", (ReaderMethod,), {
        "name": f"fid_{reranker}", "data": "reranked", "reranker": reranker, "__module__": __name__,
        "made_from": ("reranker", reranker),
        "__doc__": f"Fusion-in-Decoder on the {reranker} reranker's top d."})


__all__ = ["RERANKED_READERS", "FiDCrossEncoder", "FiDMMR", "FiDRandom", "FiDUPR", "fid_method"]
