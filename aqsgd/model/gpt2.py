"""GPT-2 models that split into pipeline stages.

    from aqsgd.model.config import PRESETS
    from aqsgd.model.gpt2 import init_stage, lm_loss
    last = init_stage(PRESETS["tiny"], 1, 2, seed=0)  # stage 1 of 2: block 1, norm, head
    loss = lm_loss(last(hidden), input_ids)           # hidden (B, L, D) -> logits (B, L, V)

A model is a `GPT2Stage`: optional embeddings, a run of GPT-2 blocks
(aqsgd.model.block, computing what transformers' `GPT2Block` computes without importing
transformers), optional final norm and LM head. The full model is the one stage that
holds everything; `build_stage` cuts stage s of n out of it, and `init_stage` builds
the same stage directly without allocating the rest. Parameter names are global
(`blocks.7.attn.c_attn.weight` on whichever stage holds layer 7), so a stage's
state dict is a subset of the full model's and gradients compare name by name.
The LM head is untied from the token embedding: Note [untied LM head] at `LMHead`.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from aqsgd.model.block import GPT2Block
from aqsgd.model.config import ModelConfig, layer_split
from aqsgd.model.weights import load_pretrained_state

__all__ = [
    "PRECISIONS",
    "GPT2Stage",
    "build_full_model",
    "build_stage",
    "compute_precision",
    "init_stage",
    "lm_loss",
]

_INIT_STD = 0.02


# Note [meta stages]: a stage is built on the meta device, so that only its own layers
# are ever allocated, and then filled by init_stage. torch's own init of a meta tensor
# (normal_, uniform_, empty_like) runs Python meta kernels whose first use imports
# torch's decompositions and sympy, about a second of every worker's start; meta
# parameters carry no values, so the modules below skip their init there.


class _Embedding(nn.Embedding):
    def reset_parameters(self) -> None:
        if not self.weight.is_meta:  # Note [meta stages]
            super().reset_parameters()


class _Linear(nn.Linear):
    def reset_parameters(self) -> None:
        if not self.weight.is_meta:  # Note [meta stages]
            super().reset_parameters()


class Embeddings(nn.Module):
    """Token plus learned position embedding, then dropout."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.wte = _Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = _Embedding(cfg.seq_len, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (L,)
        return self.drop(self.wte(input_ids) + self.wpe(positions))  # (B, L, D)


# Note [untied LM head]: GPT-2 ties the LM head to the token embedding (wte). In a
# pipeline the embedding lives on the first rank and the head on the last, so a tied
# weight would need an extra all-reduce of its gradient between them every step,
# traffic that the paper's setup does not count. We untie them: the head starts as a
# copy of wte when loading pretrained GPT-2 weights and is trained independently.
class LMHead(nn.Module):
    """Final layer norm and the (untied, see Note [untied LM head]) output projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_eps)
        self.lm_head = _Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(hidden))  # (B, L, V)


class GPT2Stage(nn.Module):
    """Blocks `layers` of a GPT-2, with the embeddings if `first`, the head if `last`.

    first: input_ids (B, L) int64 -> ...; otherwise hidden (B, L, D) -> ...
    last: ... -> logits (B, L, V); otherwise ... -> hidden (B, L, D).
    """

    def __init__(self, cfg: ModelConfig, layers: range, first: bool, last: bool):
        super().__init__()
        self.cfg = cfg
        self.layers = layers
        self.first = first
        self.last = last
        self.embed = Embeddings(cfg) if first else None
        # Keyed by global layer index: names match the full model's.
        self.blocks = nn.ModuleDict({str(i): GPT2Block(cfg) for i in layers})
        self.head = LMHead(cfg) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            if x.dtype != torch.long or x.ndim != 2:
                raise ValueError(
                    f"stage input must be int64 (B, L) token ids, got {x.dtype} {tuple(x.shape)}"
                )
            if x.shape[1] > self.cfg.seq_len:
                raise ValueError(
                    f"sequence length {x.shape[1]} exceeds ModelConfig.seq_len {self.cfg.seq_len}"
                )
            h = self.embed(x)  # (B, L, D)
        else:
            if x.ndim != 3 or x.shape[-1] != self.cfg.n_embd:
                raise ValueError(
                    f"stage input must be hidden (B, L, {self.cfg.n_embd}), got {tuple(x.shape)}"
                )
            h = x
        for block in self.blocks.values():
            h = block(h)  # (B, L, D)
        return self.head(h) if self.last else h


def lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy: position t predicts token t + 1."""
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}"
        )
    vocab = logits.shape[-1]
    pred = logits[:, :-1].reshape(-1, vocab).float()  # (B * (L-1), V)
    target = input_ids[:, 1:].reshape(-1)  # (B * (L-1),)
    return F.cross_entropy(pred, target)


