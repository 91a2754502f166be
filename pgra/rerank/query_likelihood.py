"""``query_likelihood``: UPR (Sachan et al. 2022, "Improving Passage Retrieval with Zero-Shot Question
Generation"): a candidate's score is the mean log-probability of the input given the candidate,
``mean_t log p(x_t | prompt(e), x_<t)``, under a causal LM with ``prompt(e) = template.format(evidence=e)``.

It runs on the rerank config's own LM block (``lm``, ``dtype``, ``max_tokens_per_batch`` ...) through the
in-context learning scorer (:class:`pgra.icl.scoring.LabelScorer`): each candidate's prompt runs once in
token-budgeted batches and its KV cache is shared by the input's tokens, the joint tokenisation is checked at the
seam (a pair that merges runs whole), and its cost record (inputs scored, tokens run) is the stage's ``cost``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import option
from ..errors import InputError
from .base import RERANKERS, Reranker

UPR_TEMPLATE = "Passage: {evidence} Please write a sentence based on this passage."


@dataclass
class QueryLikelihoodOptions:
    """Options of the ``query_likelihood`` reranker (``rerank.query_likelihood.*``)."""

    template: str = option(UPR_TEMPLATE, help="the prompt before the input; {evidence} is the candidate (the input "
                                              "follows after a space)")


@RERANKERS.register
class QueryLikelihood(Reranker):
    name = "query_likelihood"
    title = "UPR (query likelihood)"
    options = QueryLikelihoodOptions
    uses = ("k", "top_d", "splits", "lm", "dtype", "attn_implementation", "max_context")

    def __init__(self, cfg: Any, task, corpus=None, candidates=None) -> None:
        super().__init__(cfg, task, corpus, candidates)
        if "{evidence}" not in self.settings.template:
            raise InputError("the template must hold {evidence}", field="rerank.query_likelihood.template")
        self.scorer = None

    def load(self) -> None:
        from ..icl.scoring import LabelScorer

        self.scorer = LabelScorer(self.cfg.lm, **self.cfg.lm_settings(), trust_remote_code=self.cfg.trust_remote_code)

    def prompt(self, evidence: str) -> str:
        return self.settings.template.replace("{evidence}", evidence)

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        if self.scorer is None:
            self.load()
        out = []
        for q, cs in zip(queries, candidates, strict=True):
            logp, counts = self.scorer.score([self.prompt(c["text"]) for c in cs], [q])
            out.append(logp[:, 0] / counts[:, 0])
        return out

    def describe(self) -> dict[str, Any]:
        from ..artifacts import model_fingerprint

        return {"lm": self.cfg.lm, "lm_fingerprint": model_fingerprint(self.cfg.lm)}

    def cost(self):
        from ..causal_lm import LMCost

        return LMCost(self.scorer.cost.calls, self.scorer.cost.tokens) if self.scorer is not None else LMCost()


__all__ = ["QueryLikelihood", "QueryLikelihoodOptions", "UPR_TEMPLATE"]
