"""Data-parallel gradient averaging over torch.distributed, plain or compressed.

    dp = make_data_parallel(GradCompressionConfig(mode="qadam"), model.parameters(),
                            group, {"lr": 5e-5, "weight_decay": 0.01})
    loss.backward(); dp.synchronize(); clip_grad_norm_(...); dp.optimizer.step()

Modes (``GradCompressionConfig.mode``; every result is an average over the group, never a
sum) are the codecs registered in aqsgd.compress.registry, one module each in
aqsgd/compress/codecs/ with its exchange, its optimizer and its byte rule:
- ``fp32``: exact average.
- ``qadam``: the paper's QuantizedAdam (exact Adam, then the frozen second moment and a
  compressed first moment, exchanged inside ``optimizer.step()``).
- ``ef21``: EF21 with top-k (indices and values of the change of each worker's estimate).
- ``natural``: natural compression (unbiased rounding to powers of two, 1 byte a value).
- ``powersgd``: PowerSGD (a rank-r power-iteration step on each gradient matrix, with
  error feedback and warm start; the ``powersgd_*`` settings, docs/compressors.md).
The sharded exchange they share and its byte counting are in aqsgd/compress/codecs/base.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from aqsgd.compress.codecs.base import DataParallel
from aqsgd.compress.registry import GRAD_CODECS, Names
from specfile.declared import check_fields

__all__ = [
    "GRAD_MODES",
    "GradCompressionConfig",
    "DataParallel",
    "make_data_parallel",
    "exchange_nbytes",
]

GRAD_MODES = Names(GRAD_CODECS)


@dataclass(frozen=True)
class GradCompressionConfig:
    """How data-parallel replicas average gradients (see the module docstring)."""

    mode: str = "fp32"
    bits: int = 8
    bucket_size: int = 512
    topk_ratio: float = 0.01
    freeze_after_steps: int = 100
    v_floor: float = 0.01  # QuantizedAdam: frozen v >= v_floor x its tensor's mean v
    seed: int = 0
    # PowerSGD (codec powersgd), with the meanings of torch's PowerSGDState; the defaults
    # and where they differ from torch's: docs/powersgd.md
    powersgd_rank: Annotated[int, Field(ge=1, description=(
        "PowerSGD: rank r of each compressed gradient matrix (torch's "
        "matrix_approximation_rank, default 1)"))] = 4
    powersgd_start_step: Annotated[int, Field(ge=0, description=(
        "PowerSGD: steps averaged exactly before compression starts (torch's "
        "start_powerSGD_iter, default 1000)"))] = 10
    powersgd_min_compression_rate: Annotated[float, Field(ge=1.0, allow_inf_nan=False,
                                                          description=(
        "PowerSGD: a matrix is compressed only if its factors are this many times smaller "
        "(torch's min_compression_rate)"))] = 2.0
    powersgd_error_feedback: Annotated[bool, Field(description=(
        "PowerSGD: add what the last step did not send to this step's gradient (torch's "
        "use_error_feedback)"))] = True
    powersgd_warm_start: Annotated[bool, Field(description=(
        "PowerSGD: start each step's power iteration from the last step's Q (torch's "
        "warm_start)"))] = True
    powersgd_orthogonalization_eps: Annotated[float, Field(ge=0.0, allow_inf_nan=False,
                                                           description=(
        "PowerSGD: added to each column norm in the Gram-Schmidt of P (torch's "
        "orthogonalization_epsilon)"))] = 0.0

    def __post_init__(self) -> None:
        check_fields(self)
        if self.mode not in GRAD_MODES:
            raise ValueError(
                f"GradCompressionConfig.mode must be one of {GRAD_MODES}, got {self.mode!r}"
            )
        b = self.bits
        if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 8:
            raise ValueError(f"GradCompressionConfig.bits must be an int in 1..8, got {b!r}")
        if not isinstance(self.bucket_size, int) or self.bucket_size < 1:
            raise ValueError(
                f"GradCompressionConfig.bucket_size must be an int >= 1, got {self.bucket_size!r}"
            )
        if not 0.0 < float(self.topk_ratio) <= 1.0:
            raise ValueError(
                f"GradCompressionConfig.topk_ratio must be in (0, 1], got {self.topk_ratio!r}"
            )
        f = self.freeze_after_steps
        if isinstance(f, bool) or not isinstance(f, int) or f < 1:
            raise ValueError(
                f"GradCompressionConfig.freeze_after_steps must be an int >= 1 (Adam's second "
                f"moment needs at least one exact step), got {f!r}"
            )
        v = self.v_floor
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v < math.inf:
            raise ValueError(
                f"GradCompressionConfig.v_floor must be a finite number >= 0, got {v!r}"
            )


def exchange_nbytes(cfg: GradCompressionConfig, numel: int, world: int,
                    frozen: bool = True,
                    shapes: Sequence[tuple[int, ...]] | None = None) -> int:
    """Bytes one rank sends in one step's data-parallel exchange of `numel` parameters
    over `world` replicas, from the same codecs and shards the exchange uses (what its
    `bytes_sent` counts). `frozen`: a step after QuantizedAdam's freeze (compressed first
    moment), after EF21's exact first step and from PowerSGD's start step; otherwise the
    exact exchange. `shapes`: the parameters' shapes (their elements sum to `numel`),
    which PowerSGD's bytes depend on; without them its rule counts the parameters as one
    vector, sent uncompressed (the exact exchange's bytes)."""
    if world < 1 or numel < 1:
        raise ValueError(f"exchange_nbytes: numel and world must be >= 1, got {numel}, {world}")
    codec = GRAD_CODECS[cfg.mode]
    if shapes is None:
        return codec.exchange_nbytes(cfg, numel, world, frozen)
    shapes = [tuple(s) for s in shapes]
    if sum(math.prod(s) for s in shapes) != numel:
        raise ValueError(f"exchange_nbytes: shapes must hold numel={numel} elements, got "
                         f"{sum(math.prod(s) for s in shapes)} in {shapes}")
    return codec.shaped_exchange_nbytes(cfg, shapes, world, frozen)


def make_data_parallel(cfg: GradCompressionConfig, params, group=None,
                       optim_kwargs: dict | None = None) -> DataParallel:
    """Build the optimizer and gradient averaging for the replicas of one pipeline stage.

    ``group`` is the torch.distributed group of the replicas (None: the default group; a
    run without torch.distributed initialised is one replica). ``optim_kwargs`` go to
    AdamW (or QuantizedAdam): lr, betas, eps, weight_decay. The object is the codec's
    `DataParallel` subclass (aqsgd.compress.registry.GRAD_CODECS[cfg.mode]).
    """
    if not isinstance(cfg, GradCompressionConfig):
        raise TypeError(f"make_data_parallel: cfg must be a GradCompressionConfig, got {type(cfg)}")
    return GRAD_CODECS[cfg.mode](cfg, params, group, optim_kwargs)
