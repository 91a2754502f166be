"""What the strategies that ask a causal LM share (``mdl``, ``topk_cone``): the stage's LM as a
:class:`~pgra.icl.scoring.LabelScorer` (summed log-probabilities of continuations after prompts), loaded when first
needed and freed by ``release``, and its cost counted into the selection's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .encoded import EncodedSelector


class LMScoredSelector(EncodedSelector):
    """An :class:`~pgra.selection.encoded.EncodedSelector` that scores prompts with the stage's causal LM."""

    _scorer: Any = None

    def _fit_encoded(self) -> None:
        if not self.lm:
            raise InputError(f"{self.name} needs a causal LM (the stage's lm)", field="lm")

    @property
    def scorer(self) -> Any:
        """The stage's LM, loaded on first use."""
        if self._scorer is None:
            from ..icl.scoring import LabelScorer

            self._scorer = LabelScorer(self.lm, device=self.device, dtype=self.dtype)
        return self._scorer

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(log-likelihoods, token counts)`` of each continuation after each prompt (``(prompts, continuations)``
        arrays), the LM's work added to the selection's cost."""
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

    def describe(self) -> dict:
        return {**super().describe(), "lm": self.lm}
