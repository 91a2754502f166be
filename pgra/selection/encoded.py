"""Sentence embeddings of a selection's inputs, cached on disk (KATE and Skill-KNN encode the training set once)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import MAX_TOKENS, option
from ..core.errors import IncompleteArtifactError
from ..retrieval.dense_config import POOLERS
from ..storage.artifacts import load_npy, model_location, save_npy, write_json
from ..tasks.loaders import Example
from .base import Selector


@dataclass
class EncoderOptions:
    """The options of every strategy that embeds inputs with a sentence encoder (one shared set of options)."""

    encoder: str = option("", flag="--demo-encoder",
                          help="strategies that embed inputs (kate, skill_knn, mmr, votek, dpp, topk_cone): sentence "
                               "encoder (name or folder); default: the index's encoder")
    pooler: str = option("mean", flag="--demo-pooler", choices=POOLERS,
                         help="pooler of --demo-encoder (the index's own with the index's encoder)")
    max_length: int = option(128, min=1, max=MAX_TOKENS, help="tokens per encoded input (of --demo-encoder)")
    cache_dir: str = option("cache/selection", cosmetic=True, io="store",
                            help="encoded training sets and rewrites, kept across runs")


class CachedEncoder:
    """A :class:`~pgra.retrieval.encoder.DenseEncoder` whose raw encodings of a list of texts are cached on disk."""

    def __init__(self, settings: Any, device: str | None = None, show_progress: bool = False,
                 loaded: Any = None) -> None:
        self.settings, self.show_progress = settings, show_progress
        if loaded is not None and is_encoder_of(loaded, settings):
            # the index's encoder, already loaded: its weights are used (not loaded again) at this length limit
            self.encoder = copy.copy(loaded)
            self.encoder.max_length = settings.max_length
            return
        from ..retrieval.encoder import DenseEncoder

        self.encoder = DenseEncoder(settings.encoder, pooler=settings.pooler, max_length=settings.max_length,
                                    device=device)

    def key(self, texts: Sequence[str]) -> dict:
        return {"encoder": self.encoder.fingerprint, "pooler": self.settings.pooler,
                "max_length": self.settings.max_length,
                "texts": hashlib.sha256("\x00".join(texts).encode()).hexdigest(), "count": len(texts)}

    def encode(self, texts: Sequence[str], cache: bool = True) -> np.ndarray:
        """Raw pooled vectors of ``texts`` (read from the cache when these texts were encoded before)."""
        texts = list(texts)
        if not cache:
            return self.encoder.encode(texts, normalize=False)
        key = self.key(texts)
        folder = Path(self.settings.cache_dir) / "encoded" / hashlib.sha256(
            json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
        path = folder / "vectors.npy"
        if path.exists():
            try:
                vectors = load_npy(path)
                if vectors.shape == (len(texts), self.encoder.dim):
                    return vectors
            except IncompleteArtifactError:
                pass  # a damaged cache file is simply encoded again
        vectors = self.encoder.encode(texts, normalize=False, show_progress=self.show_progress)
        write_json(folder / "key.json", key)
        save_npy(path, vectors)
        return vectors


def is_encoder_of(encoder: Any, settings: Any) -> bool:
    """Whether a loaded encoder is the model ``settings`` name (its resolved folder or name, and its pooler)."""
    return (model_location(str(getattr(encoder, "name_or_path", ""))) == model_location(str(settings.encoder))
            and getattr(encoder, "pooler", None) == settings.pooler)


def similarities(queries: np.ndarray, train: np.ndarray, metric: str) -> np.ndarray:
    """``(n_queries, n_train)`` similarities: cosine, or negative Euclidean distance of the raw vectors."""
    q, t = np.asarray(queries, np.float64), np.asarray(train, np.float64)
    if metric == "cosine":
        q = q / np.clip(np.linalg.norm(q, axis=1, keepdims=True), 1e-12, None)
        t = t / np.clip(np.linalg.norm(t, axis=1, keepdims=True), 1e-12, None)
        return q @ t.T
    sq = (q * q).sum(1)[:, None] + (t * t).sum(1)[None, :] - 2 * q @ t.T
    return -np.sqrt(np.clip(sq, 0, None))


def top_allowed(scores: np.ndarray, allowed: list[int], m: int) -> list[int]:
    """The ``m`` best of the ``allowed`` positions by score, best first (ties keep training order)."""
    allowed_arr = np.asarray(allowed, dtype=np.int64)
    order = np.argsort(-scores[allowed_arr], kind="stable")[:m]
    return allowed_arr[order].tolist()


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` scaled to unit length (float64)."""
    x = np.asarray(x, np.float64)
    return x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12, None)


class EncodedSelector(Selector):
    """A strategy over the sentence encoder's embeddings (the training set encoded once, cached). Draws nothing."""

    draws = False

    def _fit(self) -> None:
        from ..core.errors import InputError

        if not self.settings.encoder:
            raise InputError(f"{self.name} needs a sentence encoder", field="demo_encoder")
        self.encoder = CachedEncoder(self.settings, self.device, self.show_progress, self.loaded_encoder)
        self.train_vectors = self.encoder.encode([ex.text for ex in self.train])
        self.train_units = unit_rows(self.train_vectors)
        self._fit_encoded()

    def _fit_encoded(self) -> None:
        """Preparation once the training set is encoded (none by default)."""
        return None

    def query_units(self, queries: Sequence[Example]) -> np.ndarray:
        """Unit embeddings of ``queries`` (not cached: a split's queries are encoded once)."""
        return unit_rows(self.encoder.encode([q.text for q in queries], cache=False))

    def record(self) -> dict:
        s = self.settings
        encoder = self.encoder.encoder.fingerprint if hasattr(self, "encoder") else s.encoder
        return {**super().record(), "encoder": encoder, "pooler": s.pooler, "max_length": s.max_length}
