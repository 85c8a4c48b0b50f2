"""Data-parallel gradient averaging over torch.distributed, plain or compressed.

    dp = make_data_parallel(GradCompressionConfig(mode="qadam"), model.parameters(),
                            group, {"lr": 5e-5, "weight_decay": 0.01})
    loss.backward(); dp.synchronize(); clip_grad_norm_(...); dp.optimizer.step()

Modes (every result is an average over the group, never a sum):
- ``fp32``: exact average.
- ``natural``: natural compression (Horvath et al.): each value is rounded stochastically
  to one of the two neighbouring powers of two, unbiased, 1 byte per value (sign and a
  7-bit exponent relative to the message's largest exponent, sent as one int32).
- ``ef21``: EF21 with top-k. Each worker keeps g_i, sends top-k(grad_i - g_i) (int32
  indices + fp32 values) to every peer and adds it to g_i; every rank keeps
  g = mean_i g_i, which replaces the gradient. The first step sends the full gradients
  (g_i = grad_i), so the estimate starts exact rather than at zero.
- ``qadam``: the paper's QuantizedAdam. For ``freeze_after_steps`` steps the gradients are
  averaged exactly and Adam runs as usual; afterwards the second moment is frozen and the
  first moment m (updated locally with the local gradient) is averaged compressed, with
  worker-side and server-side error feedback, bucketed max-abs quantization (``bits``,
  ``bucket_size``). The exchange happens inside ``optimizer.step()``; ``synchronize()``
  is a no-op, so clipping sees local gradients: the pipeline clips them by one
  coefficient shared by the replicas (aqsgd.train.pipeline, Note [clipping under
  QuantizedAdam]). At the freeze the second moment gets a floor (``v_floor``, see
  ``QuantizedAdam``).

Note on the sharded exchange (fp32, natural, qadam): the flat vector (all parameters in
``param_groups`` order, zero-padded to ``world * shard``, shard a multiple of the bucket)
is split into one shard per rank. Each rank sends shard j (compressed) to rank j with
isend/irecv; the owner averages what it received with its own shard (kept exact), adds
its server-side error, compresses once more and sends the result to every peer, so all
ranks end with identical values. Every byte of every isend and irecv is counted in
``bytes_sent`` / ``bytes_recv``; per step and rank that is (W - 1) shards out and (W - 1)
in, twice.

One file of about 500 lines: the four modes share the sharded exchange and its byte
counting, and QuantizedAdam is one of them (its exchange runs inside the optimizer
step, and its frozen second moment's floor is explained where it is applied), so each
mode reads next to the exchange it relies on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from aqsgd import quant
from aqsgd.compress.wire import message_nbytes, spec_nbytes

__all__ = [
    "GRAD_MODES",
    "GradCompressionConfig",
    "DataParallel",
    "QuantizedAdam",
    "make_data_parallel",
    "exchange_nbytes",
    "natural_compress",
    "natural_decompress",
    "topk_compress",
]

GRAD_MODES = ("fp32", "qadam", "natural", "ef21")


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

    def __post_init__(self) -> None:
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


# --- compressors of a 1-D fp32 vector -------------------------------------------------------
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


def topk_compress(x: torch.Tensor, k: int):
    """The k largest-magnitude entries: (indices int32 (k,), values fp32 (k,))."""
    idx = torch.topk(x.abs(), k, sorted=False).indices
    return idx.to(torch.int32), x[idx].float()


class _Codec:
    """Codes a 1-D fp32 vector of a fixed length into wire tensors."""

    def spec(self, numel: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
        raise NotImplementedError

    def encode(self, x: torch.Tensor) -> list[torch.Tensor]:
        raise NotImplementedError

    def decode(self, tensors, numel: int) -> torch.Tensor:
        raise NotImplementedError


class _Fp32Codec(_Codec):
    def spec(self, numel):
        return [((numel,), torch.float32)]

    def encode(self, x):
        return [x.float().contiguous()]

    def decode(self, tensors, numel):
        return tensors[0]


class _QuantCodec(_Codec):
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


class _NaturalCodec(_Codec):
    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def spec(self, numel):
        return [((numel,), torch.uint8), ((1,), torch.int32)]

    def encode(self, x):
        return list(natural_compress(x, self.generator))

    def decode(self, tensors, numel):
        return natural_decompress(tensors[0], tensors[1])


# --- point-to-point exchange with byte counting ---------------------------------------------
class _Exchange:
    """All-to-all of tensor lists between the ranks of ``group`` with isend/irecv."""

    def __init__(self, group, device: torch.device) -> None:
        self.group = group
        self.device = device  # where receive buffers live (CUDA for NCCL, CPU for gloo)
        self.world = dist.get_world_size(group) if dist.is_initialized() else 1
        self.rank = dist.get_rank(group) if dist.is_initialized() else 0
        self.bytes_sent = 0
        self.bytes_recv = 0

    def all_to_all(self, send: dict[int, list[torch.Tensor]], recv_spec) -> dict[int, list]:
        """Send ``send[j]`` to group rank j; receive tensors shaped ``recv_spec[j]`` from j."""
        works, received = [], {}
        for j, specs in recv_spec.items():
            bufs = [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in specs]
            received[j] = bufs
            for tag, buf in enumerate(bufs):
                works.append(dist.irecv(buf, group=self.group, group_src=j, tag=tag))
            self.bytes_recv += message_nbytes(bufs)
        for j, tensors in send.items():
            for tag, t in enumerate(tensors):
                works.append(dist.isend(t, group=self.group, group_dst=j, tag=tag))
            self.bytes_sent += message_nbytes(tensors)
        for w in works:
            w.wait()
        return received

    def peers(self) -> list[int]:
        return [j for j in range(self.world) if j != self.rank]


def _shard_size(numel: int, world: int, multiple: int) -> int:
    """Elements of one rank's shard: ceil(numel / world), rounded up to `multiple`."""
    return math.ceil(math.ceil(numel / world) / multiple) * multiple


