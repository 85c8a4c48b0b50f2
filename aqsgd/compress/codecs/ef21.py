"""Codec ``ef21``: EF21 with top-k. Each worker keeps g_i, sends top-k(grad_i - g_i)
(int32 indices + fp32 values, k = ceil(topk_ratio x parameters)) to every peer and adds
it to g_i; every rank keeps g = mean_i g_i, which replaces the gradient, then AdamW.
The first step sends the full gradients (the exact sharded average, g_i = grad_i), so
the estimate starts exact rather than at zero. One round per step after that.
"""

from __future__ import annotations

import math

import torch

from aqsgd.compress.codecs.base import (
    DataParallel,
    Fp32Vector,
    ShardedAverager,
    flat_grads,
    write_grads,
)
from aqsgd.compress.wire import WireSpec, spec_nbytes

__all__ = ["topk_compress", "EF21DataParallel", "CODEC"]


def topk_compress(x: torch.Tensor, k: int):
    """The k largest-magnitude entries: (indices int32 (k,), values fp32 (k,))."""
    idx = torch.topk(x.abs(), k, sorted=False).indices
    return idx.to(torch.int32), x[idx].float()


def _k(cfg, numel: int) -> int:
    return max(1, math.ceil(cfg.topk_ratio * numel))


def _sparse_spec(k: int) -> WireSpec:
    return [((k,), torch.int32), ((k,), torch.float32)]


class EF21DataParallel(DataParallel):
    name = "ef21"
    rank = 2
    rounds = 1

    def __init__(self, cfg, params, group=None, optim_kwargs: dict | None = None) -> None:
        super().__init__(cfg, params, group, optim_kwargs)
        self._avg = ShardedAverager(self._ex, self.numel)
        self._k = _k(cfg, self.numel)
        self.ef21_local = None  # (numel,) this worker's g_i
        self.ef21_global = None  # (numel,) mean_i g_i, identical on every rank

    @torch.no_grad()
    def synchronize(self) -> None:
        grad = flat_grads(self.params)
        write_grads(self.params, self._estimate(grad))

    def _estimate(self, grad: torch.Tensor) -> torch.Tensor:
        if self.ef21_global is None:  # first step: exact, so g_i = grad_i and g = mean
            self.ef21_local = grad.clone()
            exact = self._avg.average(self._avg.pad(grad), Fp32Vector())
            self.ef21_global = exact[: grad.numel()].clone()
            return self.ef21_global.clone()
        idx, val = topk_compress(grad - self.ef21_local, self._k)
        self.ef21_local[idx.long()] += val
        spec = _sparse_spec(self._k)
        peers = self._ex.peers()
        got = self._ex.all_to_all({j: [idx, val] for j in peers}, {j: spec for j in peers})
        got[self._ex.rank] = [idx, val]
        for j in range(self._ex.world):  # same order on every rank: identical g
            self.ef21_global.index_add_(0, got[j][0].long(), got[j][1] / self._ex.world)
        return self.ef21_global.clone()

    @classmethod
    def exchange_nbytes(cls, cfg, numel, world, frozen=True) -> int:
        if not frozen:  # the exact first step
            return ShardedAverager.nbytes(Fp32Vector(), numel, world)
        return (world - 1) * spec_nbytes(_sparse_spec(_k(cfg, numel)))

    @classmethod
    def round_trip(cls, cfg, x, generator) -> None:
        topk_compress(x, _k(cfg, x.numel()))


CODEC = EF21DataParallel
