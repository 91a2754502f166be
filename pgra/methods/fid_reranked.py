"""Fusion-in-Decoder on another reranker's top d: one method per reranker, beside ``pgra`` (the prompt-guided
one's), so that a grid compares the rerankers through the same reader. Each reads its own reranked folder
(``<task>/reranked-<reranker>``, built from the shared candidates). Every one is made by :func:`fid_method`: the
built-in rerankers' here, every other registered reranker ``r`` (a plug-in's too) gets ``fid_<r>`` when looked up
(:class:`pgra.methods.MethodRegistry`)."""

from __future__ import annotations

from ..rerank.stages import reranked_stage
from .reader_method import ReaderMethod


def fid_method(reranker: str, name: str = "") -> type[ReaderMethod]:
    """The method ``fid_<reranker>`` (or ``name``): Fusion-in-Decoder on ``reranker``'s top d (its own
    ``reranked-<reranker>`` stage)."""
    return type(f"FiD_{reranker}", (ReaderMethod,), {
        "name": name or f"fid_{reranker}", "data": reranked_stage(reranker), "__module__": __name__,
        "made_from": ("reranker", reranker), "__doc__": f"Fusion-in-Decoder on the {reranker} reranker's top d."})


# the built-in rerankers' methods, in their order (fid_upr for query likelihood, as UPR's paper names it)
RERANKED_READERS = tuple(fid_method(r, n) for r, n in (("cross_encoder", ""), ("query_likelihood", "fid_upr"),
                                                       ("mmr", ""), ("random", "")))


__all__ = ["RERANKED_READERS", "fid_method"]
