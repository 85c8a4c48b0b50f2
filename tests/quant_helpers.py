"""Inputs the quantizer tests share (tests/aqsgd/quant/): irregular and paper-like
shapes, activation-like samples, the stochastic-rounding seed of a generator seed."""

from __future__ import annotations

import torch

from aqsgd import quant
from aqsgd.quant import QuantConfig

SMALL = (3, 37, 50)  # irregular: numel 5550, last dim not a multiple of 8
PAPERISH = (2, 129, 1600)
GROUPS = {SMALL: 111, PAPERISH: 128}  # group sizes that divide numel
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def sample(shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    """Activation-like: channel magnitudes over 4 decades, outliers, one all-zero channel."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-2, 2, shape[-1])
    x.view(-1)[:: max(1, x.numel() // 11)] *= 25.0
    x[..., 1] = 0.0
    return x.to(dtype)


def seed_of(gen_seed: int) -> int:
    return quant.draw_seed(torch.Generator().manual_seed(gen_seed), QuantConfig(
        rounding="stochastic"))
