"""Compressors that sit on every pipeline send and receive (activations and gradients).

One sender object and one receiver object per stage boundary and direction:

    fwd_send = make_compressor(cfg, "send", (L, D), num_samples, device, seed)
    fwd_send.set_epoch(epoch)
    tensors = fwd_send.encode(x, sample_ids)           # list of tensors, as wire_spec says
    # receiver: posts irecvs from fwd_recv.wire_spec((B, L, D), sample_ids), then
    x_hat = fwd_recv.decode(tensors, sample_ids)

A mode (aqsgd.compress.modes, `CompressionConfig.mode`) codes the rows a message does not
send raw; this module frames every message the same way around them, and keeps the
per-sample cache. Which rows go raw (warm-up, first visits, evaluation) and why:
docs/architecture/compress.md, "Compressors"; the size rule of a message: aqsgd.compress.message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aqsgd.compress.cache import ActivationCache, check_sample_ids
from aqsgd.compress.message import (
    EVAL_DTYPE,
    GRADIENT_MODES,
    HEADER_FIELDS,
    TRANSPORT_DTYPES,
    WIDTH_FIELDS,
    CompressionConfig,
    message_spec,
)
from aqsgd.compress.modes.base import FMT_RAW, FMT_WARMUP
from aqsgd.compress.registry import origin

__all__ = ["Compressor", "make_compressor"]

# Note [adaptive widths]: with ``widths`` (aqsgd.compress.adaptive) a sender may code each
# training message at another of those bit widths. The receiver must size its receives
# before the message arrives, so a width is announced one message ahead: every message's
# header carries its own width and the width of the next training message of its direction
# (an evaluation message repeats its own and changes nothing). Both sides start at
# ``bits``; the sender's ``set_next_bits`` sets what it announces next, the receiver reads
# it from the header, checks the message's own width against what it expected, and decodes
# with the coder of that width. The cache is written from the decoded rows as always, so
# both copies stay bit-identical whatever widths are chosen. The header is two fields
# longer only in a direction with ``widths``; every other mode's bytes are unchanged.


@dataclass(frozen=True)
class _Layout:
    """How one message is coded; derived identically by sender and receiver."""

    fmt: int
    ids: torch.Tensor  # (B,) int64 CPU
    raw_rows: torch.Tensor  # positions in the batch sent raw, (n_raw,)
    q_rows: torch.Tensor  # positions coded by the mode, (n_q,)
    cached: bool  # whether this message reads/writes the cache

    def header(self, epoch: int, widths: tuple[int, ...] = ()) -> torch.Tensor:
        head = torch.tensor([self.fmt, epoch, self.raw_rows.numel(), *widths],
                            dtype=torch.int64)
        return torch.cat([head, self.ids])  # (3 [+ 2] + B,)


class Compressor:
    """Encoder (role ``send``) or decoder (role ``recv``) of one boundary and direction.

    ``sample_shape`` is one sample's activation shape (L, D); ``num_samples`` the data set
    size (cache capacity); ``kind="gradient"`` restricts modes to those that code gradients.
    """

    def __init__(
        self,
        cfg: CompressionConfig,
        role: str,
        sample_shape,
        num_samples: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        kind: str = "activation",
        out_dtype: torch.dtype = torch.float32,
    ) -> None:
        if not isinstance(cfg, CompressionConfig):
            raise TypeError(f"make_compressor: cfg must be a CompressionConfig, got {type(cfg)}")
        if role not in ("send", "recv"):
            raise ValueError(f"make_compressor: role must be 'send' or 'recv', got {role!r}")
        if kind not in ("activation", "gradient"):
            raise ValueError(
                f"make_compressor: kind must be 'activation' or 'gradient', got {kind!r}"
            )
        if kind == "gradient" and cfg.mode not in GRADIENT_MODES:
            raise ValueError(
                f"gradient compressors support modes {GRADIENT_MODES}, got mode={cfg.mode!r} "
                "(AQ-SGD delta-codes activations only)"
            )
        self.cfg, self.role, self.kind = cfg, role, kind
        self.sample_shape = tuple(int(n) for n in sample_shape)
        self.device = torch.device(device)
        self.out_dtype = out_dtype
        self.epoch = 0
        self.coder = cfg.coding(cfg)  # the mode: codes the rows not sent raw
        # Note [adaptive widths]: one coder per width; `bits` is the width of the next
        # training message of this direction, known to both sides
        self._coders = {b: cfg.coding(cfg.with_bits(b))
                        for b in cfg.widths} or {cfg.bits: self.coder}
        self.bits = self._next_bits = cfg.bits
        self.last_bits = 0  # width of the last message encoded (0: no row coded)
        self._transport = TRANSPORT_DTYPES[cfg.dtype]
        if self.coder.codes_rows and cfg.quant.granularity == "group":
            numel = math.prod(self.sample_shape)
            if numel % cfg.quant.group_size:
                raise ValueError(
                    f"CompressionConfig.quant.group_size={cfg.quant.group_size} must divide "
                    f"the per-sample element count {numel} (sample_shape {self.sample_shape})"
                )
        self._generator = None
        if cfg.quant.stochastic:
            self._generator = torch.Generator(device=self.device)
            self._generator.manual_seed(seed)
        self.cache = None
        # dtype of the working copy of m for delta rows. On CPU an fp16 cache is widened
        # to fp32 first: quant's contract is m <- (m.float() + deQ).to(m.dtype) either way,
        # and writing the fp32 result back to the fp16 store is that same single rounding,
        # but torch's mixed fp16/fp32 in-place ops on CPU take about twice as long.
        self._m_dtype = None
        if cfg.uses_cache:
            spec = cfg.cache_spec(self.sample_shape, num_samples)
            self.cache = ActivationCache(spec, self.device)
            if self.device.type == "cpu":
                self._m_dtype = torch.float32

    # --- bookkeeping shared by both sides -------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"set_epoch: epoch must be an int >= 0, got {epoch!r}")
        self.epoch = epoch

    @property
    def adaptive(self) -> bool:
        return bool(self.cfg.widths)

    def set_next_bits(self, bits: int) -> None:
        """The width of the training messages after the next one (sender; the next one's
        was announced by the message before it, Note [adaptive widths])."""
        if self.role != "send" or not self.adaptive:
            raise RuntimeError("set_next_bits() is for the sender of an adaptive direction")
        if bits not in self._coders:
            raise ValueError(f"set_next_bits: {bits} is not one of widths {self.cfg.widths}")
        self._next_bits = bits

    def _widths(self, training: bool) -> tuple[int, ...]:
        """The header's width fields of the next message: (bits, next bits)."""
        if not self.adaptive:
            return ()
        return (self.bits, self._next_bits if training else self.bits)

    @property
    def in_warmup(self) -> bool:
        """Training messages of this epoch are sent raw to warm up (every mode that codes
        rows acts on it; the pipeline flags these steps in its metrics)."""
        return self.epoch < self.cfg.warmup_epochs

    def _layout(self, batch_size: int | None, sample_ids, training: bool) -> _Layout:
        """``batch_size=None``: the micro-batch is as long as the ids (receiver side)."""
        cached = training and self.cache is not None
        ids = check_sample_ids(sample_ids, self.cache.num_samples if cached else None)
        if batch_size is None:
            batch_size = ids.numel()
        if ids.numel() != batch_size:
            raise ValueError(
                f"got {ids.numel()} sample ids for a micro-batch of {batch_size} rows"
            )
        every = torch.arange(batch_size)
        none = every[:0]
        if not training or not self.coder.codes_rows:
            return _Layout(FMT_RAW, ids, every, none, False)
        if self.in_warmup:
            return _Layout(FMT_WARMUP, ids, every, none, cached)
        fmt = self.coder.wire_format
        if self.cache is None:
            return _Layout(fmt, ids, none, every, False)
        if self.cfg.first_visit == "zero":
            return _Layout(fmt, ids, none, every, True)
        fresh = ~self.cache.initialised[ids]  # (B,) rows never written: send raw
        if not bool(fresh.any()):  # the usual case after the first epoch: no masking
            return _Layout(fmt, ids, none, every, True)
        return _Layout(fmt, ids, every[fresh], every[~fresh], True)

    def wire_spec(self, batch_shape, sample_ids, training: bool = True):
        """[(shape, dtype)] of the message for this micro-batch, in wire order."""
        batch_shape = tuple(int(n) for n in batch_shape)
        self._check_shape(batch_shape)
        lay = self._layout(batch_shape[0], sample_ids, training)
        return message_spec(self.cfg, batch_shape, lay.raw_rows.numel(), training,
                            bits=self.bits)

    def _check_shape(self, batch_shape) -> None:
        if tuple(batch_shape[1:]) != self.sample_shape:
            raise ValueError(
                f"micro-batch shape {tuple(batch_shape)} does not match the compressor's "
                f"sample_shape {self.sample_shape}"
            )

    def _run(self, method, *args):
        """A method of the mode; an exception it raises carries a note naming the mode and
        where it comes from (a plug-in's file), read by the worker's failure line."""
        try:
            return method(*args)
        except Exception as err:
            err.add_note(f"in {method.__name__} of activation mode {self.cfg.mode!r} "
                         f"({origin(self.cfg.mode)}), {self.role} side")
            raise

    # --- sender ---------------------------------------------------------------------------
    def encode(self, x: torch.Tensor, sample_ids, training: bool = True) -> list[torch.Tensor]:
        """Code a micro-batch (B, *S) into the tensors that ``wire_spec`` describes.

        A raw message in x's own dtype may hold x itself (no copy): do not modify x in
        place before the send has completed.
        """
        if self.role != "send":
            raise RuntimeError("encode() called on a 'recv' compressor")
        self._check_shape(tuple(x.shape))
        lay = self._layout(x.shape[0], sample_ids, training)
        out = [lay.header(self.epoch, self._widths(training)).to(x.device)]
        coder = self._coders[self.bits]
        if lay.raw_rows.numel():
            dtype = self._transport if training else EVAL_DTYPE
            raw = _take(x, lay.raw_rows).to(dtype).contiguous()  # (n_raw, *S)
            out.append(raw)
            if lay.cached:
                self.cache.scatter_checked(_take(lay.ids, lay.raw_rows), raw.float())
        if lay.q_rows.numel():
            rows = _take(x, lay.q_rows).float()  # (n_q, *S); no copy when x is fp32 and whole
            if lay.cached:
                q_ids = _take(lay.ids, lay.q_rows)
                m = self.cache.gather_checked(q_ids, self._m_dtype)  # fresh copy, updated in place
                out += self._run(coder.encode, rows, self._generator, m)
                self.cache.scatter_checked(q_ids, m)  # rounds to the stored dtype once
            else:
                out += self._run(coder.encode, rows, self._generator)
        self.last_bits = self.bits if lay.q_rows.numel() else 0
        if training:
            self.bits = self._next_bits
        return out

    # --- receiver -------------------------------------------------------------------------
    def decode(self, tensors, sample_ids, training: bool = True) -> torch.Tensor:
        """Rebuild the micro-batch (B, *S) in ``out_dtype`` from a message."""
        if self.role != "recv":
            raise RuntimeError("decode() called on a 'send' compressor")
        tensors = list(tensors)
        lay = self._layout(None, sample_ids, training)
        ids = lay.ids
        next_bits = self._check_header(tensors[0], lay, training)
        coder = self._coders[self.bits]
        parts = []  # (positions in the batch, fp32 rows)
        part = 1
        if lay.raw_rows.numel():
            raw = tensors[part].to(self.device).float()  # (n_raw, *S)
            part += 1
            parts.append((lay.raw_rows, raw))
            if lay.cached:
                self.cache.scatter_checked(_take(lay.ids, lay.raw_rows), raw)
        if lay.q_rows.numel():
            coded = [t.to(self.device) for t in tensors[part:]]
            q_shape = (lay.q_rows.numel(), *self.sample_shape)
            if lay.cached:
                q_ids = _take(lay.ids, lay.q_rows)
                m = self.cache.gather_checked(q_ids, self._m_dtype)  # (n_q, *S)
                rows = self._run(coder.decode, coded, q_shape, m)  # m updated in place
                stored = self.cache.stored_dtype
                if stored is not None:  # aqsgd: the stage input is the stored row m[i]
                    rows = rows.to(stored)
                self.cache.scatter_checked(q_ids, rows)
                rows = rows.float()
            else:
                rows = self._run(coder.decode, coded, q_shape)
            parts.append((lay.q_rows, rows))
        self.last_bits = self.bits if lay.q_rows.numel() else 0
        self.bits = next_bits
        if len(parts) == 1:  # every row coded the same way, already in batch order
            return parts[0][1].to(self.out_dtype)
        out = torch.empty((ids.numel(), *self.sample_shape), dtype=self.out_dtype,
                          device=self.device)  # fmt: skip
        for positions, rows in parts:
            out.index_copy_(0, positions.to(self.device), rows.to(self.out_dtype))
        return out

    def _check_header(self, header: torch.Tensor, lay: _Layout, training: bool) -> int:
        """Check the header against what the receiver derived; returns the width the
        sender announced for the next training message (Note [adaptive widths])."""
        got = header.to("cpu", torch.int64).reshape(-1)
        widths = ()
        if self.adaptive and got.numel() >= HEADER_FIELDS + WIDTH_FIELDS:
            announced = int(got[HEADER_FIELDS + 1])
            ok = announced in self._coders if training else announced == self.bits
            widths = (self.bits, announced if ok else -1)
        expected = lay.header(self.epoch, widths)
        if got.shape != expected.shape or not torch.equal(got, expected):
            fields = "format, epoch, n_raw, bits, next bits" if self.adaptive else (
                "format, epoch, n_raw")
            raise RuntimeError(
                "activation message header disagrees with the receiver: expected "
                f"[{fields}, ids...] = {expected.tolist()}, got {got.tolist()} "
                "(sender and receiver differ in epoch, sample ids, cache state or width; "
                f"widths {self.cfg.widths or (self.cfg.bits,)})"
            )
        return widths[1] if widths else self.bits

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()

    def __enter__(self) -> Compressor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _take(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rows ``positions`` of x (or entries of the ids); x itself when they are all rows
    (positions are sorted and distinct)."""
    if positions.numel() == x.shape[0]:
        return x
    return x.index_select(0, positions.to(x.device))


# the builder's name the pipeline, the GPU check and the benchmarks call
make_compressor = Compressor
