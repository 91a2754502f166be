"""``skill_knn``: nearest neighbours over LLM-rewritten skill descriptions (An et al. 2023; docs/selectors.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.config import MAX_BATCH, MAX_ITEMS, MAX_TOKENS, option
from ..core.errors import InputError
from ..tasks.loaders import Example
from .base import STRATEGIES, Selector, order_by_similarity, reverse_option
from .encoded import CachedEncoder, EncoderOptions, top_allowed
from .rewrite import SkillRewriter, read_annotations

SKILL_VARIANTS = ("single", "consistency", "distinctiveness")


@dataclass
class SkillKnnOptions(EncoderOptions):
    """``skill_knn``'s options: the annotated rewrites, the rewriting LM, the variant, the sentence encoder."""

    annotations: str = option("", io="in", flag="--skill-annotations",
                              help="skill_knn: JSONL of annotated {\"input\", \"skill\"} demonstrations")
    rewrite_lm: str = option("", io="in", flag="--skill-lm", help="skill_knn: causal LM that rewrites; default: the "
                                                                  "stage's LM")
    instruction: str = option("Describe the skill needed to classify each sentence, without giving its answer.",
                              help="skill_knn: the line before the annotated demonstrations")
    variant: str = option("single", flag="--skill-variant", choices=SKILL_VARIANTS,
                          help="skill_knn: one rewrite, or m rewrites with shuffled demonstration order "
                               "(consistency: cosine of mean embeddings; distinctiveness: max cosine over pairs)")
    rewrites: int = option(5, min=1, max=MAX_ITEMS, help="skill_knn: rewrites per input for the two variants (m)")
    max_new_tokens: int = option(32, min=1, max=MAX_TOKENS, help="skill_knn: longest rewrite in tokens")
    batch_size: int = option(16, cosmetic=True, min=1, max=MAX_BATCH, help="skill_knn: inputs per generation batch")
    reverse: bool = reverse_option()


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.clip(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12, None)


def skill_similarities(queries: np.ndarray, train: np.ndarray, variant: str) -> np.ndarray:
    """``(n_queries, n_train)`` from embeddings of shape ``(rewrites, n, dim)`` per side."""
    if variant == "single":
        return _unit(queries[0]) @ _unit(train[0]).T
    if variant == "consistency":
        return _unit(queries.mean(0)) @ _unit(train.mean(0)).T
    q, t = _unit(queries), _unit(train)  # distinctiveness: max over every pair of rewrites
    return np.einsum("rqd,std->rsqt", q, t).max(axis=(0, 1))


@STRATEGIES.register
class SkillKnnSelector(Selector):
    """Nearest training examples by their skill descriptions."""

    name = "skill_knn"
    options = SkillKnnOptions

    @classmethod
    def uses_seed(cls, num_demos: int, settings) -> bool:
        """Only the m-rewrite variants shuffle the annotated demonstrations with the seed."""
        return num_demos > 0 and settings.variant != "single" and settings.rewrites > 1

    @property
    def n_rewrites(self) -> int:
        return 1 if self.settings.variant == "single" else self.settings.rewrites

    def _fit(self) -> None:
        s = self.settings
        if not s.annotations:
            raise InputError("skill_knn needs a file of annotated input -> skill demonstrations",
                             field="skill_annotations")
        lm = s.rewrite_lm or self.lm
        if not lm:
            raise InputError("skill_knn needs a causal LM to rewrite inputs", field="rewrite_lm")
        if not s.encoder:
            raise InputError("skill_knn needs a sentence encoder", field="demo_encoder")
        self.rewriter = SkillRewriter(lm, read_annotations(s.annotations), s.instruction, s.max_new_tokens,
                                      s.batch_size, s.cache_dir, seed=self.seed, device=self.device,
                                      dtype=self.dtype, show_progress=self.show_progress)
        self.encoder = CachedEncoder(s, self.device, self.show_progress, self.loaded_encoder)
        self.train_rewrites = self._rewrite([ex.text for ex in self.train])
        self.train_vectors = np.stack([self.encoder.encode(r) for r in self.train_rewrites])

    def _rewrite(self, texts: list[str]) -> list[list[str]]:
        """Per rewrite variant, the rewrites of ``texts`` (each distinct rewrite costed once, cached ones as made)."""
        out = [[r.text for r in self.rewriter.rewrite(texts, v)] for v in range(self.n_rewrites)]
        r = self.rewriter
        self.cost.lm_calls, self.cost.lm_tokens, self.cost.rewrites_cached = r.cost.calls, r.cost.tokens, r.cached
        self.cost.rewrites_empty = r.empty
        return out

    def release(self) -> None:
        if hasattr(self, "rewriter"):
            self.rewriter.release()

    def rewrites_of(self, queries: Sequence[Example]) -> list[list[str]]:
        """The rewrites of ``queries`` (per variant), e.g. to inspect what the LM wrote."""
        return self._rewrite([q.text for q in queries])

    def select(self, queries: Sequence[Example]) -> list[list[int]]:
        if not queries:
            return []
        rewrites = self.rewrites_of(queries)
        vectors = np.stack([self.encoder.encode(r, cache=False) for r in rewrites])
        scores = skill_similarities(vectors, self.train_vectors, self.settings.variant)
        return [order_by_similarity(top_allowed(scores[i], self.allowed(q), self.num_demos), self.settings.reverse)
                for i, q in enumerate(queries)]

    def describe(self) -> dict:
        s = self.settings
        lm = self.rewriter.fingerprint if hasattr(self, "rewriter") else (s.rewrite_lm or self.lm)
        return {**super().describe(), "encoder": s.encoder, "pooler": s.pooler, "rewrite_lm": lm,
                "annotations": [a.__dict__ for a in self.rewriter.annotations] if hasattr(self, "rewriter") else
                s.annotations, "instruction": s.instruction, "variant": s.variant, "rewrites": self.n_rewrites,
                "max_new_tokens": s.max_new_tokens, "reverse": s.reverse}
