"""SimCSE's training model (CLS through an MLP, dropped at inference) and the in-batch contrastive loss."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class SimCSEModel(nn.Module):
    """``encoder`` + MLP head; ``forward`` returns the training embeddings (CLS through the MLP)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        hidden = int(encoder.config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        std = getattr(encoder.config, "initializer_range", 0.02)
        nn.init.normal_(self.mlp[0].weight, std=std)
        nn.init.zeros_(self.mlp[0].bias)
        pooler = getattr(encoder, "pooler", None)
        if isinstance(pooler, nn.Module):  # unused by the loss: frozen (kept as is, and DDP sees no unused grads)
            pooler.requires_grad_(False)

    def cls(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The inference representation: CLS before any pooler (``cls_before_pooler``)."""
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.cls(input_ids, attention_mask))


def gather_with_grad(z: torch.Tensor) -> torch.Tensor:
    """Every process's rows in rank order; this process's own rows keep their gradient."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return z
    parts = [torch.empty_like(z) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, z.detach().contiguous())
    parts[dist.get_rank()] = z
    return torch.cat(parts)


def contrastive_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE over the batch: row i of ``z1`` must pick row i of ``z2`` among all rows (cosine / temperature)."""
    sim = F.normalize(z1.float(), dim=-1) @ F.normalize(z2.float(), dim=-1).T / temperature
    return F.cross_entropy(sim, torch.arange(len(sim), device=sim.device))
