"""Codec ``qadam``: the AQ-SGD paper's QuantizedAdam. For ``freeze_after_steps`` steps
the gradients are averaged exactly and Adam runs as usual; afterwards the second moment
is frozen and the first moment m (updated locally with the local gradient) is averaged
compressed, with worker-side and server-side error feedback, bucketed max-abs
quantization (``bits``, ``bucket_size``: one fp16 scale per bucket). The exchange
happens inside ``optimizer.step()``; ``synchronize()`` is a no-op, so clipping sees
local gradients: the pipeline clips them by one coefficient shared by the replicas
(aqsgd.train.pipeline, Note [clipping under QuantizedAdam]). At the freeze the second
moment gets a floor (``v_floor``, see ``QuantizedAdam``).
"""

from __future__ import annotations

import torch

from aqsgd import quant
from aqsgd.compress.codecs.base import (
    DataParallel,
    Exchange,
    Fp32Vector,
    ShardedAverager,
    VectorCodec,
    flat_grads,
)

__all__ = ["QuantVector", "QuantizedAdam", "QAdamDataParallel", "CODEC"]


class QuantVector(VectorCodec):
    """Bucketed max-abs: one fp16 scale per ``bucket`` consecutive values."""

    def __init__(self, bits: int, bucket: int) -> None:
        self.cfg = quant.QuantConfig(bits=bits, granularity="group", group_size=bucket)

    def spec(self, numel):
        return [
            ((quant.packed_nbytes(numel, self.cfg.bits),), torch.uint8),
            ((numel // self.cfg.group_size,), torch.float16),
        ]

    def encode(self, x):
        packed, scales = quant.quantize_packed(x, self.cfg)
        return [packed.contiguous(), scales.contiguous()]

    def decode(self, tensors, numel):
        return quant.dequantize_packed(tensors[0], tensors[1], (numel,), self.cfg)


class QuantizedAdam(torch.optim.Optimizer):
    """AdamW whose first moment is averaged compressed after ``freeze_after_steps`` steps.

    Until then, gradients are averaged exactly and both moments update as in AdamW; from
    then on the second moment (and its bias correction) is frozen. ``lr`` and
    ``weight_decay`` are read per parameter group at every step, so LR schedulers work.

    The floor on the frozen second moment: a coordinate that had (almost) no gradient
    before the freeze, such as the embedding row of a token absent from those batches,
    has v ~ 0 there for good, and its first real gradient g would move it by
    lr * m / (sqrt(v) + eps) ~ lr * 0.1 * g / eps, millions of times a normal step. At
    the freeze every coordinate's v is therefore raised to at least ``v_floor`` times the
    mean v of its parameter tensor (of all coordinates, for a tensor that had no
    gradient at all). Relative to the tensor, because gradient scales differ by orders
    of magnitude between tensors and models, so no absolute floor suits them all. The
    default 0.01 floors only coordinates whose RMS gradient was under a tenth of their
    tensor's; such a coordinate moves at most lr * |m| / (0.1 * rms) a step, where rms is
    the tensor's RMS gradient: lr * g / rms at its first appearance, 10 * lr * g / rms
    at the most, rather than without bound. ``v_floor = 0`` disables the floor.
    """

    def __init__(self, params, cfg, exchange: Exchange,
                 lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay})
        self.cfg = cfg
        self._params = [p for g in self.param_groups for p in g["params"]]
        numel = sum(p.numel() for p in self._params)
        self._avg = ShardedAverager(exchange, numel, multiple=cfg.bucket_size)
        self._codec = QuantVector(cfg.bits, cfg.bucket_size)
        self._exact = Fp32Vector()
        padded, w, shard = self._avg.padded, exchange.world, self._avg.shard
        dev = exchange.device
        self.flat_state = {
            "exp_avg": torch.zeros(padded, device=dev),
            "exp_avg_sq": torch.zeros(padded, device=dev),
            "worker_err": torch.zeros(w, shard, device=dev),
            "server_err": torch.zeros(shard, device=dev),
        }
        self.num_steps = 0

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        beta1, beta2 = self.param_groups[0]["betas"]
        eps = self.param_groups[0]["eps"]
        st, avg = self.flat_state, self._avg
        self.num_steps += 1
        t = self.num_steps
        g = avg.pad(flat_grads(self._params))
        if t <= self.cfg.freeze_after_steps:
            g_mean = avg.average(g, self._exact)
            st["exp_avg"].mul_(beta1).add_(g_mean, alpha=1 - beta1)
            st["exp_avg_sq"].mul_(beta2).addcmul_(g_mean, g_mean, value=1 - beta2)
        else:
            if t == self.cfg.freeze_after_steps + 1:
                self._floor_second_moment()
            local = st["exp_avg"] * beta1 + g * (1 - beta1)
            st["exp_avg"] = avg.average(local, self._codec, st["worker_err"], st["server_err"])
        bias1 = 1 - beta1**t
        bias2 = 1 - beta2 ** min(t, self.cfg.freeze_after_steps)
        update = (st["exp_avg"] / bias1) / ((st["exp_avg_sq"] / bias2).sqrt() + eps)
        offset = 0
        for group in self.param_groups:
            for p in group["params"]:
                n = p.numel()
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(update[offset: offset + n].view_as(p).to(p.dtype), alpha=-group["lr"])
                offset += n
        return loss

    def _floor_second_moment(self) -> None:
        """Raise the frozen v to v_floor x its tensor's mean (see the class docstring)."""
        v = self.flat_state["exp_avg_sq"]
        numel = sum(p.numel() for p in self._params)
        overall = float(v[:numel].mean())
        offset = 0
        for p in self._params:
            part = v[offset: offset + p.numel()]
            mean = float(part.mean())
            part.clamp_(min=self.cfg.v_floor * (mean if mean > 0 else overall))
            offset += p.numel()


class QAdamDataParallel(DataParallel):
    name = "qadam"
    rank = 1
    exchanges_in_step = True

    def _optimizer(self, kwargs: dict) -> torch.optim.Optimizer:
        """QuantizedAdam (optim_kwargs: lr, betas, eps, weight_decay)."""
        return QuantizedAdam(self.params, self.cfg, self._ex, **kwargs)

    @torch.no_grad()
    def synchronize(self) -> None:
        """Nothing: QuantizedAdam exchanges inside ``optimizer.step()``."""

    @classmethod
    def exchange_nbytes(cls, cfg, numel, world, frozen=True) -> int:
        codec = QuantVector(cfg.bits, cfg.bucket_size) if frozen else Fp32Vector()
        return ShardedAverager.nbytes(codec, numel, world, multiple=cfg.bucket_size)

    @classmethod
    def round_trip(cls, cfg, x, generator) -> None:
        codec = QuantVector(cfg.bits, cfg.bucket_size)
        codec.decode(codec.encode(x), x.numel())


CODEC = QAdamDataParallel
