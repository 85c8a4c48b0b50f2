"""Dropout masks seeded by sample id, so that a sample's masks repeat at every visit.

    from aqsgd.model.dropout import use_sample_dropout
    masks = use_sample_dropout(stage, seed=0)   # stage: a GPT2Stage, changed in place
    with masks.samples(sample_ids):             # (B,) int64, one id per batch row
        out = stage(x)                          # training mode: masks from the ids

`use_sample_dropout` replaces every dropout of a stage by a `SampleDropout` whose mask
for batch row b comes from a generator seeded by (seed, sample id of row b, the module's
global name, e.g. `blocks.3.attn.resid_dropout`), so a sample gets the same masks
whatever the pipeline split; in training a converted block computes attention itself
(`causal_attention`), where nothing is dropped it stays the fused attention, bit for
bit. Why (AQ-SGD's delta and dropout's noise floor): docs/dropout-and-deltas.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["DROPOUT_MASKS", "SampleMasks", "SampleDropout", "causal_attention",
           "use_sample_dropout"]  # fmt: skip

DROPOUT_MASKS = ("random", "per_sample")  # the values of train.dropout_masks


class SampleMasks:
    """The sample ids of the batch a stage is running, for its `SampleDropout`s."""

    def __init__(self, seed: int):
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"SampleMasks.seed must be an int >= 0, got {seed!r}")
        self.seed = seed
        self._ids: list[int] | None = None
        self._generators: dict[torch.device, torch.Generator] = {}

    @contextmanager
    def samples(self, sample_ids: torch.Tensor) -> Iterator[None]:
        """Forward passes inside draw row b's masks from sample_ids[b]."""
        if sample_ids.ndim != 1:
            raise ValueError(f"sample_ids must be 1-D (B,), got shape {tuple(sample_ids.shape)}")
        self._ids = [int(i) for i in sample_ids.tolist()]
        try:
            yield
        finally:
            self._ids = None

    def keep(self, name: str, shape: torch.Size, p: float, device: torch.device) -> torch.Tensor:
        """(B, *shape[1:]) bool: True where module `name` keeps an element of row b."""
        if self._ids is None:
            raise RuntimeError(
                f"{name}: a training forward with per-sample dropout masks needs the batch's "
                "sample ids (run it inside SampleMasks.samples(ids))"
            )
        if shape[0] != len(self._ids):
            raise ValueError(f"{name}: batch of {shape[0]} rows, {len(self._ids)} sample ids")
        gen = self._generators.get(device)
        if gen is None:
            gen = self._generators[device] = torch.Generator(device=device)
        rows = []
        for sample in self._ids:
            digest = hashlib.sha256(f"{self.seed}:{sample}:{name}".encode()).digest()
            gen.manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
            rows.append(torch.rand(shape[1:], generator=gen, device=device) >= p)
        return torch.stack(rows)


class SampleDropout(nn.Module):
    """nn.Dropout(p) whose mask for each batch row comes from the row's sample id."""

    def __init__(self, p: float, name: str, masks: SampleMasks):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"SampleDropout.p must be in [0, 1), got {p!r}")
        self.p, self.name, self.masks = p, name, masks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = self.masks.keep(self.name, x.shape, self.p, x.device)
        return x * keep.to(x.dtype) * (1.0 / (1.0 - self.p))  # as F.dropout scales

    def extra_repr(self) -> str:
        return f"p={self.p}, name={self.name!r}"


def causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     scale: float, drop) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scale, causal) with `drop` applied to the weights, times v.

    query, key, value (B, H, L, hd) -> output (B, L, H, hd) and weights (B, H, L, L).
    """
    L = query.shape[2]
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale  # (B, H, L, L)
    causal = torch.ones(L, key.shape[2], dtype=torch.bool, device=query.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    weights = drop(scores.softmax(dim=-1).to(value.dtype))
    return torch.matmul(weights, value).transpose(1, 2), weights


def use_sample_dropout(stage: nn.Module, seed: int) -> SampleMasks:
    """Replace every nn.Dropout of `stage` (in place) by a SampleDropout of the same rate
    (the blocks' attention then applies its own explicitly); returns the SampleMasks
    that training forwards must run inside."""
    masks = SampleMasks(seed)
    dropouts = [(name, m) for name, m in stage.named_modules() if isinstance(m, nn.Dropout)]
    for name, module in dropouts:
        parent_name, _, attr = name.rpartition(".")
        parent = stage.get_submodule(parent_name) if parent_name else stage
        setattr(parent, attr, SampleDropout(module.p, name, masks))
    return masks
