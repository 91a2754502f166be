"""Reader inputs and targets: one encoder input per (query, evidence) pair, span-filling label targets.

An input longer than ``max_length`` loses evidence first, then query text; the mask slot is never cut."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..core.errors import InputError
from ..lm.tokens import fit_text, pad_sequences
from ..tasks.loaders import check_label_ids
from ..tasks.spec import READER_FORMATS, TaskSpec


class ReaderFormatter:
    """Turns interchange records into FiD tensors for one task and tokenizer."""

    def __init__(self, task: TaskSpec, tokenizer, n_passages: int, max_length: int = 128,
                 input_format: str = "intended", cache_ids: bool = False) -> None:
        if input_format not in READER_FORMATS:
            raise InputError(f"unknown input format '{input_format}', use one of {list(READER_FORMATS)}",
                             field="input_format")
        self.task, self.tok = task, tokenizer
        self.n_passages, self.max_length, self.input_format = n_passages, max_length, input_format
        # cache_ids: each (input, evidence) pair's ids kept once built (training reads every input once an epoch;
        # int32 arrays, about 4 bytes a token)
        self._cached: dict[tuple[str, str], np.ndarray] | None = {} if cache_ids else None
        vocab = tokenizer.get_vocab()
        self.t5_style = "<extra_id_0>" in vocab and "<extra_id_1>" in vocab
        self.mask = "<extra_id_0>" if self.t5_style else (tokenizer.mask_token or "")
        self.eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.targets = [self.target_ids(task.reader_words[lab]) for lab in task.labels]
        # the targets the reader is trained on and scored by must differ, and hold no unknown token
        check_label_ids(task, tokenizer, self.targets, "reader_words", getattr(tokenizer, "name_or_path", ""))
        self.target_tensor, self.target_mask = pad_sequences(self.targets, self.pad)
        self._warned_short = False

    def target_ids(self, word: str) -> list[int]:
        text = f"<extra_id_0> {word} <extra_id_1>" if self.t5_style else word
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return ids + ([self.eos] if self.eos is not None else [])

    def word_of(self, generated: str) -> str | None:
        """Map generated text back to a label (None if it names no label word)."""
        text = generated
        for special in ("<extra_id_0>", "<extra_id_1>", "<pad>", "</s>", "[CLS]", "[SEP]", "[PAD]"):
            text = text.replace(special, " ")
        words = text.split()
        inverse = {w.lower(): lab for lab, w in self.task.reader_words.items()}
        return inverse.get(words[0].lower()) if words else None

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=True)["input_ids"]

    def passage_ids(self, text: str, evidence: str) -> Sequence[int]:
        """Token ids of one (query, evidence) input within ``max_length``, evidence cut first."""
        if self._cached is None:
            return self._build_ids(text, evidence)
        ids = self._cached.get((text, evidence))
        if ids is None:
            ids = self._cached[text, evidence] = np.asarray(self._build_ids(text, evidence), dtype=np.int32)
        return ids

    def _build_ids(self, text: str, evidence: str) -> list[int]:
        fmt = self.input_format if self.input_format != "intended" else None
        ids, fits = fit_text(self.tok, evidence,
                             lambda ev: self._ids(self.task.reader_input(text, ev, self.mask, fmt)), self.max_length)
        if fits:
            return ids
        ids, _ = fit_text(self.tok, text, lambda t: self._ids(self.task.reader_input(t, "", self.mask, fmt)),
                          self.max_length, min_keep=1)
        return ids[: self.max_length]

    def passages(self, rec: dict[str, Any]) -> list[str]:
        if self.n_passages == 0:
            return [""]
        ctxs = [c["text"] for c in rec.get("ctxs", [])[: self.n_passages]]
        if len(ctxs) < self.n_passages:
            if not self._warned_short:
                warnings.warn(f"input {rec['id']} has {len(ctxs)} evidence sentences, fewer than d="
                              f"{self.n_passages}; padding with empty evidence (said once)", stacklevel=2)
                self._warned_short = True
            ctxs += [""] * (self.n_passages - len(ctxs))
        return ctxs

    def collate(self, records: Sequence[dict[str, Any]], pad_to_multiple: int = 1) -> dict[str, torch.Tensor]:
        """Batch tensors: input_ids/attention_mask ``(B, P, L)``, labels ``(B, T)``, label_index ``(B,)``."""
        seqs = [[self.passage_ids(r["text"], ev) for ev in self.passages(r)] for r in records]
        n_p = len(seqs[0])
        longest = max(len(s) for row in seqs for s in row)
        width = max(longest, min(-(-longest // pad_to_multiple) * pad_to_multiple, self.max_length))
        ids, mask = pad_sequences([s for row in seqs for s in row], self.pad, width=width)
        batch = {"input_ids": ids.view(len(records), n_p, -1), "attention_mask": mask.view(len(records), n_p, -1)}
        if all("label" in r for r in records):
            batch.update(self.label_batch(records))
        return batch

    def label_batch(self, records: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Target tensors of labelled records: labels ``(B, T)`` (padding -100) and label_index ``(B,)``."""
        idx = [self.task.labels.index(str(r["label"])) for r in records]
        return {"labels": pad_sequences([self.targets[i] for i in idx], -100)[0], "label_index": torch.as_tensor(idx)}
