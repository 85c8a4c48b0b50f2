"""Codec ``natural``: natural compression (Horvath et al.). Each value is rounded
stochastically to one of the two neighbouring powers of two, unbiased, 1 byte per value
(sign and a 7-bit exponent relative to the message's largest exponent, sent as one
int32), in both rounds of the sharded exchange; then AdamW on the average.

Each rank draws its roundings from its own generator, seeded by the config's seed and
its rank in the group.
"""

from __future__ import annotations

import math

import torch

from aqsgd.compress.codecs.base import AveragedDataParallel, VectorCodec

__all__ = ["natural_compress", "natural_decompress", "NaturalVector", "NaturalDataParallel",
           "CODEC"]


def natural_compress(x: torch.Tensor, generator: torch.Generator):
    """Unbiased rounding of each value to a power of two: (codes uint8 (n,), e_top int32 (1,)).

    code = sign << 7 | k, k in 0..127: k = 0 is zero, else |value| = 2**(k + e_top - 127).
    Magnitudes below the smallest level 2**(e_top - 126) round to it or to 0, also unbiased.
    """
    a = x.double().abs()  # fp64: 2**-e stays finite for every fp32 exponent
    amax = float(a.max()) if a.numel() else 0.0
    if amax == 0.0 or not math.isfinite(amax):
        if not math.isfinite(amax):
            raise ValueError(f"natural_compress: non-finite gradient value (max |x| = {amax})")
        return (torch.zeros_like(a, dtype=torch.uint8),
                torch.zeros(1, dtype=torch.int32, device=a.device))
    e_top = math.frexp(amax)[1]  # amax < 2**e_top, so rounding up stays <= 2**e_top
    lowest = e_top - 126
    _, exp = torch.frexp(a)
    e = (exp - 1).clamp(min=lowest)  # floor(log2 a), held at the lowest level
    frac = torch.ldexp(a, -e.double()) - 1.0  # in [0, 1) above the lowest level, [-1, 0) below
    u = torch.rand(a.shape, generator=generator, device=a.device, dtype=torch.float64)
    tiny = frac < 0  # below the lowest level: 2**lowest with probability a / 2**lowest
    up = u < torch.where(tiny, frac + 1.0, frac)
    k = torch.where(tiny, up.to(torch.int32), (e - lowest + 1 + up.to(torch.int32)).to(torch.int32))
    k = torch.where(a == 0, torch.zeros_like(k), k)
    sign = (x < 0).to(torch.int32) << 7
    return (sign | k).to(torch.uint8), torch.tensor([e_top], dtype=torch.int32, device=a.device)


def natural_decompress(codes: torch.Tensor, e_top: torch.Tensor) -> torch.Tensor:
    c = codes.to(torch.int32)
    k = c & 127
    mag = torch.ldexp(torch.ones_like(c, dtype=torch.float32), (k + int(e_top[0]) - 127).float())
    mag = torch.where(k == 0, torch.zeros_like(mag), mag)
    return torch.where(c >= 128, -mag, mag)


class NaturalVector(VectorCodec):
    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def spec(self, numel):
        return [((numel,), torch.uint8), ((1,), torch.int32)]

    def encode(self, x):
        return list(natural_compress(x, self.generator))

    def decode(self, tensors, numel):
        return natural_decompress(tensors[0], tensors[1])


class NaturalDataParallel(AveragedDataParallel):
    name = "natural"
    rank = 3

    @classmethod
    def vector_codec(cls, cfg, generator):
        return NaturalVector(generator)

    def _runtime_codec(self):
        gen = torch.Generator(device=self._ex.device)
        gen.manual_seed(self.cfg.seed * 1_000_003 + self._ex.rank)
        return self.vector_codec(self.cfg, gen)

    @classmethod
    def round_trip(cls, cfg, x, generator) -> None:
        natural_decompress(*natural_compress(x, generator))


CODEC = NaturalDataParallel
