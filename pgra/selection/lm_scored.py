"""What the strategies that ask a causal LM share (``mdl``, ``topk_cone``): a lazily loaded LabelScorer."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.errors import InputError
from ..tasks.loaders import Example
from .encoded import EncodedSelector


class LMScoredSelector(EncodedSelector):
    """An encoded selector that scores prompts with the stage's causal LM (subclasses implement :meth:`select_new`)."""

    _scorer: Any = None

    def _fit_encoded(self) -> None:
        if not self.lm:
            raise InputError(f"{self.name} needs a causal LM (the stage's lm)", field="lm")
        self._chosen: dict[str, list[int]] = {}

    @abstractmethod
    def select_new(self, queries: Sequence[Example]) -> list[list[int]]:
        """``select`` for queries not selected before."""

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        new = list({q.text: q for q in queries if q.text not in self._chosen}.values())
        if new:
            self._chosen.update(zip([q.text for q in new], self.select_new(new), strict=True))
        return [list(self._chosen[q.text]) for q in queries]

    @property
    def scorer(self) -> Any:
        """The stage's LM, loaded on first use."""
        if self._scorer is None:
            from ..lm.label_scoring import LabelScorer

            self._scorer = LabelScorer(self.lm, device=self.device, dtype=self.dtype)
        return self._scorer

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(log-likelihoods, token counts)`` of each continuation after each prompt, the LM's work counted."""
        scorer = self.scorer
        calls, tokens = scorer.cost.calls, scorer.cost.tokens
        out = scorer.score(list(prompts), list(continuations))
        self.cost.lm_calls += scorer.cost.calls - calls
        self.cost.lm_tokens += scorer.cost.tokens - tokens
        return out

    def release(self) -> None:
        if self._scorer is not None:
            self._scorer.release()
            self._scorer = None

    def record(self) -> dict:
        return {**super().record(), "lm": self.lm}
