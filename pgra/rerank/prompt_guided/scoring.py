"""The paper's Eq. 3 for one query: p_j = softmax_j(q . e_j) over its k candidates, then the top d."""

from __future__ import annotations

import numpy as np


def score_candidates(query: np.ndarray, evidence: np.ndarray, top_d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, probs)``: the top-``top_d`` candidate positions by probability (ties keep first-stage order)
    and the probability of every candidate.

        order, probs = pgra.score_candidates(q_vec, cand_vecs, top_d=16)
        kept = [candidates[j] for j in order]        # with probs[j] as the reranker's score
    """
    scores = np.asarray(evidence, dtype=np.float64) @ np.asarray(query, dtype=np.float64)
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    return np.argsort(-probs, kind="stable")[:top_d], probs

