"""The first stage's share of the plan's disk: the corpus's sentences and the shared index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import PgraError
from ..runtime.sizes import folder_bytes, format_bytes, mean_line_bytes
from ..storage.artifacts import read_json

SENTENCE_BYTES = 150  # a corpus sentence when the corpus cannot be read


def corpus_size(index: Any) -> int | None:
    """The sentences of the built index (what ``full_search`` embeds), None before it is built."""
    manifest = Path(index.out) / "manifest.json"
    return int(read_json(manifest).get("size") or 0) or None if manifest.exists() else None


def corpus_lines(index: Any) -> tuple[int | None, float, int]:
    """The corpus's sentences, a sentence's mean bytes and the file's size (0 when not a local file)."""
    corpus = Path(str(index.corpus))
    mean = mean_line_bytes(corpus) if corpus.is_file() else None
    size = corpus.stat().st_size if corpus.is_file() else 0
    count = corpus_size(index) or (int(round(size / mean)) if mean else None)
    return count, (mean or SENTENCE_BYTES), size


def index_disk(index: Any, sentences: int | None, corpus_bytes: int) -> tuple[float | None, str]:
    """The shared index's bytes: on disk when built, else its retriever's estimate plus the corpus copy, or None."""
    if (Path(index.out) / "manifest.json").exists():
        size = folder_bytes(index.out)
        return float(size), f"{index.out} (shared): {format_bytes(size)}, built"
    from .base import get_retriever

    if sentences is None:
        return None, f"{index.out} (shared): to build, size not estimated (the corpus size is unknown here)"
    try:
        vectors, how = get_retriever(index).estimated_index_bytes(sentences)
    except PgraError as e:  # e.g. a pq_m the build will refuse: the plan says so
        return None, f"{index.out} (shared): to build, size not estimated ({e})"
    if vectors is None:
        return None, f"{index.out} (shared): to build, size not estimated ({how})"
    text = (f"{index.out} (shared): {format_bytes(vectors + corpus_bytes)} to build ({how}"
            + (f", + the corpus copy {format_bytes(corpus_bytes)})" if corpus_bytes else ")"))
    return float(vectors + corpus_bytes), text


__all__ = ["SENTENCE_BYTES", "corpus_lines", "corpus_size", "index_disk"]
