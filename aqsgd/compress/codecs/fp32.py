"""Codec ``fp32``: the exact average of the replicas' gradients (the sharded exchange of
`base.py` with fp32 shards), then AdamW; the reference the compressed codecs are
measured against and what every comparison without a gradient codec runs.
"""

from __future__ import annotations

from aqsgd.compress.codecs.base import AveragedDataParallel

__all__ = ["Fp32DataParallel", "CODEC"]


class Fp32DataParallel(AveragedDataParallel):
    name = "fp32"
    rank = 0
    compresses = False


CODEC = Fp32DataParallel
