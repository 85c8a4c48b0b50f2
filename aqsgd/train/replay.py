"""Replayed compute: stand-in pipeline stages that wait a profile's measured times.

    compute = ComputeConfig(source="replay:cpu-2core", profile="cpu-2core",
                            precision="fp32", stages=(StageTimes(0.009, 0.011, 0.0005), ...))
    module = ReplayStage(compute.stages[s], first=s == 0, last=s == S - 1, n_embd=D)
    hidden = module(tokens)                  # (B, L, D) fp32 after forward_s seconds
    optimizer_wait(optimizer, compute.stages[s].optimizer_s)

A `ReplayStage` holds one scalar weight and no model (with data-parallel replicas also
stand-in weights of the real stage's size for the exchange: aqsgd.train.replay_weights;
`compute.coding: replay` waits the coding too: aqsgd.train.replay_coding): its forward
waits the profile's forward time and returns a tensor of the real boundary shape and
dtype that depends on its input, its backward (a custom autograd function) waits the
backward time and returns a gradient of the input's shape. The last stage returns (B, L) instead of
logits (never materialised) and `replay_loss` makes the scalar loss of it. The runtime
(aqsgd.train.pipeline) codes, counts and sends these tensors as it does real ones.
The harness resolves a profile into `ComputeConfig` (bench.perfmodel.profile), so a
worker needs no profile file; docs/replay.md says what replay captures and what not.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from aqsgd.train.settings import Coding, Compute, Precision
from specfile import check_fields, setting

__all__ = ["REPLAY_PREFIX", "StageTimes", "CodingRates", "ComputeConfig", "ReplayStage",
           "replay_loss", "optimizer_wait", "profile_reference", "check_compute"]

REPLAY_PREFIX = "replay:"  # Compute's spelling of a replayed run: replay:PROFILE


def profile_reference(source: str) -> str | None:
    """The PROFILE of a `replay:PROFILE` compute setting; None for real compute."""
    return source[len(REPLAY_PREFIX):] if source.startswith(REPLAY_PREFIX) else None


def check_compute(owner: str, source: str) -> None:
    """The compute setting's spelling: 'real', or 'replay:PROFILE' with a PROFILE."""
    if source != "real" and not (profile_reference(source) or "").strip():
        raise ValueError(f"{owner} must be 'real' or 'replay:PROFILE' (a profile file, or a "
                         f"name under profiles/), got {source!r}")


