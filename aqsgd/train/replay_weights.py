"""Stand-in weights of the real size, for data-parallel replicas under replayed compute.

    shapes = stage_shapes(model, stage, stages)     # the real stage's parameter shapes
    weights = ReplayWeights(shapes, seed=stage)     # one parameter of each shape
    weights.attach_grads()                          # every p.grad: its synthetic gradient

A replayed stage (aqsgd.train.replay.ReplayStage) computes nothing of a model, so it has
no gradient of its own to average over the replicas. With `pipeline.replicas > 1` it
holds a `ReplayWeights` instead: one parameter of every shape the real stage has (the
GPT-2 stage built on the meta device: no memory), so the data-parallel exchange
(aqsgd.compress.gradient, the run's codec, its optimizer and its byte count) moves what
it would move for the real stage, in fp32 as the real runtime's gradients are.

Memory: the parameters are views of one flat fp32 vector and their gradients views of a
second one, allocated once and reused every step (the pipeline sets gradients to None
after the optimizer step; `attach_grads`, called by the stage's forward, puts the views
back). The gradient's values are synthetic: seeded normal noise at the start, then
whatever the codec's average wrote into it. The codec's own state (AdamW's or
QuantizedAdam's moments, error feedback, PowerSGD's factors) is the real codec's, in
its real size. docs/replay.md says what this costs a rank.
"""

from __future__ import annotations

import math

import torch

from aqsgd.model.config import ModelConfig, layer_split
from aqsgd.model.gpt2 import GPT2Stage

__all__ = ["stage_shapes", "ReplayWeights"]

GRAD_SCALE = 1e-3  # the synthetic gradient's standard deviation


def stage_shapes(model: ModelConfig, stage: int, stages: int) -> list[tuple[int, ...]]:
    """The shapes of stage `stage`'s trainable parameters of `model` in `stages` stages, in
    the real module's order (built on the meta device: no memory)."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage_shapes: stage must be in [0, {stages}), got {stage}")
    with torch.device("meta"):
        module = GPT2Stage(model, layer_split(model.n_layer, stages)[stage],
                           first=stage == 0, last=stage == stages - 1)
    return [tuple(p.shape) for p in module.parameters() if p.requires_grad]


class ReplayWeights(torch.nn.Module):
    """One fp32 parameter of each of `shapes`, views of one flat vector, and their
    gradients, views of a second (module docstring)."""

    def __init__(self, shapes: list[tuple[int, ...]], seed: int = 0,
                 device: torch.device | str = "cpu") -> None:
        super().__init__()
        if not shapes:
            raise ValueError("ReplayWeights needs at least one parameter shape")
        sizes = [math.prod(s) for s in shapes]
        self.numel = sum(sizes)
        # made where they stay: a later .to() would copy the parameters off the views
        flat = torch.zeros(self.numel, device=device)
        g = torch.Generator().manual_seed(seed)
        self._grad_flat = torch.randn(self.numel, generator=g).mul_(GRAD_SCALE).to(device)
        self.weights = torch.nn.ParameterList()
        self._grads = []
        offset = 0
        for shape, n in zip(shapes, sizes, strict=True):
            self.weights.append(torch.nn.Parameter(flat[offset:offset + n].view(shape)))
            self._grads.append(self._grad_flat[offset:offset + n].view(shape))
            offset += n

    def attach_grads(self) -> None:
        """Give every parameter without a gradient its view of the gradient vector."""
        for p, grad in zip(self.weights, self._grads, strict=True):
            if p.grad is None:
                p.grad = grad