class _ShardedAverager:
    """Averages a flat vector over the group (see the note in the module docstring)."""

    def __init__(self, exchange: _Exchange, numel: int, multiple: int = 1) -> None:
        self.ex = exchange
        w = exchange.world
        self.numel = numel
        self.shard = _shard_size(numel, w, multiple)
        self.padded = w * self.shard

    def pad(self, flat: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.padded, dtype=torch.float32, device=flat.device)
        out[: self.numel] = flat
        return out

    def average(self, flat_padded, codec: _Codec, worker_err=None, server_err=None):
        """Mean of ``flat_padded`` (padded,) over ranks; errors (W, shard)/(shard,) updated."""
        ex, shard = self.ex, self.shard
        chunks = flat_padded.view(ex.world, shard)
        send = {}
        for j in ex.peers():
            c = chunks[j] + worker_err[j] if worker_err is not None else chunks[j]
            tensors = codec.encode(c)
            if worker_err is not None:
                worker_err[j] = c - codec.decode(tensors, shard)
            send[j] = tensors
        got = ex.all_to_all(send, {j: codec.spec(shard) for j in ex.peers()})
        total = torch.zeros(shard, dtype=torch.float32, device=flat_padded.device)
        for j in range(ex.world):  # fixed order: the owner's sum is reproducible
            total += chunks[j] if j == ex.rank else codec.decode(got[j], shard)
        mean = total / ex.world
        if server_err is not None:
            mean = mean + server_err
        tensors = codec.encode(mean)
        mine = codec.decode(tensors, shard)
        if server_err is not None:
            server_err.copy_(mean - mine)
        got = ex.all_to_all({j: tensors for j in ex.peers()},
                            {j: codec.spec(shard) for j in ex.peers()})
        parts = [mine if j == ex.rank else codec.decode(got[j], shard) for j in range(ex.world)]
        return torch.cat(parts)  # (padded,), identical on every rank


def _flat_grads(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """All gradients as one fp32 vector; a missing gradient counts as zeros."""
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().reshape(-1)
        for p in params
    ])


def _write_grads(params, flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        g = flat[offset: offset + n].view_as(p).to(p.dtype)
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        offset += n


# --- QuantizedAdam ---------------------------------------------------------------------------
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

    def __init__(self, params, cfg: GradCompressionConfig, exchange: _Exchange,
                 lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay})
        self.cfg = cfg
        self._params = [p for g in self.param_groups for p in g["params"]]
        numel = sum(p.numel() for p in self._params)
        self._avg = _ShardedAverager(exchange, numel, multiple=cfg.bucket_size)
        self._codec = _QuantCodec(cfg.bits, cfg.bucket_size)
        self._exact = _Fp32Codec()
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
        g = avg.pad(_flat_grads(self._params))
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


