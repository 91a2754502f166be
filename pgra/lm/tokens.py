"""Token-id helpers shared by every model-running stage: pad-and-mask, and truncate-to-fit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, side: Literal["right", "left"] = "right",
                  width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` long tensors ``(len(seqs), width)`` (default: the longest), padded on ``side``."""
    width = max((len(s) for s in seqs), default=0) if width is None else width
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        if len(seq) > width:
            raise ValueError(f"sequence {row} has {len(seq)} tokens, more than the width {width}")
        if not len(seq):
            continue
        cols = slice(0, len(seq)) if side == "right" else slice(width - len(seq), width)
        ids[row, cols] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, cols] = 1
    return ids, mask


def fit_text(tokenizer, text: str, build: Callable[[str], list[int]], limit: int,
             min_keep: int = 0) -> tuple[list[int], bool]:
    """Cut ``text`` at token boundaries until ``build(cut)`` fits ``limit`` tokens: ``(ids, True)``, else min_keep's."""
    ids = build(text)
    if len(ids) <= limit:
        return ids, True
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
    keep = max(min_keep, len(tokens) - (len(ids) - limit))
    while True:
        ids = build(tokenizer.decode(tokens[:keep], skip_special_tokens=True))
        if len(ids) <= limit:
            return ids, True
        if keep <= min_keep:
            return ids, False
        keep = max(min_keep, keep - max(1, len(ids) - limit))
