"""The shared-prefix attention equals eager attention over the head's keys and values copied into every row."""

import pytest
import torch

from pgra.rerank.prompt_guided.prefix_attention import shared_prefix, shared_prefix_attention
from tests import numerics


class _Layer(torch.nn.Module):
    layer_idx = 0


def _eager(query, key, value, mask, scaling):
    """transformers' eager attention with repeat_kv: the reference."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scores = query @ key.transpose(-1, -2) * scaling + mask
    return (scores.softmax(-1) @ value).transpose(1, 2)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (6, 2), (3, 1)])
@pytest.mark.parametrize("bool_mask", [False, True])
def test_equals_eager_attention_over_copied_head(heads, kv_heads, bool_mask):
    torch.manual_seed(0)
    n, w, d, head_len = 3, 5, 8, 7  # odd sizes; rows of different lengths (right padding)
    query = torch.randn(n, heads, w, d)
    key, value = torch.randn(n, kv_heads, w, d), torch.randn(n, kv_heads, w, d)
    head_k, head_v = torch.randn(1, kv_heads, head_len, d), torch.randn(1, kv_heads, head_len, d)
    lengths = torch.tensor([5, 2, 4])
    visible = torch.tril(torch.ones(w, w, dtype=torch.bool)) & (torch.arange(w) < lengths[:, None, None])
    visible |= torch.eye(w, dtype=torch.bool)  # a padded query sees itself (as transformers' masks keep rows finite)
    visible = visible[:, None]  # (n, 1, w, w)
    additive = torch.zeros(n, 1, w, w).masked_fill(~visible, torch.finfo(torch.float32).min)
    full_mask = torch.cat([torch.zeros(n, 1, w, head_len), additive], dim=-1)
    want = _eager(query, torch.cat([head_k.expand(n, -1, -1, -1), key], 2),
                  torch.cat([head_v.expand(n, -1, -1, -1), value], 2), full_mask, 0.3)
    model = _Model()
    with shared_prefix(model, [(head_k, head_v)]):
        got, _ = shared_prefix_attention(_Layer(), query, key, value, visible if bool_mask else additive,
                                         scaling=0.3)
    assert model.config._attn_implementation == "eager"  # restored after the block
    assert got.shape == (n, w, heads, d)
    numerics.assert_close(got, want, depth=64)


def test_outside_the_block_it_refuses():
    with pytest.raises(RuntimeError, match="shared_prefix"):
        shared_prefix_attention(_Layer(), torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2),
                                None)


class _Model:
    """What shared_prefix() touches of a model: its config's attention implementation."""

    def __init__(self) -> None:
        self.config = type("Config", (), {"_attn_implementation": "eager"})()
