"""Plug-in mode ``lowrank``: a learned low-rank boundary written as a user writes one,
the worked example of an in-graph half (docs/plugins.md, "An in-graph half").

    python -m aqsgd.train.worker --config RUN.yaml --local 2   # forward.mode: lowrank
    python -m bench run --scenario 100mbps --plugin examples/plugins/lowrank.py

The sending stage maps each token's hidden vector h (D) to k learned coordinates,
z = W_down h; the receiving stage maps them back, h' = W_up z. Both matrices are the
stages' parameters (the sender's trained by the sending stage, the receiver's by the
receiving one); the gradient of z travels back over the wire. The coordinates are then
coded by the byte-level half this class inherits: DirectQ, so `lowrank:4/8` sends k
4-bit codes a token (k: CompressionConfig.coords, `forward.coords` in a run config).
"""

from __future__ import annotations

import torch
from torch import nn

from aqsgd.compress.ingraph import InGraph
from aqsgd.compress.modes.base import Comparison
from aqsgd.compress.modes.directq import DirectQ

__version__ = "0.1"
__all__ = ["LowRank", "LowRankHalf", "MODE", "COMPARISONS"]


class _Down(nn.Module):
    def __init__(self, width: int, k: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)  # the same start on every replica
        self.down = nn.Parameter(torch.randn(k, width, generator=g) / width**0.5)

    def forward(self, h, tokens):  # (B, L, D) -> (B, L, k); tokens unused
        return h @ self.down.T


class _Up(nn.Module):
    def __init__(self, width: int, k: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed + 1)
        self.up = nn.Parameter(torch.randn(width, k, generator=g) / k**0.5)

    def forward(self, z, tokens):  # (B, L, k) -> (B, L, D)
        return z @ self.up.T


class LowRankHalf(InGraph):
    """k = CompressionConfig.coords (default: a quarter of the width)."""

    default_fraction = 1 / 4

    def sender_module(self) -> nn.Module:
        return _Down(self.shape.width, self.coords, self.shape.seed)

    def receiver_module(self) -> nn.Module:
        return _Up(self.shape.width, self.coords, self.shape.seed)


class LowRank(DirectQ):  # the byte-level half: DirectQ codes of the coordinates
    name = "lowrank"
    rank = 2.6
    wire_format = 66
    codes_gradients = False  # the backward direction is DirectQ's own mode
    in_graph = LowRankHalf


MODE = LowRank
COMPARISONS = (Comparison("lowrank", rank=2.6, forward="lowrank", backward="directq",
                          default_bits=(4, 8)),)
