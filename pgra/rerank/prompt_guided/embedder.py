"""Prompt-guided text embeddings from any causal LM (OPT, Llama, GPT-2, Gemma ...).

The embedding of a text t is the last layer's hidden state at the last token of
``prefix + P(t) + cue`` (the position that predicts the first answer token), L2-normalised.

Fast path (docs/stage2-reranking.md, *Fast*): the KV cache of what every prompt shares is computed once, split at
a token boundary of each *jointly tokenised* prompt, checked per text (a text whose tokens merge across the seam
continues from a shorter slice of it; one that does not extend the prefix runs on its own, uncached).
``embed_full`` is the plain way (whole prompts, padded batches): the reference for tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...core.errors import InputError
from ...core.progress import progress
from ...lm.causal_lm import CausalLM, LMCost, expand_cache
from ...lm.kv import SEAM_BACKOFF
from ...lm.tokens import fit_text, pad_sequences
from ...storage.artifacts import model_fingerprint
from . import prefix_attention

_SENTINEL = "\x00pgra-text\x00"


def output_dim(config) -> int:
    """Width of the LM's last hidden state: ``hidden_size``, except OPT models whose decoder projects its output
    down to ``word_embed_proj_dim`` (OPT-350m: 1024 -> 512)."""
    proj = getattr(config, "word_embed_proj_dim", None)
    return int(proj) if proj else int(config.hidden_size)


def shared_head(prefix: str, render: Callable[[str], str]) -> str:
    """What every text's prompt starts with: the demonstration prefix and the template's fixed text before the
    text (for wiki_topic, the question listing the 11 topics)."""
    rendered = render(_SENTINEL)
    return prefix + rendered[: rendered.index(_SENTINEL)] if _SENTINEL in rendered else prefix


def seam_groups(seqs: Sequence[list[int]], head: list[int]) -> tuple[dict[int, list[int]], list[int]]:
    """Where each prompt (token ids) leaves the shared ``head``: the longest ``split`` with
    ``seq[:split] == head[:split]``, from the whole head down to ``SEAM_BACKOFF`` tokens before its end (the
    tokenizer may merge the head's last characters with the text; checked per prompt on its joint tokenisation).
    Returns ``{split: [prompt indices]}`` and the prompts that match none (run whole)."""
    groups: dict[int, list[int]] = {}
    fallback = []
    low = max(1, len(head) - SEAM_BACKOFF)
    for i, seq in enumerate(seqs):
        split = next((n for n in range(len(head), low - 1, -1) if len(seq) > n and seq[:n] == head[:n]), None)
        if split is None:
            fallback.append(i)
        else:
            groups.setdefault(split, []).append(i)
    return groups, fallback


@dataclass
class EmbedStats(LMCost):
    """The embedder's cost record (:class:`pgra.lm.causal_lm.LMCost`: ``calls`` = texts embedded, ``tokens`` = tokens
    the LM ran, the prefix once + suffixes, or full prompts) and what manifests and benchmarks also report."""

    truncated: int = 0  # texts cut to fit the LM's context
    uncached: int = 0  # texts whose joint tokenisation did not extend the cached prefix

    @property
    def texts(self) -> int:
        return self.calls

    def record(self) -> dict[str, int]:
        """What a reranked manifest's ``embedding`` reports."""
        return {"texts": self.texts, "tokens_run": self.tokens_run, "truncated": self.truncated,
                "uncached": self.uncached}


