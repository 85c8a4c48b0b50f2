"""Replayed coding: boundary coders that wait a profile's coding time instead of coding.

    coder = ReplayedCoder(make_compressor(cfg, "send", (L, D), n, device, seed),
                          encode_s=9e-12, decode_s=8e-12)      # seconds an element
    tensors = coder.encode(x, ids)      # the real message's spec, after encode_s x x.numel()
    x_hat = coder.decode(tensors, ids)  # (B, L, D) zeros, after decode_s x B L D

Under `compute.coding: replay` (aqsgd.train.settings.Coding) every pipeline compressor
is wrapped in a `ReplayedCoder`. It keeps the real compressor's framing: which rows go
raw (warm-up, first visits: the cache's `initialised` marks, kept as the real coder
keeps them), the header with epoch and sample ids, which the receiver checks as always,
and the size rule (aqsgd.compress.message.message_spec), so the message has the real
coded size and the meter counts the real bytes. What it carries past the header is
zeros, from one reused buffer a wire shape, and the receiver hands on a view of a
reused zero batch of the right shape and dtype: the values are synthetic, and neither
side allocates a message's worth a call. The wait runs to a deadline from the
start of the call, so the wrapper's own work counts inside it. A mode sized by data
(its size known only after coding) and adaptive widths are refused by the run config.

The data-parallel gradient codec is not replayed: its exchange runs as it does under
real compute (aqsgd.train.replay_weights), coding included. Its codecs code inside
their exchange in five different ways (shard by shard, inside QuantizedAdam's step,
per matrix for PowerSGD), so a stand-in would be a second exchange, not the real one.
"""

from __future__ import annotations

import time

import torch

from aqsgd.compress.activation import Compressor
from aqsgd.compress.message import message_spec

__all__ = ["ReplayedCoder", "wait_until"]


def wait_until(deadline: float) -> None:
    """Sleep until time.perf_counter() reaches `deadline` (at once if it has)."""
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


class ReplayedCoder:
    """One boundary's sender or receiver whose coding is a wait (module docstring):
    `encode_s` and `decode_s` seconds an element of the micro-batch (B, L, D)."""

    def __init__(self, inner: Compressor, *, encode_s: float, decode_s: float) -> None:
        if inner.adaptive or inner.cfg.sized_by_data:
            raise ValueError(f"replayed coding cannot stand in for mode {inner.cfg.mode!r}: "
                             f"its message size is chosen at run time")
        self.inner, self.encode_s, self.decode_s = inner, encode_s, decode_s
        self.cfg = inner.cfg
        self._zeros: dict[tuple, torch.Tensor] = {}  # (shape, dtype) -> reused payload

    # the compressor's interface the pipeline reads
    @property
    def adaptive(self) -> bool:
        return False

    @property
    def in_warmup(self) -> bool:
        return self.inner.in_warmup

    @property
    def last_bits(self) -> int:
        return self.inner.last_bits

    def set_epoch(self, epoch: int) -> None:
        self.inner.set_epoch(epoch)

    def wire_spec(self, batch_shape, sample_ids, training: bool = True):
        return self.inner.wire_spec(batch_shape, sample_ids, training)

    def _payload(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        key = (tuple(shape), dtype)
        if key not in self._zeros:
            self._zeros[key] = torch.zeros(shape, dtype=dtype, device=self.inner.device)
        return self._zeros[key]

    def _mark_raw(self, lay) -> None:
        """The rows sent raw are cached from now on, as the real coder's scatter marks."""
        if lay.cached and lay.raw_rows.numel():
            self.inner.cache.initialised.index_fill_(0, lay.ids[lay.raw_rows], True)

    def encode(self, x: torch.Tensor, sample_ids, training: bool = True) -> list[torch.Tensor]:
        start = time.perf_counter()
        c = self.inner
        if c.role != "send":
            raise RuntimeError("encode() called on a 'recv' coder")
        shape = tuple(x.shape)
        lay = c._layout(shape[0], sample_ids, training)
        spec = message_spec(c.cfg, shape, lay.raw_rows.numel(), training, bits=c.bits)
        header = lay.header(c.epoch, c._widths(training)).to(x.device)
        out = [header] + [self._payload(s, dtype) for s, dtype in spec[1:]]
        self._mark_raw(lay)
        c.last_bits = c.bits if lay.q_rows.numel() else 0
        wait_until(start + self.encode_s * x.numel())
        return out

    def decode(self, tensors, sample_ids, training: bool = True) -> torch.Tensor:
        start = time.perf_counter()
        c = self.inner
        if c.role != "recv":
            raise RuntimeError("decode() called on a 'send' coder")
        lay = c._layout(None, sample_ids, training)
        c.bits = c._check_header(tensors[0], lay, training)
        self._mark_raw(lay)
        c.last_bits = c.bits if lay.q_rows.numel() else 0
        # a view of one reused buffer: a tensor of its own (its own .grad), no allocation
        out = self._payload((lay.ids.numel(), *c.sample_shape), c.out_dtype)
        out = out.view(out.shape)
        wait_until(start + self.decode_s * out.numel())
        return out
