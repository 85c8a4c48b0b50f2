"""Mode ``bottleneck``: a learned linear down-projection before each boundary and an
up-projection after it (after SWARM parallelism, Ryabinin et al., ICML 2023;
docs/trainable-codecs.md), trained with the model; k coordinates a token travel in bf16.

    half = Bottleneck(cfg, BoundaryShape(L, D, V, seed))
    down, up = half.sender_module(), half.receiver_module()   # D -> k, k -> D
    half.calibrate(down, acts); half.calibrate(up, acts)      # acts (N, D): PCA init

Both start from the principal components of the first step's boundary activations
(`principal_components`; the pipeline's calibration pass sends them raw once, so both
sides compute the same basis): down(h) = V^T (h - mu), up(z) = V z + mu, V (D, k) the
top-k eigenvectors of their covariance, mu their mean. Both are the stage's parameters
(saved with it, trained by its optimizer).
"""

from __future__ import annotations

import torch
from torch import nn

from aqsgd.compress.ingraph import InGraph
from aqsgd.compress.modes.base import ActivationMode, Comparison

__all__ = ["MODE", "COMPARISONS", "Bottleneck", "Down", "Up", "principal_components"]


def principal_components(acts: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(V (D, k), mu (D,)) of activations (N, D): the top-k eigenvectors of their
    covariance, by decreasing eigenvalue, each signed so that its largest-magnitude entry
    is positive (both sides of a boundary get the same basis from the same rows)."""
    x = acts.detach().reshape(-1, acts.shape[-1]).double()  # (N, D)
    mu = x.mean(0)
    centred = x - mu
    cov = centred.T @ centred / max(1, x.shape[0] - 1)  # (D, D)
    _, vecs = torch.linalg.eigh(cov)  # ascending eigenvalues
    v = vecs[:, -k:].flip(1)  # (D, k), largest first
    pivot = v.abs().argmax(0)  # (k,)
    v = v * torch.sign(v[pivot, torch.arange(k)])
    return v.float(), mu.float()


class Down(nn.Module):
    """hidden (B, L, D) -> (B, L, k), learned."""

    def __init__(self, width: int, k: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, k)

    def forward(self, h: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(h)


class Up(nn.Module):
    """(B, L, k) -> hidden (B, L, D), learned."""

    def __init__(self, width: int, k: int) -> None:
        super().__init__()
        self.proj = nn.Linear(k, width)

    def forward(self, z: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(z.float())


class Bottleneck(InGraph):
    calibrates = True
    default_fraction = 1 / 8

    def sender_module(self) -> nn.Module:
        return Down(self.shape.width, self.coords)

    def receiver_module(self) -> nn.Module:
        return Up(self.shape.width, self.coords)

    @torch.no_grad()
    def calibrate(self, module: nn.Module, activations: torch.Tensor) -> None:
        v, mu = principal_components(activations, self.coords)
        v, mu = v.to(module.proj.weight.device), mu.to(module.proj.weight.device)
        if isinstance(module, Down):  # V^T (h - mu)
            module.proj.weight.copy_(v.T)
            module.proj.bias.copy_(-(v.T @ mu))
        else:  # V z + mu
            module.proj.weight.copy_(v)
            module.proj.bias.copy_(mu)


class BottleneckMode(ActivationMode):
    name = "bottleneck"
    rank = 4.6  # tables: after ssn (4.5), before bf16 (5)
    codes_rows = False  # the coordinates go raw in the comparison's dtype (bf16)
    in_graph = Bottleneck
    bench_cases = (("bf16", 16),)
    smoke_case = ("bf16", 16)


MODE = BottleneckMode
COMPARISONS = (Comparison("bottleneck", rank=4.6, forward="bottleneck", backward="none",
                          dtype="bf16"),)
