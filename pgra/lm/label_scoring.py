"""Label-word log-likelihoods after a prompt, from any causal LM: the in-context learning classifier's scores.

Each prompt runs once and its KV cache is shared by its label words, whose tokens come from the joint
tokenisation of ``p + " " + w`` (a pair that does not extend the prompt's tokens runs whole): the result equals
:meth:`LabelScorer.score_naive`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core.errors import InputError
from ..core.progress import progress
from .causal_lm import CausalLM, LMCost
from .kv import build_cache, cache_layers, output_cache
from .tokens import pad_sequences


@dataclass
class ScoreStats(LMCost):
    """The scorer's cost record (``calls``, ``tokens``) and its own counters."""

    forwards: int = 0
    prompts: int = 0
    uncached_pairs: int = 0


class LabelScorer(CausalLM):
    """Summed log-probabilities of label words after prompts (``score``), with the naive reference beside it.

        scorer = pgra.LabelScorer("models/smollm2-135m")
        logp, n_tokens = scorer.score(["Is the sky blue? The answer is"], ["yes", "no"])
    """

    cost: ScoreStats

    def __init__(self, lm: str, device: str | None = None, dtype: str | None = None,
                 attn_implementation: str | None = None, max_tokens_per_batch: int = 4096, max_batch_size: int = 16,
                 max_context: int | None = None, trust_remote_code: bool = False, device_map: str | None = None) -> None:
        super().__init__(lm, device, dtype, attn_implementation or "auto", max_tokens_per_batch, max_batch_size,
                         max_context, trust_remote_code, needs="in-context learning", device_map=device_map)
        self.cost = ScoreStats()

    @property
    def lm(self) -> str:
        return self.name_or_path

    @property
    def stats(self) -> ScoreStats:
        """The cost record (``tokens_run``, ``prompts``, ``uncached_pairs`` ...)."""
        return self.cost

    def word_tokens(self, prompt_ids: list[int], prompt: str, word: str) -> list[int] | None:
        """The label word's tokens after the prompt's in the joint tokenisation; None when the seam merged."""
        joint = self.ids(prompt + " " + word)
        if len(joint) > len(prompt_ids) and joint[: len(prompt_ids)] == prompt_ids:
            return joint[len(prompt_ids):]
        return None

    def _forward(self, keep: int, **kwargs) -> torch.Tensor:
        """Log-probabilities (float32) of the last ``keep`` positions."""
        model = self.model
        if self.accepts("logits_to_keep"):
            kwargs["logits_to_keep"] = keep
        out = model(**kwargs)
        self.cost.forwards += 1
        return torch.log_softmax(out.logits[:, -keep:].float(), dim=-1), out

    @torch.inference_mode()
    def _whole(self, ids: list[int], n_target: int) -> float:
        """Sum of log-probabilities of the last ``n_target`` tokens of one whole sequence."""
        t = torch.as_tensor([ids], device=self.device)
        logp, _ = self._forward(n_target + 1, input_ids=t, attention_mask=torch.ones_like(t), use_cache=False)
        self.count(len(ids))
        targets = t[0, -n_target:]
        return float(logp[0, :-1].gather(1, targets[:, None]).sum())

    @torch.inference_mode()
    def score(self, prompts: Sequence[str], words: Sequence[str],
              show_progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(log-likelihoods, token counts)``, each ``(len(prompts), len(words))``."""
        logp, counts = self.score_continuations(prompts, [words] * len(prompts), show_progress)
        shape = (len(prompts), len(words))
        return (np.array(logp, dtype=np.float64).reshape(shape), np.array(counts, dtype=np.int64).reshape(shape))

    @torch.inference_mode()
    def score_continuations(self, prompts: Sequence[str], continuations: Sequence[Sequence[str]],
                            show_progress: bool = False) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per prompt ``i``, ``log P( + c | prompts[i])`` and token count of each of its own continuations."""
        n = len(prompts)
        if len(continuations) != n:
            raise ValueError(f"{n} prompts but {len(continuations)} lists of continuations")
        logp = [np.zeros(len(c), dtype=np.float64) for c in continuations]
        counts = [np.zeros(len(c), dtype=np.int64) for c in continuations]
        seqs = [self.ids(p) for p in prompts]
        conts = [[self.word_tokens(s, p, w) for w in ws] for s, p, ws in zip(seqs, prompts, continuations,
                                                                              strict=True)]
        longest = max((len(c) for row in conts for c in row if c), default=1)
        for i, s in enumerate(seqs):
            if len(s) + longest > self.max_context:
                raise InputError(f"prompt {i + 1} has {len(s)} tokens; with its label words that is more than "
                                 f"{self.lm}'s context of {self.max_context}", field="num_demos")
        self.cost.prompts += n
        self.cost.calls += n
        bar = progress(total=n, desc="label scoring", unit=" prompts", disable=not show_progress)
        for batch in self.batches([len(s) for s in seqs], longest):
            self._score_batch(batch, seqs, conts, logp, counts)
            bar.update(len(batch))
        bar.close()
        for i in range(n):  # pairs whose joint tokenisation merged across the seam: whole sequences
            for j, c in enumerate(conts[i]):
                if c is None:
                    joint = self.ids(prompts[i] + " " + continuations[i][j])
                    target = max(1, len(joint) - len(seqs[i]))
                    logp[i][j], counts[i][j] = self._whole(joint, target), target
                    self.cost.uncached_pairs += 1
                    self.cost.calls += 1
        return logp, counts

    def _score_batch(self, batch: list[int], seqs, conts, logp: list[np.ndarray], counts: list[np.ndarray]) -> None:
        ids, mask = pad_sequences([seqs[i] for i in batch], self.pad_id, side="left")
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        first, out = self._forward(1, input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                   position_ids=pos.to(self.device), use_cache=True)
        self.count(int(mask.sum()))
        first = first[:, -1]
        pairs = []  # (row in batch, word) whose word has more than one token
        for r, i in enumerate(batch):
            for j, c in enumerate(conts[i]):
                if c is None:
                    continue
                logp[i][j], counts[i][j] = float(first[r, c[0]]), len(c)
                if len(c) > 1:
                    pairs.append((r, j))
        if not pairs:
            return
        layers = cache_layers(output_cache(out))
        width_p = ids.shape[1]
        longest = max(len(conts[batch[r]][j]) for r, j in pairs) - 1
        per_chunk = max(1, self.max_tokens_per_batch // (width_p + longest))
        for start in range(0, len(pairs), per_chunk):
            chunk = pairs[start:start + per_chunk]
            rows = torch.as_tensor([r for r, _ in chunk], device=self.device)
            inputs = [conts[batch[r]][j][:-1] for r, j in chunk]
            c_ids, c_mask = pad_sequences(inputs, self.pad_id)
            width = c_ids.shape[1]
            cache = build_cache([(k.index_select(0, rows), v.index_select(0, rows)) for k, v in layers])
            full_mask = torch.cat([mask.index_select(0, rows.cpu()), c_mask], dim=1)
            start_pos = mask.sum(1).index_select(0, rows.cpu())
            c_pos = start_pos[:, None] + torch.arange(width)[None, :]
            lp, _ = self._forward(width, input_ids=c_ids.to(self.device), attention_mask=full_mask.to(self.device),
                                  position_ids=c_pos.to(self.device), use_cache=True, **{self.cache_kwarg: cache})
            self.count(int(c_mask.sum()))
            for q, (r, j) in enumerate(chunk):
                c = conts[batch[r]][j]
                targets = torch.as_tensor(c[1:], device=self.device)
                logp[batch[r]][j] += float(lp[q, : len(c) - 1].gather(1, targets[:, None]).sum())

    def score_naive(self, prompts: Sequence[str], words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The reference: every ``prompt + " " + word`` as one whole sequence, no cache, no batching."""
        logp = np.zeros((len(prompts), len(words)))
        counts = np.zeros((len(prompts), len(words)), dtype=np.int64)
        for i, p in enumerate(prompts):
            n_prompt = len(self.ids(p))
            for j, w in enumerate(words):
                joint = self.ids(p + " " + w)
                counts[i, j] = max(1, len(joint) - n_prompt)
                logp[i, j] = self._whole(joint, int(counts[i, j]))
        return logp, counts
