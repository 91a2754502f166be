"""Skill-KNN's rewriting step: a causal LM turns each input into a skill description (greedy, batched, cached)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..core.progress import progress
from ..lm.causal_lm import CausalLM, LMCost, expand_cache, token_batches
from ..lm.kv import output_cache
from ..storage.artifacts import iter_jsonl, model_fingerprint


@dataclass(frozen=True)
class Annotation:
    """One annotated demonstration of the rewriting prompt."""

    input: str
    skill: str


def read_annotations(path: str | Path) -> list[Annotation]:
    """The ``{"input", "skill"}`` lines of an annotation file; a missing or empty field names the file and line."""
    path = Path(path)
    out = []
    for line, obj in iter_jsonl(path):
        for key in ("input", "skill"):
            if not isinstance(obj.get(key), str) or not obj[key].strip():
                raise InputError(f"missing or empty '{key}'", path=path, line=line, field=key)
        out.append(Annotation(obj["input"].strip(), obj["skill"].strip()))
    if not out:
        raise InputError("no annotated demonstrations (expected JSON lines with \"input\" and \"skill\")", path=path)
    return out


@dataclass
class Rewrite:
    text: str
    prompt_tokens: int
    new_tokens: int
    cached: bool = False


class SkillRewriter:
    """Rewrite inputs into skill descriptions with ``lm`` (greedy), caching every rewrite on disk."""

    def __init__(self, lm: str, annotations: list[Annotation], instruction: str, max_new_tokens: int = 32,
                 batch_size: int = 16, cache_dir: str | Path = "cache/selection", seed: int = 0,
                 device: str | None = None, dtype: str | None = None, show_progress: bool = False) -> None:
        self.lm, self.annotations, self.instruction = lm, annotations, instruction
        self.max_new_tokens, self.batch_size, self.seed = max_new_tokens, batch_size, seed
        self.device, self.dtype, self.show_progress = device, dtype, show_progress
        self.fingerprint = model_fingerprint(lm)
        self.path = Path(cache_dir) / "rewrites" / f"{self.fingerprint[:24]}.jsonl"
        self.cache = self._load_cache()
        self._lm: CausalLM | None = None  # loaded when an uncached rewrite is asked for
        self.empty = 0
        self.accounted: set[str] = set()  # prompts already counted in the cost below: each counts once
        self.cost = LMCost()  # each distinct rewrite once, a cached one at what it cost when made
        self.cached = 0

    # ----- cache -----
    def _load_cache(self) -> dict[str, dict]:
        if not self.path.exists():
            return {}
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # a torn last line of a killed run: drop it
            with open(self.path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
        return {obj["key"]: obj for _, obj in iter_jsonl(self.path)} if self.path.stat().st_size else {}

    def _append(self, entries: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries))
            f.flush()
            os.fsync(f.fileno())

    # ----- prompts -----
    def order(self, variant: int) -> list[Annotation]:
        """The annotations of rewrite ``variant``: file order for 0, a seeded shuffle for the others."""
        if variant == 0:
            return list(self.annotations)
        perm = np.random.default_rng([self.seed, variant]).permutation(len(self.annotations))
        return [self.annotations[i] for i in perm]

    def prompt(self, text: str, variant: int = 0) -> str:
        demos = "".join(f"Sentence: {a.input}\nSkill: {a.skill}\n\n" for a in self.order(variant))
        return f"{self.instruction}\n\n{demos}Sentence: {text.strip()}\nSkill:"

    @cached_property
    def _precision(self) -> str:
        """The rewrites' precision, part of their cache key (fp32's keys carry none, as before)."""
        import torch

        from ..runtime.device import resolve_device, resolve_dtype

        precision = resolve_dtype(self.dtype, resolve_device(self.device))
        return "" if precision == torch.float32 else f"{precision}\x00"

    def _key(self, prompt: str) -> str:
        return hashlib.sha256(f"{self.max_new_tokens}\x00{self._precision}{prompt}".encode()).hexdigest()

    # ----- generation -----
    def release(self) -> None:
        """Drop the LM's weights (they load again when an uncached rewrite is asked for)."""
        if self._lm is not None:
            self._lm.release()

    @property
    def _model(self):
        """The LM's weights when loaded, else None."""
        return self._lm._model if self._lm is not None else None

    def language_model(self) -> CausalLM:
        """The rewriting LM (weights on first use): its own attention implementation, never its own code."""
        if self._lm is None:
            self._lm = CausalLM(self.lm, device=self.device, dtype=self.dtype, attn_implementation=None,
                                role="rewriting LM", field="rewrite_lm", needs="Skill-KNN's rewriting")
        return self._lm

    def _generate(self, prompts: list[str]) -> list[Rewrite]:
        """Greedy answers of one batch, up to the first newline, reusing the shared prompt head's KV cache."""
        import torch

        from ..lm.tokens import pad_sequences

        lm = self.language_model()
        model, tok, device = lm.model, lm.tokenizer, lm.device
        seqs = [lm.ids(p) for p in prompts]
        head = self._head_ids(prompts[0])
        split = len(head)
        if not all(len(s) > split and s[:split] == head for s in seqs):  # the seam merged: no shared head
            split, head = 0, []
        n = len(seqs)
        keep = {"logits_to_keep": 1} if lm.accepts("logits_to_keep") else {}  # only the last position's logits
        with torch.inference_mode():
            layers = lm.head_cache(head) if split else None  # the shared head runs once
            tails = [s[split:] for s in seqs]
            ids, tail_mask = pad_sequences(tails, lm.pad_id, side="left")
            mask = torch.cat([torch.ones((n, split), dtype=torch.long), tail_mask], dim=1).to(device)
            pos = (split + tail_mask.cumsum(1) - 1).clamp(min=0).to(device)
            cache = expand_cache(layers, n) if layers else None
            out = model(input_ids=ids.to(device), attention_mask=mask, position_ids=pos, use_cache=True, **keep,
                        **{lm.cache_kwarg: cache})
            lm.count(int(tail_mask.sum()))  # every tail
            next_pos = pos[:, -1] + 1
            made: list[list[int]] = [[] for _ in range(n)]
            done = [False] * n
            for _ in range(self.max_new_tokens):
                nxt = out.logits[:, -1].argmax(-1)
                for i, t in enumerate(nxt.tolist()):
                    if not done[i]:
                        made[i].append(t)
                        done[i] = t == tok.eos_token_id or "\n" in tok.decode(made[i], skip_special_tokens=True)
                if all(done):
                    break
                mask = torch.cat([mask, torch.ones((n, 1), dtype=torch.long, device=device)], dim=1)
                out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                            use_cache=True, **keep, **{lm.cache_kwarg: output_cache(out)})
                lm.count(n)  # one new token per row (finished rows run too)
                next_pos = next_pos + 1
        return [Rewrite(tok.decode(m, skip_special_tokens=True).split("\n")[0].strip(), len(s), len(m))
                for s, m in zip(seqs, made, strict=True)]

    def _head_ids(self, prompt: str) -> list[int]:
        """Tokens of the prompt head every input shares (instruction + annotations), a few short of the seam."""
        from ..lm.kv import SEAM_BACKOFF

        head = prompt[: prompt.rindex("Sentence: ")]
        ids = self.language_model().ids(head)
        return ids[: max(0, len(ids) - SEAM_BACKOFF)]

    def rewrite(self, texts: Sequence[str], variant: int = 0) -> list[Rewrite]:
        """The rewrite of every text (cached ones read back); an empty rewrite falls back to the raw text."""
        prompts = [self.prompt(t, variant) for t in texts]
        out: list[Rewrite | None] = [None] * len(texts)
        todo = []
        for i, p in enumerate(prompts):
            hit = self.cache.get(self._key(p))
            if hit is not None:
                out[i] = Rewrite(hit["rewrite"], hit["prompt_tokens"], hit["new_tokens"], cached=True)
            else:
                todo.append(i)
        # longest prompt (in characters) first, batch_size prompts a batch
        batches = [[todo[j] for j in b] for b in token_batches([len(prompts[i]) for i in todo], math.inf,
                                                                self.batch_size)]
        for batch in progress(batches, desc=f"skill rewrites (variant {variant})", unit="batch",
                              disable=not self.show_progress or not batches):
            made = self._generate([prompts[i] for i in batch])
            entries = []
            for i, r in zip(batch, made, strict=True):
                out[i] = r
                entry = {"key": self._key(prompts[i]), "rewrite": r.text, "prompt_tokens": r.prompt_tokens,
                         "new_tokens": r.new_tokens}
                self.cache[entry["key"]] = entry
                entries.append(entry)
            self._append(entries)
        final = []
        for text, prompt, r in zip(texts, prompts, out, strict=True):
            key = self._key(prompt)
            first = key not in self.accounted
            if first:  # the cost of each distinct rewrite once, cached ones at what they cost when made
                self.accounted.add(key)
                self.cost += LMCost(1, r.prompt_tokens + r.new_tokens)
                self.cached += r.cached
            if not r.text:
                if not self.empty:
                    warnings.warn("a skill rewrite came back empty; using the raw input instead (counted as "
                                  "rewrites_empty)", stacklevel=2)
                self.empty += first
                r = Rewrite(text.strip(), r.prompt_tokens, r.new_tokens, r.cached)
            final.append(r)
        return final
