"""Alignment and uniformity (Wang and Isola 2020) of unit sentence vectors, without labelled pairs.

Positive pairs are the two dropout views of the same held-out sentence (as in the SimCSE paper's Figure 2):
``alignment = E ||f(x) - f(x+)||^2`` (lower = positives closer), ``uniformity = log E exp(-2 ||f(x) - f(y)||^2)``
over distinct sentences (lower = more uniform on the sphere).
"""

from __future__ import annotations

import torch


def alignment(x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean squared distance of paired unit vectors."""
    return (x - y).norm(dim=1).pow(2).mean().item()


def uniformity(x: torch.Tensor, t: float = 2.0) -> float:
    """Log of the mean Gaussian potential over all distinct pairs of unit vectors."""
    return torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log().item()
