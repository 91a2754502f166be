"""Alignment and uniformity (Wang and Isola 2020) of unit sentence vectors; lower is better for both."""

from __future__ import annotations

import torch


def alignment(x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean squared distance of paired unit vectors."""
    return (x - y).norm(dim=1).pow(2).mean().item()


def uniformity(x: torch.Tensor, t: float = 2.0) -> float:
    """Log of the mean Gaussian potential over all distinct pairs of unit vectors."""
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log().item()
