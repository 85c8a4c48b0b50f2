"""Plug-in mode ``randproj``: a random projection of activation deltas, an activation
compressor the suite does not ship, written as a user writes one (docs/plugins.md).

    python -m bench run --scenario 100mbps --plugin examples/plugins/randproj.py
    make bench SCENARIO=100mbps PLUGIN=examples/plugins/randproj.py
    pip install examples/plugins        # or install it: entry point aqsgd.compressors

As AQ-SGD, it sends the change of a sample's activation since its last visit, delta =
x - m[i], against the per-sample cache m both sides hold; instead of quantizing delta it
sends its coordinates in k fixed random orthonormal directions Q (D, k), in fp16, and
both sides add Q (Q^T delta) to m[i]. `bits` is the budget in bits per element:
k = ceil(D * bits / 16). The part of a change outside span(Q) is never sent (the raw
warm-up visit fills it once), so the error is bounded by how far activations drift.
"""

from __future__ import annotations

import math

import torch

from aqsgd.compress.modes.base import ActivationMode, Comparison

__version__ = "0.1"
__all__ = ["RandomProjection", "MODE", "COMPARISONS", "basis"]

_BASES: dict[tuple[int, int, str], torch.Tensor] = {}


def basis(width: int, k: int, device: torch.device) -> torch.Tensor:
    """(width, k) orthonormal columns, the same on every rank (fixed seed)."""
    key = (width, k, str(device))
    if key not in _BASES:
        g = torch.Generator().manual_seed(1_000_003 * width + k)
        q, _ = torch.linalg.qr(torch.randn(width, k, generator=g))  # (D, k)
        _BASES[key] = q.to(device)
    return _BASES[key]


def _dims(cfg, width: int) -> int:
    return min(width, math.ceil(width * cfg.quant.bits / 16))


class RandomProjection(ActivationMode):
    name = "randproj"
    rank = 2.5  # tables: after aqsgd, before aqsgd-lowbits
    wire_format = 64  # header[0] of its messages: a number no built-in mode uses
    uses_cache = True
    bench_cases = (("fp32", 2), ("fp32", 4))
    smoke_case = ("fp32", 4)
    profile_bits = 4

    @classmethod
    def coded_spec(cls, cfg, q_shape):
        *lead, width = q_shape
        return [((*lead, _dims(cfg, width)), torch.float16)]  # (n_q, L, k) fp16

    def encode(self, rows, generator, m=None) -> list[torch.Tensor]:
        q = basis(rows.shape[-1], _dims(self.cfg, rows.shape[-1]), rows.device)
        coded = ((rows - m) @ q).half()  # (n_q, L, k)
        m += coded.float() @ q.T  # what the receiver's cache becomes
        return [coded.contiguous()]

    def decode(self, coded, q_shape, m=None) -> torch.Tensor:
        q = basis(q_shape[-1], _dims(self.cfg, q_shape[-1]), coded[0].device)
        m += coded[0].float() @ q.T
        return m


MODE = RandomProjection
COMPARISONS = (Comparison("randproj", rank=2.5, forward="randproj", backward="directq",
                          default_bits=(4, 8)),)
