"""Mode ``aqsgd-sparse``: AQ-SGD's delta against the per-sample cache, delta = x - m[i],
sent sparse. Each row's delta is rounded to the nearest of the levels -L..L times its
max-abs over L (L = 2**(bits-1) - 1), and only the entries that do not round to 0 travel:
threshold sparsification at half a level (Strom 2015) of AQ-SGD's deltas. Both caches add
exactly what was sent, so an entry left out stays in the next visit's delta.

The wire of n_q coded rows of N elements (`coded_spec`; K, the entries kept, is known
only after encoding, so the mode is `sized_by_data` and its messages travel length-first):
int32 (n_q,) entries kept a row; their positions in the row (K,), int16 when N < 2**15
else int32; codes (packed_nbytes(K, bits),) uint8, level + L; fp16 (n_q,) max-abs. The
performance model reads `expected_spec` (K from `expected_kept`). Plain torch on CPU and
CUDA, no kernel of its own. The method, its sources and how it differs from them:
docs/sparse-deltas.md.

One comparison, ``aqsgd-sparse``, DirectQ backward as ``aqsgd`` has; default bits 2/4.
"""

from __future__ import annotations

import math

import torch

from aqsgd.compress.modes.base import ActivationMode, Comparison
from aqsgd.compress.wire import DATA_SIZED, WireSpec
from aqsgd.quant.bitpack import pack, packed_nbytes, unpack

__all__ = ["MODE", "COMPARISONS", "SparseDelta", "expected_kept"]

# a row's max-abs over its RMS in the expected-size model: fitted to the share kept on
# the 100mbps default run (12.1% at 2 bits; docs/sparse-deltas.md)
PEAK_OVER_RMS = 3.1
FP16_MAX = 65504.0


def _levels(bits: int) -> int:
    return (1 << (bits - 1)) - 1


def expected_kept(bits: int) -> float:
    """The expected fraction of entries kept at `bits`: a Gaussian delta's share beyond
    half a level, the level PEAK_OVER_RMS / L RMS wide."""
    return math.erfc(PEAK_OVER_RMS / (2 * _levels(bits)) / math.sqrt(2))


def _position_dtype(row_numel: int) -> torch.dtype:
    return torch.int16 if row_numel < 1 << 15 else torch.int32


def _step(scale: torch.Tensor, levels: int) -> torch.Tensor:
    """(n_q, 1) fp32 level width of each row from its fp16 max-abs (1 for a zero row, whose
    entries all round to 0)."""
    s = scale.float().unsqueeze(1)
    return torch.where(s > 0, s / levels, torch.ones_like(s))


class SparseDelta(ActivationMode):
    name = "aqsgd-sparse"
    rank = 3.5  # tables: after aqsgd-lowbits, before aqsgd+gc
    wire_format = 6
    uses_cache = True
    sized_by_data = True
    bench_cases = (("fp32", 2), ("fp32", 4))
    smoke_case = ("fp32", 2)
    profile_bits = 2

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        if cfg.bits < 2:
            raise ValueError(f"CompressionConfig.bits: mode {self.name!r} needs at least 2 "
                             f"bits (a sign and a level), got {cfg.bits}")
        self.bits, self.levels = cfg.bits, _levels(cfg.bits)

    @classmethod
    def _spec(cls, cfg, q_shape, kept: int) -> WireSpec:
        n_q, row = q_shape[0], math.prod(q_shape[1:])
        codes = DATA_SIZED if kept == DATA_SIZED else packed_nbytes(kept, cfg.bits)
        return [((n_q,), torch.int32), ((kept,), _position_dtype(row)),
                ((codes,), torch.uint8), ((n_q,), torch.float16)]

    @classmethod
    def coded_spec(cls, cfg, q_shape) -> WireSpec:
        return cls._spec(cfg, q_shape, DATA_SIZED)

    @classmethod
    def expected_spec(cls, cfg, q_shape) -> WireSpec:
        return cls._spec(cfg, q_shape, round(math.prod(q_shape) * expected_kept(cfg.bits)))

    def encode(self, rows, generator, m=None) -> list[torch.Tensor]:
        n_q = rows.shape[0]
        flat = m.view(n_q, -1)  # (n_q, N), m's own storage: updated in place
        delta = rows.reshape(n_q, -1) - flat.float()
        size = delta.abs()
        scale = size.amax(dim=1).clamp_(max=FP16_MAX).half()  # (n_q,)
        step = _step(scale, self.levels)
        # kept: what does not round to level 0 (a tie that does is sent as 0: harmless)
        row_of, pos = (size > 0.5 * step).nonzero(as_tuple=True)  # (K,) each, row-major
        level = (delta[row_of, pos] / step[row_of, 0]).round_().clamp_(-self.levels,
                                                                       self.levels)
        counts = torch.bincount(row_of, minlength=n_q).to(torch.int32)
        flat[row_of, pos] += (level * step[row_of, 0]).to(flat.dtype)
        codes = pack((level + self.levels).to(torch.uint8), self.bits)
        return [counts, pos.to(_position_dtype(flat.shape[1])), codes, scale]

    def decode(self, coded, q_shape, m=None) -> torch.Tensor:
        counts, pos, codes, scale = coded
        n_q = q_shape[0]
        flat = m.view(n_q, -1)
        level = unpack(codes, self.bits, pos.numel()).float() - self.levels
        row_of = torch.repeat_interleave(torch.arange(n_q, device=m.device), counts.long())
        step = _step(scale, self.levels)
        flat[row_of, pos.long()] += (level * step[row_of, 0]).to(flat.dtype)
        return m


MODE = SparseDelta
COMPARISONS = (Comparison("aqsgd-sparse", rank=3.5, forward="aqsgd-sparse",
                          backward="directq", default_bits=(2, 4)),)
