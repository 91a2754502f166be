"""``query_likelihood``: UPR (Sachan et al. 2022, "Improving Passage Retrieval with Zero-Shot Question
Generation"): a candidate's score is the mean log-probability of the input given the candidate,
``mean_t log p(x_t | prompt(e), x_<t)``, under a causal LM with ``prompt(e) = template.format(evidence=e)``.

It runs on the rerank config's own LM block (``lm``, ``dtype``, ``max_tokens_per_batch`` ...) through the
in-context learning scorer (:meth:`pgra.lm.label_scoring.LabelScorer.score_continuations`): each distinct candidate's
prompt runs once in token-budgeted batches, however many inputs retrieved it, and its KV cache is shared by those
inputs' tokens; the joint tokenisation is checked at the seam (a pair that merges runs whole), and the scorer's
cost record (prompts run plus pairs run whole, tokens run) is the stage's ``cost``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.config import option
from ..core.errors import InputError
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
    score_name = "log-probability"  # mean per token of the input
    options = QueryLikelihoodOptions
    uses = ("k", "top_d", "splits", "lm", "dtype", "attn_implementation", "max_context")
    model_field = "lm"

    def __init__(self, cfg: Any, task, corpus=None, candidates=None) -> None:
        super().__init__(cfg, task, corpus, candidates)
        if "{evidence}" not in self.settings.template:
            raise InputError("the template must hold {evidence}", field="rerank.query_likelihood.template")
        self.scorer = None

    def load(self) -> None:
        from ..lm.label_scoring import LabelScorer

        self.scorer = LabelScorer(self.cfg.lm, **self.cfg.lm_settings(), trust_remote_code=self.cfg.trust_remote_code)
        # the weights now, before the stage writes anything: an LM whose head its checkpoint lacks (it would be
        # initialised at random) is refused here, not after the output folder was touched
        self.scorer.model  # noqa: B018

    def prompt(self, evidence: str) -> str:
        return self.settings.template.replace("{evidence}", evidence)

    def scores(self, queries: Sequence[str], candidates: Sequence[Sequence[dict[str, Any]]]) -> list[np.ndarray]:
        """Each distinct candidate's prompt runs once for every query that retrieved it (its KV cache shared by
        their tokens): the LM work grows with the distinct candidates plus the pairs' input tokens, not with the
        pairs' prompts."""
        if self.scorer is None:
            self.load()
        prompts: dict[str, int] = {}  # a distinct prompt -> its row
        inputs: list[list[str]] = []  # per prompt row, the queries scored after it
        where = []  # per query, per candidate: (prompt row, position among that row's queries)
        for q, cs in zip(queries, candidates, strict=True):
            row = []
            for c in cs:
                i = prompts.setdefault(self.prompt(c["text"]), len(prompts))
                if i == len(inputs):
                    inputs.append([])
                row.append((i, len(inputs[i])))
                inputs[i].append(q)
            where.append(row)
        logp, counts = self.scorer.score_continuations(list(prompts), inputs,
                                                       show_progress=self.cfg.show_progress)
        return [np.array([logp[i][j] / counts[i][j] for i, j in row], dtype=np.float64) for row in where]

    def describe(self) -> dict[str, Any]:
        from ..storage.artifacts import model_fingerprint

        return {"lm": self.cfg.lm, "lm_fingerprint": model_fingerprint(self.cfg.lm)}

    def cost(self):
        from ..lm.causal_lm import LMCost

        return LMCost(self.scorer.cost.calls, self.scorer.cost.tokens) if self.scorer is not None else LMCost()


__all__ = ["QueryLikelihood", "QueryLikelihoodOptions", "UPR_TEMPLATE"]
