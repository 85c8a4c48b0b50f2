"""The in-graph half of an activation mode: torch modules on each side of a stage boundary,
trained with the model (docs/trainable-codecs.md; a plug-in's: docs/plugins.md).

    half = SSN.in_graph(cfg, BoundaryShape(seq_len=L, width=D, vocab_size=V, seed=s))
    z = half.sender_module()(h, tokens)          # hidden (B, L, D) -> coordinates (B, L, k)
    h = half.receiver_module()(z, tokens)        # (B, L, k) -> (B, L, D)
    boundary = StageBoundary(half, first=False, last=False)   # what the pipeline calls

A mode declares its half as `ActivationMode.in_graph` (an `InGraph` subclass, or None for
a byte-level mode). The byte-level half of the same mode (its raw dtype or its codes)
then carries the k coordinates instead of the D channels: every message of the boundary,
both directions, has rows of `boundary_width(cfg, D)` channels. `StageBoundary` holds a
stage's receiver (from the previous boundary) and sender (to the next) as submodules, so
they join the stage's parameters, optimizer and state dict. Imports torch and
aqsgd.compress.wire only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from aqsgd.compress.wire import WireSpec

__all__ = ["BoundaryShape", "InGraph", "StageBoundary", "TOKEN_DTYPE", "boundary_width",
           "check_coords", "token_spec"]

# Note [token ids on the wire]: a mode whose receiver needs the tokens (ssn) appends them to
# every activation message as int16, the id offset by 2^15 (ids 0..65535: any GPT-2
# vocabulary), 2 bytes a token; gradients travel without them.
TOKEN_DTYPE = torch.int16
_TOKEN_OFFSET = 1 << 15


@dataclass(frozen=True)
class BoundaryShape:
    """What an in-graph half is built from: the model's shape and the run's seed, and
    `embeddings`, a call returning the (token (V, D), position (L, D)) tables the run
    starts from (the checkpoint's, or the random init's), for a half anchored on them."""

    seq_len: int
    width: int  # D, the hidden width
    vocab_size: int
    seed: int = 0
    embeddings: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None


class InGraph:
    """The in-graph half of a mode. Subclass it, implement `sender_module` and
    `receiver_module`; `coords` (k) is the width of the rows the byte-level half codes."""

    carries_tokens: ClassVar[bool] = False  # the receiver needs the token ids (on the wire)
    # its parameters start from the first step's boundary activations (`calibrate`)
    calibrates: ClassVar[bool] = False
    # k when CompressionConfig.coords is unset: a fraction of the width (ssn's reference:
    # 160 of 1024)
    default_fraction: ClassVar[float] = 160 / 1024

    def __init__(self, cfg, shape: BoundaryShape) -> None:
        self.cfg, self.shape = cfg, shape
        self.coords = boundary_width(cfg, shape.width)

    def sender_module(self) -> nn.Module:
        """forward(hidden (B, L, D), tokens (B, L) int64) -> coordinates (B, L, k)."""
        raise NotImplementedError(f"{type(self).__name__} declares no sender_module")

    def receiver_module(self) -> nn.Module:
        """forward(coordinates (B, L, k), tokens (B, L) int64) -> hidden (B, L, D)."""
        raise NotImplementedError(f"{type(self).__name__} declares no receiver_module")

    def constrain(self, writers: list[nn.Module], embedding: nn.Module | None) -> None:
        """Make the stage fit the half (default: nothing): `writers` are the modules whose
        outputs are added to the residual stream (attention and MLP of each block but the
        model's last), `embedding` the first stage's (input ids -> (B, L, D)) or None."""

    def calibrate(self, module: nn.Module, activations: torch.Tensor) -> None:
        """Set a sender or receiver module from boundary activations (N, D) both sides
        saw (only for a half that `calibrates`)."""
        raise NotImplementedError(f"{type(self).__name__} does not calibrate")


def check_coords(cfg, width: int | None = None) -> None:
    """ValueError naming CompressionConfig.coords when it does not fit the mode (and the
    hidden `width`, when known)."""
    half = cfg.coding.in_graph
    k = cfg.coords
    if half is None and k is not None:
        raise ValueError(f"CompressionConfig.coords: mode {cfg.mode!r} has no in-graph half, "
                         f"so it takes no coordinates; got {k!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"CompressionConfig.coords: mode {cfg.mode!r} sends k coordinates a "
                         f"token, an integer >= 1; got {k!r}")
    if k is not None and width is not None and k > width:
        raise ValueError(f"CompressionConfig.coords: mode {cfg.mode!r} sends at most the "
                         f"hidden width {width} coordinates a token; got {k}")


def boundary_width(cfg, width: int) -> int:
    """Channels a token of a boundary carries under `cfg` (the forward direction's): the
    in-graph half's k, or `width` for a byte-level mode."""
    half = cfg.coding.in_graph
    if half is None:
        return width
    check_coords(cfg, width)
    if cfg.coords is not None:
        return cfg.coords
    return max(1, math.ceil(width * half.default_fraction))


def token_spec(cfg, batch_shape) -> WireSpec:
    """The tensors an activation message of `cfg` (the forward direction's) carries after
    the byte-level half's, for a (B, L, ...) micro-batch: its token ids (B, L) when the
    mode's half needs them (Note [token ids on the wire]), else nothing."""
    half = cfg.coding.in_graph
    if half is None or not half.carries_tokens:
        return []
    return [(tuple(int(n) for n in batch_shape[:2]), TOKEN_DTYPE)]


class StageBoundary(nn.Module):
    """One stage's in-graph halves: `receiver` (its input boundary; None on the first
    stage) and `sender` (its output boundary; None on the last). Without a half (a
    byte-level mode) it is the identity and sends nothing extra."""

    def __init__(self, half: InGraph | None, first: bool, last: bool) -> None:
        super().__init__()
        self.half = half
        self.receiver = None if half is None or first else half.receiver_module()
        self.sender = None if half is None or last else half.sender_module()
        self.tokens = half is not None and half.carries_tokens

    def inbound(self, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The stage's input from a received message: (B, L, k) -> (B, L, D)."""
        return x if self.receiver is None else self.receiver(x, tokens)

    def outbound(self, h: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """What the stage sends: (B, L, D) -> (B, L, k)."""
        return h if self.sender is None else self.sender(h, tokens)

    def extra_spec(self, batch_shape) -> WireSpec:
        """Tensors an activation message carries after the byte-level half's: the token
        ids (B, L) (Note [token ids on the wire]) or nothing."""
        return [] if self.half is None else token_spec(self.half.cfg, batch_shape)

    def pack(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """The extra tensors of an activation message of these token ids (B, L)."""
        if not self.tokens:
            return []
        return [(tokens.to(torch.int32) - _TOKEN_OFFSET).to(TOKEN_DTYPE).contiguous()]

    def unpack(self, tensors: list[torch.Tensor], tokens: torch.Tensor
               ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(the byte-level half's tensors, the token ids (B, L) int64): the received ones,
        or `tokens` (the stage's own copy) when the mode sends none."""
        if not self.tokens:
            return tensors, tokens
        wire = tensors[-1].to(torch.int64) + _TOKEN_OFFSET
        return tensors[:-1], wire.to(tokens.device)
