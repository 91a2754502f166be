"""The in-context learning classifier: select each input's demonstrations, build the prompt, score label words.

The prompt is the reranker's (``Follow the demonstrations:`` + demonstrations + P(x) + ``\\nThe answer is``) and
the label words are the task's demonstration words, so every prediction is a valid label. When a prompt does not
fit the LM's context, demonstrations are dropped from the far end (away from the input) and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from ..lm.causal_lm import LMCost
from ..lm.label_scoring import LabelScorer
from ..lm.prompts import build_prompt
from ..results.predictions import prediction_line
from ..selection import get_selector
from ..selection.settings import SelectorSettings
from ..tasks import Example, TaskSpec, check_label_ids
from .config import ICLConfig


def label_probabilities(logp: np.ndarray, counts: np.ndarray, length_normalise: bool) -> np.ndarray:
    """Softmax over the labels of their (summed or per-token mean) log-likelihoods."""
    s = logp / counts if length_normalise else logp
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(axis=1, keepdims=True)


class ICLClassifier:
    """Predict labels of a task's inputs from m selected training demonstrations with a causal LM."""

    def __init__(self, cfg: ICLConfig, task: TaskSpec, train: Sequence[Example], settings: SelectorSettings) -> None:
        self.cfg, self.task = cfg, task
        self.selector = get_selector(cfg.selection, cfg.num_demos, cfg.seed, settings, lm=cfg.lm, device=cfg.device,
                                     show_progress=cfg.show_progress, dtype=cfg.dtype).fit(task, train)
        self._scorer: LabelScorer | None = None
        self.words = [task.demo_words[lab] for lab in task.labels]
        self.demos_dropped = 0

    @property
    def scorer(self) -> LabelScorer:
        """The label-scoring LM, loaded on first use (after the selection freed its own models)."""
        if self._scorer is None:
            cfg = self.cfg
            scorer = LabelScorer(cfg.lm, **cfg.lm_settings(), trust_remote_code=cfg.trust_remote_code)
            # label words the LM's tokenizer cannot tell apart (the same tokens, or unknown) are refused
            tok = scorer.tokenizer
            check_label_ids(self.task, tok, [tok(" " + w, add_special_tokens=False)["input_ids"] for w in self.words],
                            "demo_words", cfg.lm)
            self._scorer = scorer
        return self._scorer

    def prepare(self, records: Sequence[dict[str, Any]]) -> None:
        """Select the demonstrations of ``records`` now (e.g. every split's, so Skill-KNN rewrites them all) and
        free the selection's models before the scoring LM loads; ``predict`` then finds them cached."""
        self.selector.select([Example(str(r["id"]), r["text"], r.get("label")) for r in records])
        self.selector.release()

    def prompt(self, demos: list[Example], text: str) -> tuple[str, list[Example]]:
        """The prompt of ``text`` and the demonstrations it kept (dropped from the far end until it fits)."""
        longest = max(len(self.scorer.tokenizer(" " + w, add_special_tokens=False)["input_ids"]) for w in self.words)
        while True:
            p = build_prompt(self.task, demos, text)
            if not demos or len(self.scorer.ids(p)) + longest + 1 <= self.scorer.max_context:
                return p, demos
            demos = demos[1:]
            self.demos_dropped += 1

    def predict(self, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Predictions-schema lines: ``evidence``, the demonstration ids in prompt order; ``demo_labels``."""
        queries = [Example(str(r["id"]), r["text"], r.get("label")) for r in records]
        prompts, used = [], []
        selected = self.selector.select_examples(queries)
        self.selector.release()
        for q, demos in zip(queries, selected, strict=True):
            p, kept = self.prompt(demos, q.text)
            prompts.append(p)
            used.append(kept)
        logp, counts = self.scorer.score(prompts, self.words, show_progress=self.cfg.show_progress)
        probs = label_probabilities(logp, counts, self.cfg.length_normalise)
        lines = []
        for rec, demos, p in zip(records, used, probs, strict=True):
            scores = {lab: float(x) for lab, x in zip(self.task.labels, p, strict=True)}
            line = prediction_line(rec, self.task.labels[int(np.argmax(p))], scores, [d.id for d in demos])
            line["demo_labels"] = [d.label for d in demos]
            lines.append(line)
        return lines

    def cost(self) -> dict[str, int]:
        """LM inputs read and tokens run: the selection's (Skill-KNN's rewrites) plus the label scoring."""
        selection = asdict(self.selector.cost)
        scoring = self._scorer.cost if self._scorer is not None else LMCost()
        return {**(LMCost.from_dict(selection) + scoring).as_dict(), "selection": selection,
                "demos_dropped": self.demos_dropped}
