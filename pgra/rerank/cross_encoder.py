"""``cross_encoder``: a sequence-classification model reads each (query, candidate) pair and scores it, with
sentence-transformers' ``CrossEncoder`` conventions, on any ``AutoModelForSequenceClassification`` checkpoint in a
local folder (an MS MARCO MiniLM cross-encoder, a BERT fine-tuned on pairs ...), loaded with ``local_files_only``:
a hub id is refused, so this reranker downloads nothing.

The conventions (``CrossEncoder.predict``): the tokenizer gets the pair as two texts (``[CLS] q [SEP] c [SEP]``
for BERT), truncated ``longest_first`` to ``max_length``, padded per batch; a one-label model's score is the
sigmoid of its logit, a model with several labels scores the softmax probability of label ``label`` (default the
last: "relevant" of a two-way classifier). Why these conventions and not the ``rerankers`` library:
docs/rerankers.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import MAX_BATCH, MAX_TOKENS, option
from ..core.errors import InputError
from ..stages import ModelNeed
from .base import RERANKERS, Reranker

# what ``rerank.cross_encoder.model`` must be (said when a model's classification head would be random)
CROSS_ENCODER_NEEDED = ("a sequence-classification model trained to score (query, passage) pairs, e.g. a "
                        "sentence-transformers cross-encoder such as ms-marco-MiniLM-L-6-v2 (an encoder or a causal "
                        "LM has no trained classification head)")


@dataclass
class CrossEncoderOptions:
    """Options of the ``cross_encoder`` reranker (``rerank.cross_encoder.*``)."""

    model: str = option("", help="local folder of a sequence-classification checkpoint (e.g. a sentence-"
                                 "transformers cross-encoder)")
    max_length: int = option(512, min=8, max=MAX_TOKENS, help="tokens of a (query, candidate) pair at most (longest_first)")
    label: int = option(-1, help="with several labels: the one whose softmax probability is the score (-1: the "
                                 "last; -n .. n-1 for n labels)")
    batch_size: int = option(32, min=1, max=MAX_BATCH, cosmetic=True, help="pairs per forward pass")


def pair_scores(logits: np.ndarray, label: int = -1) -> np.ndarray:
    """Scores from a batch of logits ``(pairs, labels)``: sigmoid of a single logit, else softmax[label]."""
    z = np.asarray(logits, dtype=np.float64)
    if z.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-z[:, 0]))
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True))[:, label]


@RERANKERS.register
class CrossEncoder(Reranker):
    name = "cross_encoder"
    title = "cross-encoder"
    score_name = "probability"
    options = CrossEncoderOptions
    uses = ("k", "top_d", "splits", "dtype")
    model_field = "cross_encoder.model"

    @classmethod
    def models(cls, rerank: Any) -> list[ModelNeed]:
        """Its model, a local folder only."""
        return [need._replace(local_only=True) for need in super().models(rerank)]

    def load(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from ..lm.causal_lm import load_trained
        from ..lm.loading import load_pretrained
        from ..runtime.device import resolve_device, resolve_dtype
        from ..storage.artifacts import model_fingerprint

        folder = self.settings.model
        if not folder or not Path(folder).expanduser().is_dir():
            raise InputError(f"the cross-encoder must be a local model folder (it is loaded from local files only), "
                             f"got {folder!r}", field="rerank.cross_encoder.model")
        self.device = resolve_device(self.cfg.device)
        dtype = resolve_dtype(self.cfg.dtype, self.device)
        self.tokenizer = load_pretrained(AutoTokenizer, folder, "cross-encoder's tokenizer",
                                         "rerank.cross_encoder.model", local_files_only=True)
        self.model = load_trained(AutoModelForSequenceClassification, folder, "cross-encoder",
                                  "rerank.cross_encoder.model", CROSS_ENCODER_NEEDED, local_files_only=True,
                                  dtype=dtype).to(self.device).eval()
        labels = int(self.model.config.num_labels)
        if not -labels <= self.settings.label < labels:
            raise InputError(f"the cross-encoder '{folder}' has {labels} label{'s' if labels > 1 else ''}, so the "
                             f"label must lie in {-labels} .. {labels - 1} (-1: the last), got {self.settings.label}",
                             field="rerank.cross_encoder.label")
        self.fingerprint = model_fingerprint(folder)
        self._calls = self._tokens = 0

    def describe(self) -> dict[str, Any]:
        return {"model": self.settings.model, "model_fingerprint": self.fingerprint}

    def logits(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        """The model's logits ``(pairs, labels)`` for ``(queries[i], texts[i])`` pairs, in batches."""
        import torch

        from ..runtime.cost import meter

        out = []
        for start in range(0, len(texts), self.settings.batch_size):
            q, t = list(queries[start:start + self.settings.batch_size]), list(texts[start:start + self.settings.batch_size])
            enc = self.tokenizer(q, t, padding=True, truncation="longest_first", max_length=self.settings.max_length,
                                 return_tensors="pt").to(self.device)
            with torch.inference_mode():
                out.append(self.model(**enc).logits.float().cpu().numpy())
            tokens = int(enc["attention_mask"].sum())
            self._calls, self._tokens = self._calls + len(t), self._tokens + tokens
            meter.add(self.settings.model, tokens)
        return np.concatenate(out) if out else np.zeros((0, 1))

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        pairs_q = [q for q, cs in zip(queries, candidates, strict=True) for _ in cs]
        pairs_t = [c["text"] for cs in candidates for c in cs]
        flat = pair_scores(self.logits(pairs_q, pairs_t), self.settings.label)
        bounds = np.cumsum([0, *(len(cs) for cs in candidates)])
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def cost(self):
        from ..lm.causal_lm import LMCost

        return LMCost(getattr(self, "_calls", 0), getattr(self, "_tokens", 0))


__all__ = ["CrossEncoder", "CrossEncoderOptions", "pair_scores"]
