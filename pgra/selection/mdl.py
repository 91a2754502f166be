"""``mdl``: self-adaptive in-context learning (Wu et al. 2022; docs/selectors.md)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import MAX_ITEMS, option
from ..lm.prompts import build_prompt
from ..tasks.loaders import Example
from .base import STRATEGIES, order_by_similarity, reverse_option
from .encoded import EncoderOptions, top_allowed
from .lm_scored import LMScoredSelector


@dataclass
class MDLOptions(EncoderOptions):
    """``mdl``'s options: the sentence encoder, the candidates, the sets ranked, the order of the first set."""

    mdl_candidates: int = option(30, min=1, max=MAX_ITEMS, omit_default=True,
                                 help="mdl: nearest training inputs per query the sets are drawn from")
    mdl_samples: int = option(10, min=1, max=MAX_ITEMS, omit_default=True,
                              help="mdl: candidate sets per query (the nearest m, then random subsets and orders)")
    reverse: bool = reverse_option()


def label_entropy(logp: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row's label distribution, from summed label-word log-likelihoods."""
    p = np.exp(logp - logp.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return -(p * np.log(np.clip(p, 1e-300, None))).sum(axis=-1)


@STRATEGIES.register
class MDLSelector(LMScoredSelector):
    """The candidate set of least label entropy per query (ties: the earlier set)."""

    name = "mdl"
    options = MDLOptions
    described = ("mdl_candidates", "mdl_samples", "reverse")

    @classmethod
    def uses_seed(cls, num_demos: int, settings) -> bool:
        return num_demos > 0 and settings.mdl_samples > 1

    def candidate_sets(self, query: Example, relevance: np.ndarray) -> list[list[int]]:
        """The query's candidate sets, each in prompt order."""
        s = self.settings
        near = top_allowed(relevance, self.allowed(query), max(s.mdl_candidates, self.num_demos))
        m = min(self.num_demos, len(near))
        sets = [order_by_similarity(near[:m], s.reverse)]
        rng = np.random.default_rng([self.seed, zlib.crc32(query.text.strip().encode())])
        for _ in range(s.mdl_samples - 1):
            sets.append([near[i] for i in rng.choice(len(near), size=m, replace=False).tolist()])
        return sets

    def select_new(self, queries: Sequence[Example]) -> list[list[int]]:
        rel = self.query_units(queries) @ self.train_units.T
        sets = [self.candidate_sets(q, rel[i]) for i, q in enumerate(queries)]
        words = [self.task.demo_words[lab] for lab in self.task.labels]
        prompts = [build_prompt(self.task, [self.train[j] for j in demos], q.text)
                   for q, rows in zip(queries, sets, strict=True) for demos in rows]
        logp, _ = self.score(prompts, words)
        entropy, out, at = label_entropy(logp), [], 0
        for rows in sets:
            out.append(rows[int(np.argmin(entropy[at:at + len(rows)]))])
            at += len(rows)
        return out
