"""Attention over a shared prefix's keys and values without copying them into every row of a batch.

The reranker runs many short suffixes after one long shared head. Continuing from a ``DynamicCache`` copies
the head's keys and values into every row of every batch (and, with grouped-query attention, repeats them per
query head); the attention then adds a mask over the whole ``head + suffix`` width. Here the suffixes run
without a cache, and each layer's attention computes two blocks and merges their softmax exactly:

- the head block: every query of the batch against the head's keys, as one matrix product per key/value head
  (the head's tensors are read, never copied; nothing to mask: the whole head precedes every suffix);
- the suffix block: the usual causal + padding attention among the suffix's own tokens.

It plugs into transformers' attention registry (``AttentionInterface`` / ``AttentionMaskInterface``) under
:data:`NAME`, so any model that dispatches through the registry (Llama, SmolLM2, OPT, GPT-2, ...) uses it;
:func:`shared_prefix` switches a model to it for one forward pass. Callers check it against the cache path
once per model (:meth:`pgra.rerank.prompt_guided.embedder.LMEmbedder`), since a model with its own attention quirks (GPT-2's
``scale_attn_by_inverse_layer_idx``) may not match.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

import torch

NAME = "pgra_shared_prefix"
_PREFIX: ContextVar[list[tuple[torch.Tensor, torch.Tensor]] | None] = ContextVar("pgra_prefix_kv", default=None)


def register() -> bool:
    """Register the attention and its (eager, additive) mask with transformers; False where it cannot."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask
    except ImportError:
        return False
    AttentionInterface.register(NAME, shared_prefix_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, eager_mask)
    return True


@contextlib.contextmanager
def shared_prefix(model, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> Iterator[None]:
    """Within the block, ``model``'s attention reads ``layers`` (per layer ``(keys, values)``, each
    ``(1, kv_heads, head_tokens, head_dim)``) as the keys and values before every row's tokens."""
    config = model.config
    before = config._attn_implementation
    token = _PREFIX.set(layers)
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before
        _PREFIX.reset(token)


def shared_prefix_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None,
                            dropout: float = 0.0, **kwargs) -> tuple[torch.Tensor, None]:
    """``softmax([q k_head^T, q k^T + mask]) [v_head; v]`` for ``query`` ``(n, heads, w, d)``, the suffix's
    ``key``/``value`` ``(n, kv_heads, w, d)`` and the head's from :func:`shared_prefix`; returns
    ``(n, w, heads, d)`` as transformers' attention functions do."""
    layers = _PREFIX.get()
    if layers is None:
        raise RuntimeError(f"{NAME} attention used outside pgra.rerank.prompt_guided.prefix_attention.shared_prefix()")
    head_k, head_v = layers[module.layer_idx]
    n, heads, w, d = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads  # query heads sharing one key/value head (repeat_kv's order)
    scale = d ** -0.5 if scaling is None else scaling

    q = query.reshape(n, kv_heads, groups * w, d)
    # head block: (kv_heads, n * groups * w, head_len), the head's keys read once per key/value head
    q_rows = q.transpose(0, 1).reshape(kv_heads, n * groups * w, d)
    s_head = torch.matmul(q_rows, head_k[0].transpose(-1, -2)).float().mul_(scale)
    # suffix block: (n, kv_heads, groups * w, w) with the causal + padding mask
    s_own = torch.matmul(q, key.transpose(-1, -2)).float().mul_(scale)
    if attention_mask is not None:
        s_own = s_own.view(n, kv_heads, groups, w, w)
        if attention_mask.dtype == torch.bool:
            s_own = s_own.masked_fill(~attention_mask[:, :, None, :, :w], float("-inf"))
        else:
            s_own = s_own + attention_mask[:, :, None, :, :w].float()
        s_own = s_own.view(n, kv_heads, groups * w, w)

    # one softmax over both blocks: a shared running maximum, then the two blocks' sums and products
    head_max = s_head.amax(-1).view(kv_heads, n, groups * w).transpose(0, 1)  # (n, kv_heads, groups * w)
    top = torch.maximum(head_max, s_own.amax(-1)).unsqueeze(-1)
    top_rows = top.transpose(0, 1).reshape(kv_heads, n * groups * w, 1)
    p_head = s_head.sub_(top_rows).exp_()
    p_own = s_own.sub_(top).exp_()
    total = p_head.sum(-1).view(kv_heads, n, groups * w).transpose(0, 1) + p_own.sum(-1)
    out_head = torch.matmul(p_head.to(value.dtype), head_v[0])  # (kv_heads, n * groups * w, d)
    out = out_head.view(kv_heads, n, groups * w, d).transpose(0, 1) + torch.matmul(p_own.to(value.dtype), value)
    out = out.float().div_(total.unsqueeze(-1)).to(value.dtype)
    return out.reshape(n, heads, w, d).transpose(1, 2).contiguous(), None
