"""A causal LM's key/value cache as plain per-layer tensors, across transformers versions (4.57 and 5.x)."""

from __future__ import annotations

import torch

# a cached prompt head stops this many tokens before the end of its own tokenisation: the tokenizer may merge
# the head's last characters with what follows, and the backed-off tokens are re-run with each text instead
SEAM_BACKOFF = 4


def cache_layers(past) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``[(keys, values)]`` per layer of a model's ``past_key_values`` (each ``(batch, heads, tokens, dim)``)."""
    if hasattr(past, "layers"):
        return [(layer.keys, layer.values) for layer in past.layers]
    if hasattr(past, "key_cache"):
        return list(zip(past.key_cache, past.value_cache, strict=True))
    return [(k, v) for k, v in past]


def output_cache(out):
    """The KV cache a forward returned: ``out.cache`` (transformers 5.x), else ``out.past_key_values``."""
    return out["cache"] if "cache" in out else out.past_key_values  # noqa: SIM401 - .get would read the alias


def build_cache(layers: list[tuple[torch.Tensor, torch.Tensor]]):
    """A ``DynamicCache`` holding ``layers`` (to continue from them)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(layers):
        cache.update(k, v, i)
    return cache