# --- the object the worker uses ---------------------------------------------------------------
class DataParallel:
    """Optimizer plus gradient averaging for one data-parallel group."""

    def __init__(self, cfg: GradCompressionConfig, params, group=None,
                 optim_kwargs: dict | None = None) -> None:
        self.cfg = cfg
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("make_data_parallel: no parameter requires a gradient")
        self._ex = _Exchange(group, self.params[0].device)
        kwargs = dict(optim_kwargs or {})
        numel = sum(p.numel() for p in self.params)
        if cfg.mode == "qadam":
            self.optimizer = QuantizedAdam(self.params, cfg, self._ex, **kwargs)
        else:
            self.optimizer = torch.optim.AdamW(self.params, **kwargs)
        self._avg = _ShardedAverager(self._ex, numel)
        self._codec = _Fp32Codec()
        if cfg.mode == "natural":
            gen = torch.Generator(device=self._ex.device)
            gen.manual_seed(cfg.seed * 1_000_003 + self._ex.rank)
            self._codec = _NaturalCodec(gen)
        self._k = max(1, math.ceil(cfg.topk_ratio * numel))
        self.ef21_local = None  # (numel,) this worker's g_i
        self.ef21_global = None  # (numel,) mean_i g_i, identical on every rank

    @property
    def bytes_sent(self) -> int:
        return self._ex.bytes_sent

    @property
    def bytes_recv(self) -> int:
        return self._ex.bytes_recv

    @property
    def world_size(self) -> int:
        return self._ex.world

    @torch.no_grad()
    def synchronize(self) -> None:
        """Replace every ``p.grad`` by its (possibly compressed) average over the group."""
        if self.cfg.mode == "qadam":
            return
        flat = _flat_grads(self.params)
        if self.cfg.mode == "ef21":
            out = self._ef21(flat)
        else:
            out = self._avg.average(self._avg.pad(flat), self._codec)[: flat.numel()]
        _write_grads(self.params, out)

    def _ef21(self, grad: torch.Tensor) -> torch.Tensor:
        if self.ef21_global is None:  # first step: exact, so g_i = grad_i and g = mean
            self.ef21_local = grad.clone()
            exact = self._avg.average(self._avg.pad(grad), _Fp32Codec())
            self.ef21_global = exact[: grad.numel()].clone()
            return self.ef21_global.clone()
        idx, val = topk_compress(grad - self.ef21_local, self._k)
        self.ef21_local[idx.long()] += val
        spec = [((self._k,), torch.int32), ((self._k,), torch.float32)]
        peers = self._ex.peers()
        got = self._ex.all_to_all({j: [idx, val] for j in peers}, {j: spec for j in peers})
        got[self._ex.rank] = [idx, val]
        for j in range(self._ex.world):  # same order on every rank: identical g
            self.ef21_global.index_add_(0, got[j][0].long(), got[j][1] / self._ex.world)
        return self.ef21_global.clone()


def exchange_nbytes(cfg: GradCompressionConfig, numel: int, world: int,
                    frozen: bool = True) -> int:
    """Bytes one rank sends in one step's data-parallel exchange of `numel` parameters
    over `world` replicas, from the same codecs and shards the exchange uses (what its
    `bytes_sent` counts). `frozen`: a step after QuantizedAdam's freeze (compressed first
    moment) and after EF21's exact first step; otherwise the exact exchange."""
    if world < 1 or numel < 1:
        raise ValueError(f"exchange_nbytes: numel and world must be >= 1, got {numel}, {world}")
    peers = world - 1
    if cfg.mode == "ef21" and frozen:
        k = max(1, math.ceil(cfg.topk_ratio * numel))
        return peers * spec_nbytes([((k,), torch.int32), ((k,), torch.float32)])
    codec: _Codec = _Fp32Codec()
    multiple = cfg.bucket_size if cfg.mode == "qadam" else 1
    if cfg.mode == "qadam" and frozen:
        codec = _QuantCodec(cfg.bits, cfg.bucket_size)
    elif cfg.mode == "natural":
        codec = _NaturalCodec(torch.Generator())
    # two rounds: each shard to its owner, then the owner's average back to every peer
    return 2 * peers * spec_nbytes(codec.spec(_shard_size(numel, world, multiple)))


def make_data_parallel(cfg: GradCompressionConfig, params, group=None,
                       optim_kwargs: dict | None = None) -> DataParallel:
    """Build the optimizer and gradient averaging for the replicas of one pipeline stage.

    ``group`` is the torch.distributed group of the replicas (None: the default group; a
    run without torch.distributed initialised is one replica). ``optim_kwargs`` go to
    AdamW (or QuantizedAdam): lr, betas, eps, weight_decay.
    """
    if not isinstance(cfg, GradCompressionConfig):
        raise TypeError(f"make_data_parallel: cfg must be a GradCompressionConfig, got {type(cfg)}")
    return DataParallel(cfg, params, group, optim_kwargs)