class LMEmbedder(CausalLM):
    """Causal-LM hidden-state embedder with prefix KV reuse (the reranker's Eq. 3 vectors).

        embedder = pgra.LMEmbedder("models/smollm2-135m")
        task = pgra.get_task("wiki_topic")
        vectors = embedder.embed(["The planet orbits the sun"], pgra.demo_prefix(task, []), task.render, pgra.ANSWER_CUE)
    """

    cost: EmbedStats

    def __init__(self, model_name_or_path: str, device: str | None = None, dtype: str | None = None,
                 attn_implementation: str | None = None, max_tokens_per_batch: int = 16384,
                 max_batch_size: int = 64, max_context: int | None = None, trust_remote_code: bool = False,
                 device_map: str | None = None) -> None:
        super().__init__(model_name_or_path, device, dtype, attn_implementation or "auto", max_tokens_per_batch,
                         max_batch_size, max_context, trust_remote_code, head="none", needs="the reranker",
                         device_map=device_map)
        self.cost = EmbedStats()
        self.dim = output_dim(self.config)
        self._fingerprint: str | None = None
        self._prefix_attention: bool | None = None  # decided on the first batch (_shared_prefix_matches)

    @property
    def stats(self) -> EmbedStats:
        """The cost record (``texts``, ``tokens_run``, ``truncated``, ``uncached``)."""
        return self.cost

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.name_or_path)
        return self._fingerprint

    # ------------------------------------------------------------------ tokenisation

    def prompt_ids(self, prefix: str, render: Callable[[str], str], cue: str, text: str) -> list[int]:
        """Token ids of ``prefix + render(text) + cue``; the text (never prefix or cue) is cut to fit."""
        def build(t: str) -> list[int]:
            return self.ids(prefix + render(t) + cue)

        ids = build(text)
        if len(ids) <= self.max_context:
            return ids
        self.cost.truncated += 1
        ids, fits = fit_text(self.tokenizer, text, build, self.max_context)
        if not fits:
            raise InputError(f"the demonstration prefix and answer cue alone take {len(ids)} tokens, more "
                             f"than {self.name_or_path}'s context of {self.max_context}: use fewer or "
                             "shorter demonstrations", field="num_demos")
        return ids

    # ------------------------------------------------------------------ forward helpers

    def _last_hidden(self, out) -> torch.Tensor:
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None:
            raise InputError(f"{self.name_or_path} returns no hidden states (last_hidden_state)", field="lm")
        if hidden.shape[-1] != self.dim:
            raise InputError(f"{self.name_or_path} returns hidden states of width {hidden.shape[-1]}, not the "
                             f"{self.dim} its config implies", field="lm")
        return hidden

    @torch.inference_mode()
    def _run_padded(self, seqs: list[list[int]], padding_side: str = "right") -> torch.Tensor:
        """Last-token hidden states of whole sequences in one padded batch."""
        model = self.model
        ids, mask = pad_sequences(seqs, self.pad_id, side=padding_side)
        width = ids.shape[1]
        kwargs = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device), "use_cache": False}
        if self.accepts("position_ids"):
            kwargs["position_ids"] = (mask.cumsum(1) - 1).clamp(min=0).to(self.device)
        hidden = self._last_hidden(model(**kwargs))
        last = (mask.sum(1) - 1) if padding_side == "right" else torch.full((len(seqs),), width - 1)
        self.count(int(mask.sum()))
        return hidden[torch.arange(len(seqs)), last.to(self.device)]

    # ------------------------------------------------------------------ public API

    def embed_full(self, prompts: Sequence[str] | Sequence[list[int]], batch_size: int = 4,
                   padding_side: str = "right", sort_by_length: bool = False,
                   show_progress: bool = False) -> np.ndarray:
        """Embed whole prompts (strings or token ids) in padded batches: no prefix reuse."""
        seqs = [self.ids(p) if isinstance(p, str) else list(p) for p in prompts]
        out = np.empty((len(seqs), self.dim), dtype=np.float32)
        order = np.argsort([-len(s) for s in seqs], kind="stable") if sort_by_length else np.arange(len(seqs))
        for start in progress(range(0, len(seqs), batch_size), desc="embedding (full prompts)",
                              disable=not show_progress):
            idx = order[start:start + batch_size]
            vec = self._run_padded([seqs[i] for i in idx], padding_side)
            out[idx] = torch.nn.functional.normalize(vec.float(), dim=-1).cpu().numpy()
        self.cost.calls += len(seqs)
        return out

    @torch.inference_mode()
    def embed(self, texts: Sequence[str], prefix: str, render: Callable[[str], str], cue: str,
              show_progress: bool = False, desc: str = "embedding") -> np.ndarray:
        """Embed ``prefix + render(t) + cue`` for every text, reusing the prefix's KV cache."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        seqs = [self.prompt_ids(prefix, render, cue, t) for t in texts]
        own = self.ids(shared_head(prefix, render))
        groups, fallback = seam_groups(seqs, own)
        self.cost.uncached += len(fallback)
        bar = progress(total=len(seqs), desc=desc, unit=" texts", disable=not show_progress)
        if groups:
            # one KV cache of the longest shared head; a text whose tokens merge across the seam continues from
            # a shorter slice of it (a causal LM's first tokens' keys and values do not depend on what follows)
            longest = max(groups)
            head_kv = self.head_cache(own[:longest])
            for split, members in sorted(groups.items(), reverse=True):
                kv = [(k[:, :, :split], v[:, :, :split]) for k, v in head_kv]
                out[members] = self.embed_suffix_ids(own[:split], [seqs[i][split:] for i in members], bar,
                                                     prefix_kv=kv)
        self.cost.calls += len(fallback)
        for i in fallback:
            out[i] = torch.nn.functional.normalize(self._run_padded([seqs[i]]).float(), dim=-1).cpu().numpy()[0]
            bar.update(1)
        bar.close()
        return out

    @torch.inference_mode()
    def embed_suffix_ids(self, shared: list[int], suffixes: Sequence[list[int]], bar=None,
                         prefix_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> np.ndarray:
        """Unit vectors of ``shared + suffix`` for every suffix (token ids): the shared tokens' KV cache is
        computed once (or given as ``prefix_kv``), suffixes run longest first in batches under the token budget
        (shared tokens count)."""
        out = np.empty((len(suffixes), self.dim), dtype=np.float32)
        if not len(suffixes):
            return out
        if prefix_kv is None:
            prefix_kv = self.head_cache(list(shared))
        for batch in self.batches([len(x) for x in suffixes], extra=len(shared)):
            vec = self._run_suffixes([list(suffixes[i]) for i in batch], prefix_kv, len(shared))
            out[batch] = torch.nn.functional.normalize(vec.float(), dim=-1).cpu().numpy()
            if bar is not None:
                bar.update(len(batch))
        self.cost.calls += len(suffixes)
        return out

    @classmethod
    def from_model(cls, model, tokenizer, max_tokens_per_batch: int = 16384, max_batch_size: int = 64,
                   max_context: int | None = None) -> LMEmbedder:
        """An embedder around a causal LM already in memory (without its LM head, e.g. ``OPTModel(config)``):
        benchmarks build the paper's architectures from configs with random weights. Without a ``tokenizer`` only
        :meth:`embed_suffix_ids` (token ids) works."""
        self = cls.__new__(cls)
        self.adopt(model, tokenizer, max_tokens_per_batch, max_batch_size, max_context)
        self.cost = EmbedStats()
        self.dim = output_dim(model.config)
        self._prefix_attention = None
        self._fingerprint = f"in-memory:{self.name_or_path}"
        return self

    def _run_suffixes(self, suffixes: list[list[int]], prefix_kv, split: int) -> torch.Tensor:
        """Last-token hidden states of ``head + suffix`` per suffix, continuing from the head's ``prefix_kv``:
        through the shared-prefix attention where this model matches the cache path, else through a cache."""
        if self._prefix_attention is None:  # once per model: the fast path must give what the cache path gives
            self._prefix_attention = self._shared_prefix_matches(suffixes[:4], prefix_kv, split)
        run = self._forward_shared if self._prefix_attention else self._forward_cached
        vec = run(suffixes, prefix_kv, split)
        self.count(sum(len(s) for s in suffixes))
        return vec

    def _shared_prefix_matches(self, suffixes: list[list[int]], prefix_kv, split: int) -> bool:
        if not (self.accepts("position_ids") and prefix_attention.register()):
            return False
        try:
            fast = self._forward_shared(suffixes, prefix_kv, split).float()
        except Exception:  # a model whose attention does not go through transformers' registry
            return False
        ref = self._forward_cached(suffixes, prefix_kv, split).float()
        tol = 1e-4 if self.dtype == torch.float32 else 2e-2
        err = (torch.nn.functional.normalize(fast, dim=-1) - torch.nn.functional.normalize(ref, dim=-1)).abs().max()
        return bool(err <= tol)

    def _forward_cached(self, suffixes: list[list[int]], prefix_kv, split: int) -> torch.Tensor:
        n = len(suffixes)
        ids, suffix_mask = pad_sequences(suffixes, self.pad_id)
        width = ids.shape[1]
        mask = torch.cat([torch.ones((n, split), dtype=torch.long), suffix_mask], dim=1)
        cache = expand_cache(prefix_kv, n)
        kwargs = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device),
                  self.cache_kwarg: cache, "use_cache": True}
        if self.accepts("position_ids"):
            kwargs["position_ids"] = (split + torch.arange(width)).unsqueeze(0).expand(n, -1).to(self.device)
        return self._last_tokens(self._last_hidden(self.model(**kwargs)), suffixes)

    def _forward_shared(self, suffixes: list[list[int]], prefix_kv, split: int) -> torch.Tensor:
        n = len(suffixes)
        ids, suffix_mask = pad_sequences(suffixes, self.pad_id)
        position_ids = (split + torch.arange(ids.shape[1])).unsqueeze(0).expand(n, -1)
        with prefix_attention.shared_prefix(self.model, prefix_kv):
            out = self.model(input_ids=ids.to(self.device), attention_mask=suffix_mask.to(self.device),
                             position_ids=position_ids.to(self.device), use_cache=False)
        return self._last_tokens(self._last_hidden(out), suffixes)

    def _last_tokens(self, hidden: torch.Tensor, suffixes: list[list[int]]) -> torch.Tensor:
        last = torch.as_tensor([len(s) - 1 for s in suffixes], device=self.device)
        return hidden[torch.arange(len(suffixes), device=self.device), last]
