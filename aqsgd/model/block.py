"""The GPT-2 transformer block the stages are made of.

    from aqsgd.model.block import GPT2Block
    block = GPT2Block(PRESETS["tiny"])
    out = block(hidden)                    # (B, L, D) -> (B, L, D)

Pre-norm GPT-2 (`h + attn(ln_1(h))`, then `h + mlp(ln_2(h))`) with Hugging Face's
sub-module names and shapes, so published checkpoints load by name, and bit-identical
to transformers' `GPT2Block` with SDPA attention, forward, backward and dropout draws.
A converted stage (aqsgd.model.dropout) applies its attention dropout itself
(`causal_attention`). Why the suite has its own block: docs/models.md.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from aqsgd.model.config import ModelConfig
from aqsgd.model.dropout import SampleDropout, causal_attention

__all__ = ["ACTIVATIONS", "Conv1D", "TanhGELU", "CausalSelfAttention", "MLP", "GPT2Block"]


class Conv1D(nn.Module):
    """x @ weight + bias with weight (in, out): GPT-2's layout of a linear layer."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight.is_meta:  # Note [meta stages] in aqsgd.model.gpt2
            return
        nn.init.normal_(self.weight, std=0.02)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One fused addmm on the flattened rows, as GPT-2's Conv1D: a matmul and a
        # separate add would round differently.
        out = torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)  # (N, out)
        return out.view(*x.shape[:-1], self.weight.shape[1])

    def extra_repr(self) -> str:
        return f"in_features={self.weight.shape[0]}, out_features={self.weight.shape[1]}"


class TanhGELU(nn.Module):
    """GPT-2's GELU, the tanh approximation written out (`gelu_new`).

    F.gelu(approximate="tanh") rounds differently. The terms are evaluated in the order
    of GPT-2's formula, `0.5 * x` first: autograd sums the three gradients reaching x in
    the order their operations were recorded, and another order rounds differently.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3.0)))


# ModelConfig.activation -> the MLP's activation module.
ACTIVATIONS: dict[str, type[nn.Module]] = {"gelu": nn.GELU, "gelu_new": TanhGELU, "relu": nn.ReLU}


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: (B, L, D) -> (B, L, D)."""

    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, n_embd // n_head
        self.scale = self.head_dim**-0.5
        self.c_attn = Conv1D(n_embd, 3 * n_embd)
        self.c_proj = Conv1D(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads = (*x.shape[:-1], self.n_head, self.head_dim)
        q, k, v = (t.view(heads).transpose(1, 2)  # (B, H, L, hd)
                   for t in self.c_attn(x).split(self.n_embd, dim=2))  # fmt: skip
        drop = self.attn_dropout
        if self.training and isinstance(drop, SampleDropout) and drop.p > 0.0:
            out = causal_attention(q, k, v, self.scale, drop)[0]  # (B, L, H, hd)
        else:
            p = drop.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, scale=self.scale,
                                                 is_causal=True).transpose(1, 2)  # (B, L, H, hd)
        out = out.reshape(*x.shape[:-1], self.n_embd)  # (B, L, D), contiguous
        return self.resid_dropout(self.c_proj(out))


class MLP(nn.Module):
    """c_fc, activation, c_proj, dropout: (B, L, D) -> (B, L, D)."""

    def __init__(self, n_embd: int, inner_dim: int, activation: str, dropout: float):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.c_fc = Conv1D(n_embd, inner_dim)
        self.act = ACTIVATIONS[activation]()
        self.c_proj = Conv1D(inner_dim, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    """One pre-norm GPT-2 block of shape `cfg`: (B, L, D) -> (B, L, D)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.attn = CausalSelfAttention(cfg.n_embd, cfg.n_head, cfg.dropout)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg.n_embd, cfg.inner_dim, cfg.activation, cfg.dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.attn(self.ln_1(h)) + h  # (B, L, D)
        return h + self.mlp(self.ln_2(h))
