"""What every data-parallel gradient codec is built from: `DataParallel` (the object the
worker uses; one subclass per codec, registered as its module's `CODEC`), the
point-to-point exchange that counts every byte, and the sharded average (the note below).

    dp = make_data_parallel(cfg, params, group, optim_kwargs)    # aqsgd.compress.gradient
    loss.backward(); dp.synchronize(); clip_grad_norm_(...); dp.optimizer.step()

`cfg` is the run's aqsgd.compress.gradient.GradCompressionConfig (not imported here:
that module validates codec names against the registry, which imports this one). A
plug-in's codec subclasses DataParallel the same way (docs/plugins.md).
Imports aqsgd.compress.wire and torch only.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.distributed as dist

from aqsgd.compress.wire import WireSpec, message_nbytes, spec_nbytes

__all__ = ["VectorCodec", "Fp32Vector", "Exchange", "ShardedAverager", "shard_size",
           "flat_grads", "write_grads", "DataParallel", "AveragedDataParallel"]

# Note [sharded exchange] (fp32, natural, qadam): the flat vector (all parameters in
# ``param_groups`` order, zero-padded to ``world * shard``, shard a multiple of the bucket)
# is split into one shard per rank. Each rank sends shard j (compressed) to rank j with
# isend/irecv; the owner averages what it received with its own shard (kept exact), adds
# its server-side error, compresses once more and sends the result to every peer, so all
# ranks end with identical values. Every byte of every isend and irecv is counted in
# ``bytes_sent`` / ``bytes_recv``; per step and rank that is (W - 1) shards out and (W - 1)
# in, twice.


# --- compressors of a 1-D fp32 vector ---------------------------------------------------------
class VectorCodec:
    """Codes a 1-D fp32 vector of a fixed length into wire tensors."""

    def spec(self, numel: int) -> WireSpec:
        raise NotImplementedError

    def encode(self, x: torch.Tensor) -> list[torch.Tensor]:
        raise NotImplementedError

    def decode(self, tensors, numel: int) -> torch.Tensor:
        raise NotImplementedError


class Fp32Vector(VectorCodec):
    """The exact vector: fp32, 4 bytes per value."""

    def spec(self, numel):
        return [((numel,), torch.float32)]

    def encode(self, x):
        return [x.float().contiguous()]

    def decode(self, tensors, numel):
        return tensors[0]


# --- point-to-point exchange with byte counting -----------------------------------------------
class Exchange:
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


def shard_size(numel: int, world: int, multiple: int) -> int:
    """Elements of one rank's shard: ceil(numel / world), rounded up to `multiple`."""
    return math.ceil(math.ceil(numel / world) / multiple) * multiple


class ShardedAverager:
    """Averages a flat vector over the group (Note [sharded exchange])."""

    def __init__(self, exchange: Exchange, numel: int, multiple: int = 1) -> None:
        self.ex = exchange
        w = exchange.world
        self.numel = numel
        self.shard = shard_size(numel, w, multiple)
        self.padded = w * self.shard

    @staticmethod
    def nbytes(codec: VectorCodec, numel: int, world: int, multiple: int = 1) -> int:
        """Bytes one rank sends in one `average` with `codec`: two rounds (each shard to
        its owner, then the owner's average back to every peer)."""
        return 2 * (world - 1) * spec_nbytes(codec.spec(shard_size(numel, world, multiple)))

    def pad(self, flat: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(self.padded, dtype=torch.float32, device=flat.device)
        out[: self.numel] = flat
        return out

    def average(self, flat_padded, codec: VectorCodec, worker_err=None, server_err=None):
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


def flat_grads(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """All gradients as one fp32 vector; a missing gradient counts as zeros."""
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().reshape(-1)
        for p in params
    ])


def write_grads(params, flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        g = flat[offset: offset + n].view_as(p).to(p.dtype)
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        offset += n


# --- the object the worker uses -----------------------------------------------------------------
class DataParallel:
    """Optimizer plus gradient averaging for one data-parallel group; one subclass per
    codec (its module's `CODEC`), which sets the class attributes and implements
    `synchronize`, `exchange_nbytes` and, when it compresses, `round_trip`."""

    name: ClassVar[str]  # GradCompressionConfig.mode
    rank: ClassVar[float]  # position in aqsgd.compress.registry.GRAD_CODECS
    compresses: ClassVar[bool] = True  # False: the exact average (no coding work)
    # the exchange runs inside optimizer.step() (QuantizedAdam), so synchronize() leaves
    # local gradients and clipping sees those (aqsgd.train.pipeline)
    exchanges_in_step: ClassVar[bool] = False
    rounds: ClassVar[int] = 2  # message rounds of a steady-state exchange

    def __init__(self, cfg, params, group=None, optim_kwargs: dict | None = None) -> None:
        self.cfg = cfg
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("make_data_parallel: no parameter requires a gradient")
        self._ex = Exchange(group, self.params[0].device)
        self.numel = sum(p.numel() for p in self.params)
        self.optimizer = self._optimizer(dict(optim_kwargs or {}))

    def _optimizer(self, kwargs: dict) -> torch.optim.Optimizer:
        """AdamW (optim_kwargs: lr, betas, eps, weight_decay)."""
        return torch.optim.AdamW(self.params, **kwargs)

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
        raise NotImplementedError

    @classmethod
    def exchange_nbytes(cls, cfg, numel: int, world: int, frozen: bool = True) -> int:
        """Bytes one rank sends in one step's exchange of `numel` parameters over `world`
        replicas (aqsgd.compress.gradient.exchange_nbytes has the contract)."""
        raise NotImplementedError

    @classmethod
    def shaped_exchange_nbytes(cls, cfg, shapes: list[tuple[int, ...]], world: int,
                               frozen: bool = True) -> int:
        """`exchange_nbytes` of parameters of these shapes: the same unless a codec's bytes
        depend on the shapes (PowerSGD's on each matrix's rows and columns)."""
        return cls.exchange_nbytes(cfg, sum(math.prod(s) for s in shapes), world, frozen)

    @classmethod
    def round_trip(cls, cfg, x: torch.Tensor, generator: torch.Generator) -> None:
        """One encode and one decode of the fp32 vector `x`: the coding work per parameter
        and step that the performance model's profile times (`grad_s_per_element`)."""
        raise NotImplementedError(f"gradient codec {cls.name!r} codes nothing")


class AveragedDataParallel(DataParallel):
    """AdamW on the gradients averaged by the sharded exchange through one vector codec
    (`vector_codec`; exact fp32 here)."""

    def __init__(self, cfg, params, group=None, optim_kwargs: dict | None = None) -> None:
        super().__init__(cfg, params, group, optim_kwargs)
        self._avg = ShardedAverager(self._ex, self.numel)
        self._codec = self._runtime_codec()

    @classmethod
    def vector_codec(cls, cfg, generator: torch.Generator) -> VectorCodec:
        return Fp32Vector()

    def _runtime_codec(self) -> VectorCodec:
        return self.vector_codec(self.cfg, torch.Generator())

    @torch.no_grad()
    def synchronize(self) -> None:
        flat = flat_grads(self.params)
        out = self._avg.average(self._avg.pad(flat), self._codec)[: flat.numel()]
        write_grads(self.params, out)

    @classmethod
    def exchange_nbytes(cls, cfg, numel, world, frozen=True) -> int:
        return ShardedAverager.nbytes(cls.vector_codec(cfg, torch.Generator()), numel, world)