def _seconds(owner: str, name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{owner}.{name} must be seconds >= 0, got {value!r}")


@dataclass(frozen=True)
class StageTimes:
    """One stage's replayed costs: per micro-batch (forward_s, backward_s) and per
    optimizer step (optimizer_s), in seconds."""

    forward_s: float
    backward_s: float
    optimizer_s: float

    def __post_init__(self):
        for name in ("forward_s", "backward_s", "optimizer_s"):
            _seconds("StageTimes", name, getattr(self, name))


@dataclass(frozen=True)
class CodingRates:
    """Replayed coding's seconds a coded element, from the profile's `compress` tables
    for the run's forward and backward modes (encode_s_per_element,
    decode_s_per_element). The data-parallel gradient codec is not among them: it runs
    (aqsgd.train.replay_coding says why)."""

    forward_encode_s: float
    forward_decode_s: float
    backward_encode_s: float
    backward_decode_s: float

    def __post_init__(self):
        for name in ("forward_encode_s", "forward_decode_s", "backward_encode_s",
                     "backward_decode_s"):
            _seconds("CodingRates", name, getattr(self, name))


@dataclass(frozen=True)
class ComputeConfig:
    """How the stages compute: `source` real, or replay:PROFILE with that profile's times
    for this run's cut (one StageTimes per stage, stage order) resolved by the harness;
    `profile` is the profile's own name and `precision` the compute precision its times
    stand for, both for the run record. `derived` says how the stage times were made
    when the profile has no measured cut (its FLOP rate: bench.perfmodel.workload), None
    when measured. `coding` real runs the compressors; replay waits `coding_rates`
    (aqsgd.train.replay_coding). `grad_params`: with data-parallel replicas, each
    stage's real parameter count, which its stand-in weights hold and the exchange moves
    with synthetic values (aqsgd.train.replay_weights); () without replicas."""

    source: Compute = setting(Compute)
    profile: str | None = None
    precision: Precision | None = None
    stages: tuple[StageTimes, ...] = ()
    derived: str | None = None
    coding: Coding = setting(Coding)
    coding_rates: CodingRates | None = None
    grad_params: tuple[int, ...] = ()

    def __post_init__(self):
        check_fields(self)
        check_compute("source", self.source)
        if self.replayed and not (self.stages and self.profile and self.precision):
            raise ValueError(f"compute.source {self.source!r} needs the profile's name, its "
                             f"precision and one entry of stages per stage, got profile="
                             f"{self.profile!r}, precision={self.precision!r}, "
                             f"{len(self.stages)} stages")
        if not self.replayed and (self.stages or self.profile or self.precision
                                  or self.derived):
            raise ValueError(f"compute.source 'real' takes no profile, precision or stages, "
                             f"got profile={self.profile!r}, {len(self.stages)} stages")
        if (self.coding == "replay") != (self.coding_rates is not None):
            raise ValueError(f"compute.coding {self.coding!r} needs coding_rates exactly when "
                             f"it is 'replay' (the profile's seconds an element), got "
                             f"{self.coding_rates!r}")
        if self.grad_params and not self.replayed:
            raise ValueError(f"compute.grad_params is for replayed compute's stand-in "
                             f"weights, got {list(self.grad_params)} with source "
                             f"{self.source!r}")
        if self.coding == "replay" and not self.replayed:
            raise ValueError(f"compute.coding 'replay' needs replayed compute (compute.source "
                             f"replay:PROFILE), got source {self.source!r}")

    @property
    def replayed(self) -> bool:
        return profile_reference(self.source) is not None


def _wait_until(deadline: float) -> None:
    """Sleep until time.perf_counter() reaches `deadline` (at once if it has)."""
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


class _Replayed(torch.autograd.Function):
    """out = h * gain (or, on the last stage, the mean of h over its width times gain),
    ready `forward_s` after `start`; backward gives h the gradient the product gives it
    after `backward_s`. The stand-in weight gets a zero gradient: it stands for weights
    that are not there, and learns nothing."""

    @staticmethod
    def forward(ctx, h, gain, start, forward_s, backward_s, last):
        out = h.mean(-1) * gain if last else h * gain  # (B, L) or h's shape
        ctx.save_for_backward(gain)
        ctx.shape, ctx.backward_s, ctx.last = h.shape, backward_s, last
        _wait_until(start + forward_s)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        start = time.perf_counter()
        (gain,) = ctx.saved_tensors
        grad_h = None
        if ctx.needs_input_grad[0]:
            if ctx.last:  # d mean_D(h) / dh = 1 / D on every element
                g = grad_out.unsqueeze(-1) * (gain / ctx.shape[-1])
                grad_h = g.expand(ctx.shape).contiguous()  # (B, L, D)
            else:
                grad_h = grad_out * gain
        _wait_until(start + ctx.backward_s)
        grad_gain = torch.zeros_like(gain) if ctx.needs_input_grad[1] else None
        return grad_h, grad_gain, None, None, None, None


class ReplayStage(torch.nn.Module):
    """A pipeline stage that computes nothing of a model: its forward and backward take
    the profile's times and keep the real boundary tensors' shapes and dtypes.

    first stage: tokens (B, L) int64 -> hidden (B, L, n_embd) fp32, a fixed function of
                 the token ids (id mod 13, centred, times a per-channel scale: one
                 pass over the output, 1-2 ms at GPT2-XL's (1, 1024, 1600) on a core)
    middle:      hidden (B, L, D) -> hidden of the same shape and dtype
    last stage:  hidden (B, L, D) -> (B, L), never logits (replay_loss takes it)

    The work the stand-in does counts inside the profiled time (each wait runs to a
    deadline from the start of the call), so the wait is the profile's time whenever
    that work is shorter.
    """

    def __init__(self, times: StageTimes, *, first: bool, last: bool, n_embd: int,
                 weights: torch.nn.Module | None = None):
        super().__init__()
        if n_embd < 1:
            raise ValueError(f"ReplayStage.n_embd must be >= 1, got {n_embd}")
        self.times, self.first, self.last = times, first, last
        # data-parallel replicas: the real stage's parameter shapes, with synthetic
        # gradients the exchange averages (aqsgd.train.replay_weights.ReplayWeights);
        # then the scalar is not trained, so the exchange moves the real count exactly
        self.weights = weights
        self.gain = torch.nn.Parameter(torch.ones(()), requires_grad=weights is None)
        scale = torch.linspace(0.01, 0.2, n_embd)  # (D,)
        self.register_buffer("scale", scale, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        if self.weights is not None:
            self.weights.attach_grads()  # views: no work, inside the forward's time
        if self.first:
            if x.dtype != torch.int64 or x.dim() != 2:
                raise ValueError(f"ReplayStage (first stage) takes token ids (B, L) int64, "
                                 f"got {tuple(x.shape)} {x.dtype}")
            level = (x % 13).float() - 6.0  # (B, L) in [-6, 6]
            h = level.unsqueeze(-1) * self.scale  # (B, L, D) fp32
            if not self.gain.requires_grad:  # the output still needs a backward
                h.requires_grad_(True)
        else:
            if x.dim() != 3 or x.shape[-1] != self.scale.numel():
                raise ValueError(f"ReplayStage takes hidden states (B, L, "
                                 f"{self.scale.numel()}), got {tuple(x.shape)}")
            h = x
        t = self.times
        return _Replayed.apply(h, self.gain, start, t.forward_s, t.backward_s, self.last)


def replay_loss(out: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """The last stand-in stage's scalar 'loss': the mean of its (B, L) output, which
    depends on every element of the stage's input (lm_loss's place under replay)."""
    if out.shape != input_ids.shape:
        raise ValueError(f"replay_loss takes the last ReplayStage's (B, L) output, got "
                         f"{tuple(out.shape)} for input_ids {tuple(input_ids.shape)}")
    return out.float().mean()


def optimizer_wait(optimizer: torch.optim.Optimizer, seconds: float) -> None:
    """Make every `optimizer.step()` take `seconds` (the profile's optimizer time) from
    its start, through the optimizer's step hooks."""
    _seconds("optimizer_wait", "seconds", seconds)
    started: list[float] = []

    def pre(*_):
        started[:] = [time.perf_counter()]

    def post(*_):
        _wait_until(started[0] + seconds)

    optimizer.register_step_pre_hook(pre)
    optimizer.register_step_post_hook(post)