# Compute precision -> the dtype torch.autocast computes in (None: no autocast).
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def compute_precision(precision: str, device: torch.device) -> AbstractContextManager:
    """The context a stage's forward and loss run in: "fp32" none (bit-identical to no
    context), "bf16" or "fp16" torch.autocast to that dtype on `device`'s type (CPU or
    CUDA; fp16 needs loss scaling, aqsgd.train.loss_scale). Run the backward outside it,
    as torch advises; the weights and their gradients stay fp32."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {'|'.join(PRECISIONS)}, got {precision!r}")
    dtype = PRECISIONS[precision]
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


# ---------------------------------------------------------------- initialisation


def _param_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@torch.no_grad()
def _init_parameter(name: str, param: torch.Tensor, cfg: ModelConfig, seed: int) -> None:
    """GPT-2's initialisation, one generator per parameter name, so that any stage
    built alone holds exactly the weights of the same layers in the full model."""
    leaf = name.rsplit(".", 1)[-1]
    if ".ln_" in name:  # ln_1, ln_2, ln_f
        param.fill_(1.0 if leaf == "weight" else 0.0)
        return
    if leaf == "bias":
        param.zero_()
        return
    std = _INIT_STD
    if name.endswith("c_proj.weight"):
        std /= math.sqrt(2 * cfg.n_layer)  # GPT-2's scaling of residual projections
    gen = torch.Generator().manual_seed(_param_seed(seed, name))
    param.copy_(torch.randn(param.shape, generator=gen) * std)


def _empty_stage(cfg: ModelConfig, stage: int, num_stages: int) -> GPT2Stage:
    if not isinstance(stage, int) or not 0 <= stage < num_stages:
        raise ValueError(f"stage must be in [0, {num_stages}), got {stage!r}")
    layers = layer_split(cfg.n_layer, num_stages)[stage]
    with torch.device("meta"):
        return GPT2Stage(cfg, layers, first=stage == 0, last=stage == num_stages - 1)


def init_stage(
    cfg: ModelConfig,
    stage: int,
    num_stages: int,
    seed: int = 0,
    pretrained: str | os.PathLike | Mapping[str, torch.Tensor] | None = None,
) -> GPT2Stage:
    """Stage `stage` of `num_stages`, on CPU, without building the others: random
    GPT-2 init from `seed`, or the matching tensors of `pretrained` (a state dict
    in this module's or Hugging Face's naming, or a local model directory / cached id)."""
    module = _empty_stage(cfg, stage, num_stages)
    if pretrained is not None:
        state = load_pretrained_state(pretrained, cfg)
        _load_subset(module, state)
        return module
    _allocate_on_cpu(module)
    for name, param in module.named_parameters():
        _init_parameter(name, param, cfg, seed)
    return module


def _allocate_on_cpu(module: nn.Module) -> None:
    """Uninitialised CPU storage for every meta parameter (Note [meta stages]: `to_empty`'s
    meta `empty_like` imports sympy, a few tenths of a second of every worker's start)."""
    for sub in module.modules():
        for name, param in list(sub.named_parameters(recurse=False)):
            setattr(sub, name, nn.Parameter(torch.empty(param.shape, dtype=param.dtype),
                                            requires_grad=param.requires_grad))


def build_full_model(
    cfg: ModelConfig,
    seed: int = 0,
    pretrained: str | os.PathLike | Mapping[str, torch.Tensor] | None = None,
) -> GPT2Stage:
    """The whole model: input_ids (B, L) -> logits (B, L, V)."""
    return init_stage(cfg, 0, 1, seed=seed, pretrained=pretrained)


def build_stage(
    source: nn.Module | Mapping[str, torch.Tensor],
    cfg: ModelConfig,
    stage: int,
    num_stages: int,
) -> GPT2Stage:
    """Cut stage `stage` of `num_stages` out of a full model (or its state dict).
    The stage holds copies of the source's tensors, so it trains independently."""
    if isinstance(source, nn.Module):
        state = source.state_dict()
    else:
        state = load_pretrained_state(source, cfg)  # also accepts HF names
    module = _empty_stage(cfg, stage, num_stages)
    _load_subset(module, state)
    return module


def _load_subset(module: GPT2Stage, state: Mapping[str, torch.Tensor]) -> None:
    wanted = module.state_dict()
    missing = [k for k in wanted if k not in state]
    if missing:
        raise KeyError(
            f"source state lacks {len(missing)} tensors of this stage, e.g. {missing[:3]}"
        )
    picked = {}
    for key, meta in wanted.items():
        tensor = state[key]
        if tuple(tensor.shape) != tuple(meta.shape):
            raise ValueError(
                f"{key}: source shape {tuple(tensor.shape)} != model shape {tuple(meta.shape)}"
            )
        picked[key] = tensor.detach().to("cpu", torch.float32).clone()
    module.load_state_dict(picked, strict=True, assign=True)
