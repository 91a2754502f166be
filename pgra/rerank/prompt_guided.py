"""``prompt_guided``: the paper's reranker (Eq. 3), the default of ``rerank.reranker``.

p_j = softmax_j(q . e_j) over a query's k candidates, q and e_j the LM's last-token embeddings of the query and of
each candidate under the same prompt of m demonstrations. Its options are the rerank config's own top-level
fields (``lm``, ``num_demos``, ``demo_selection``, ``demos``, ``cache_dir`` ... and the LM block), as before the
family: its stage key is exactly the one prompt-guided folders always had. Its stage, with the demonstrations'
selection and the persistent embedding caches, is :func:`pgra.rerank.reranker.rerank`; the in-memory scorer it
shares with ``Pipeline`` is :class:`pgra.rerank.core.PromptGuidedReranker`. This module stays light (no torch at import).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import numpy as np

from ..registry import plug_in_key
from .base import RERANKERS, Reranker


@RERANKERS.register
class PromptGuided(Reranker):
    """Scores = the softmax of Eq. 3 under one shared list of demonstrations (``demos``; the stage selects them
    with ``demo_selection`` and caches every embedding)."""

    name = "prompt_guided"
    title = "PGRA (prompt-guided)"
    score_name = "probability"

    def __init__(self, cfg: Any, task, corpus=None, candidates=None, demos: Sequence[Any] = ()) -> None:
        super().__init__(cfg, task, corpus, candidates)
        self.demos = list(demos)
        self._inner = None

    def load(self) -> None:
        from .core import PromptGuidedReranker as Inner

        self._inner = Inner.from_config(self.cfg, self.task, self.demos)

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        from .scoring import score_candidates

        if self._inner is None:
            self.load()
        q = self._inner.embed(list(queries), self.demos)
        out = []
        for i, cs in enumerate(candidates):
            e = self._inner.embed([c["text"] for c in cs], self.demos)
            out.append(score_candidates(q[i], e, len(cs))[1])
        return out

    def cost(self):
        from ..causal_lm import LMCost

        return self._inner.embedder.stats if self._inner is not None else LMCost()

    @classmethod
    def key_settings(cls, cfg: Any) -> dict[str, Any]:
        """Every defining field of the rerank config but the other rerankers' sections, and the demonstrations'
        settings by their own key: what prompt-guided stage keys always held (and a plug-in's modules: a subclass's,
        its demonstration strategy's)."""
        from ..config import result_settings
        from ..selection.base import STRATEGIES, settings_key

        others = tuple(f.name for f in fields(cfg) if f.name in RERANKERS and f.name != cls.name)
        return {**result_settings(cfg, without=("out", "candidates", *others)), "demos": settings_key(cfg.demos),
                **plug_in_key(cls), **plug_in_key(STRATEGIES.part(cfg.demo_selection), "demo_selection_plug_in")}


__all__ = ["PromptGuided"]
