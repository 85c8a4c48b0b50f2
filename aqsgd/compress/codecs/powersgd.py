"""Codec ``powersgd``: PowerSGD (Vogels, Karimireddy, Jaggi; NeurIPS 2019) with the
settings of torch's DDP hook (``PowerSGDState``), on this suite's counted exchange.

    cfg = GradCompressionConfig(mode="powersgd", powersgd_rank=4, powersgd_start_step=10)
    dp = make_data_parallel(cfg, model.parameters(), group, {"lr": 1e-4})
    loss.backward(); dp.synchronize(); dp.optimizer.step()
    torch.save(dp.state_dict(), path); dp.load_state_dict(torch.load(path))   # resume

For ``powersgd_start_step`` steps every gradient is averaged exactly (fp32's exchange).
Then each gradient M viewed (n, m) = (shape[0], the rest) whose rank-r factors are
``powersgd_min_compression_rate`` times smaller than M (r = min(rank, n, m)) is sent as
one power-iteration step: P = (M + e) Q averaged and orthonormalised, Q_i = (M + e)^T P
averaged, M replaced by P mean(Q)^T, e (error feedback) what this replica did not send.
Every other tensor goes exact, in the exchange of the Ps. Both exchanges are base.py's
sharded fp32 average, so one rank sends per compressed step (U: elements sent exact)
    2 (W - 1) * 4 * (ceil((U + sum r_i n_i) / W) + ceil(sum r_i m_i / W))  bytes,
the second term only when a matrix is compressed. torch's defaults: rank 1, start 1000,
min rate 2, error feedback and warm start on, eps 0; here rank 4 and start 10, the rest
torch's (docs/powersgd.md says why, and where this differs from torch's hook).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aqsgd.compress.codecs.base import (
    DataParallel,
    Fp32Vector,
    ShardedAverager,
    flat_grads,
    write_grads,
)

__all__ = ["orthogonalize_", "should_compress", "power_step", "Layout",
           "PowerSGDDataParallel", "CODEC"]


def orthogonalize_(p: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Gram-Schmidt on the columns of `p` (n, r), in place: each column cleared of the
    ones before it, twice ("twice is enough"), then divided by its norm (+ eps). A column
    left with under sqrt(machine eps) of its norm lay in the span of those before it (P of
    rank < r: a gradient of rank < r, or zero) and is set to 0; what is left of it is
    rounding, often along those columns, which normalising would count twice."""
    tol = torch.finfo(p.dtype).eps ** 0.5
    for i in range(p.shape[1]):
        col = p[:, i]
        before = col.norm()
        for _ in range(2 if i else 0):
            col.sub_(p[:, :i] @ (p[:, :i].T @ col))
        norm = col.norm()
        keep = (norm > tol * before) & (norm + eps > 0)
        col.mul_(torch.where(keep, 1.0 / (norm + eps), torch.zeros_like(norm)))
    return p


def should_compress(n: int, m: int, rank: int, min_rate: float) -> bool:
    """torch's test: factors (n + m) x rank, `min_rate` times, still below n x m."""
    return (n + m) * rank * min_rate < n * m


def power_step(mat: torch.Tensor, q: torch.Tensor, eps: float = 0.0):
    """One replica's step on M (n, m) from Q (m, r): (P (n, r) orthonormal, M^T P (m, r));
    P (M^T P)^T is M's rank-r approximation (exact for M of rank <= r)."""
    p = orthogonalize_(mat @ q, eps)
    return p, mat.T @ p


@dataclass(frozen=True)
class Layout:
    """The parameters' shapes and each one's rank r (0: sent exact), in parameter order."""

    shapes: tuple[tuple[int, ...], ...]
    ranks: tuple[int, ...]

    @classmethod
    def of(cls, cfg, shapes) -> Layout:
        shapes = tuple(tuple(s) for s in shapes)
        ranks = []
        for s in shapes:
            n, m = (s[0], math.prod(s[1:])) if len(s) > 1 else (1, 0)
            r = min(cfg.powersgd_rank, n, m)
            ranks.append(r if len(s) > 1 and should_compress(
                n, m, r, cfg.powersgd_min_compression_rate) else 0)
        return cls(shapes, tuple(ranks))

    def matrix(self, i: int) -> tuple[int, int]:
        return self.shapes[i][0], math.prod(self.shapes[i][1:])

    @property
    def compressed(self) -> list[int]:
        return [i for i, r in enumerate(self.ranks) if r]

    @property
    def exact(self) -> list[int]:
        return [i for i, r in enumerate(self.ranks) if not r]

    @property
    def p_numel(self) -> int:
        """Elements of the first exchange: the exact tensors, then every P."""
        return (sum(math.prod(self.shapes[i]) for i in self.exact)
                + sum(self.matrix(i)[0] * self.ranks[i] for i in self.compressed))

    @property
    def q_numel(self) -> int:
        return sum(self.matrix(i)[1] * self.ranks[i] for i in self.compressed)

    def nbytes(self, world: int) -> int:
        """Bytes one rank sends in one compressed step (the module docstring's formula)."""
        fp32 = Fp32Vector()
        q = ShardedAverager.nbytes(fp32, self.q_numel, world) if self.q_numel else 0
        return ShardedAverager.nbytes(fp32, self.p_numel, world) + q


class PowerSGDDataParallel(DataParallel):
    name = "powersgd"
    rank = 4
    rounds = 4  # two sharded averages: the Ps with the exact tensors, then the Qs

    def __init__(self, cfg, params, group=None, optim_kwargs: dict | None = None) -> None:
        super().__init__(cfg, params, group, optim_kwargs)
        self.layout = lay = Layout.of(cfg, [p.shape for p in self.params])
        self._fp32 = Fp32Vector()
        self._exact = ShardedAverager(self._ex, self.numel)
        self._avg_p = ShardedAverager(self._ex, lay.p_numel)
        self._avg_q = ShardedAverager(self._ex, lay.q_numel) if lay.q_numel else None
        dev = self._ex.device
        self.steps = 0  # synchronize() calls so far (torch's iter)
        # (n, m) per compressed matrix: what this replica has not sent yet
        feedback = lay.compressed if cfg.powersgd_error_feedback else []
        self.errors = [torch.zeros(lay.matrix(i), device=dev) for i in feedback]
        self.qs: list[torch.Tensor] = []  # (m, r) per compressed matrix, from the last step
        # the same draws on every replica: Q is shared; CPU, so any device draws alike
        self._generator = torch.Generator().manual_seed(cfg.seed)

    @torch.no_grad()
    def synchronize(self) -> None:
        flat = flat_grads(self.params)
        if self.steps < self.cfg.powersgd_start_step:
            out = self._exact.average(self._exact.pad(flat), self._fp32)[: self.numel]
        else:
            out = self._compressed(flat)
        write_grads(self.params, out)
        self.steps += 1

    def _fresh_qs(self) -> list[torch.Tensor]:
        lay, dev = self.layout, self._ex.device
        return [orthogonalize_(torch.randn(lay.matrix(i)[1], lay.ranks[i],
                                           generator=self._generator).to(dev),
                               self.cfg.powersgd_orthogonalization_eps)
                for i in lay.compressed]

    def _average(self, avg: ShardedAverager, parts: list[torch.Tensor], sizes: list[int]):
        sent = torch.cat([t.reshape(-1) for t in parts])
        return avg.average(avg.pad(sent), self._fp32)[: avg.numel].split(sizes)

    def _compressed(self, flat: torch.Tensor) -> torch.Tensor:
        lay, cfg = self.layout, self.cfg
        parts = list(flat.split([math.prod(s) for s in lay.shapes]))
        mats = [parts[i].view(lay.matrix(i)) for i in lay.compressed]  # (n, m) each
        if cfg.powersgd_error_feedback:
            mats = [mat + e for mat, e in zip(mats, self.errors, strict=True)]
        if not cfg.powersgd_warm_start or len(self.qs) != len(mats):
            self.qs = self._fresh_qs()
        ps = [mat @ q for mat, q in zip(mats, self.qs, strict=True)]  # (n, r) each
        exact = [parts[i] for i in lay.exact]
        got = self._average(self._avg_p, exact + ps, [t.numel() for t in exact + ps])
        for i, mean in zip(lay.exact, got[: len(exact)], strict=True):
            parts[i] = mean
        eps = cfg.powersgd_orthogonalization_eps
        ps = [orthogonalize_(mean.view(p.shape).clone(), eps)
              for p, mean in zip(ps, got[len(exact):], strict=True)]
        qs = [mat.T @ p for mat, p in zip(mats, ps, strict=True)]  # (m, r) each
        if qs:
            means = self._average(self._avg_q, qs, [q.numel() for q in qs])
            self.qs = [mean.view(q.shape).clone() for q, mean in zip(qs, means, strict=True)]
        for i, p, q in zip(lay.compressed, ps, self.qs, strict=True):
            parts[i] = p @ q.T
        if cfg.powersgd_error_feedback:
            self.errors = [mat - p @ q.T for mat, p, q in zip(mats, ps, qs, strict=True)]
        return torch.cat([t.reshape(-1) for t in parts])

    def state_dict(self) -> dict:
        """What a resumed run needs of this object: the step count, the error-feedback
        residuals, the warm-start Qs, the generator of fresh Qs and the optimizer's state."""
        return {"steps": self.steps, "errors": [e.clone() for e in self.errors],
                "qs": [q.clone() for q in self.qs], "generator": self._generator.get_state(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict()`'s output; a ValueError naming the part that does not fit
        these parameters and this config."""
        want = {"errors": [tuple(e.shape) for e in self.errors],
                "qs": [(self.layout.matrix(i)[1], self.layout.ranks[i])
                       for i in self.layout.compressed] if state.get("qs") else []}
        for key, shapes in want.items():
            got = [tuple(t.shape) for t in state.get(key, [])]
            if got != shapes:
                raise ValueError(f"PowerSGDDataParallel.load_state_dict: {key} must have "
                                 f"shapes {shapes} (these parameters, rank "
                                 f"{self.cfg.powersgd_rank}), got {got}")
        dev = self._ex.device
        self.steps = int(state["steps"])
        self.errors = [e.to(dev).clone() for e in state["errors"]]
        self.qs = [q.to(dev).clone() for q in state["qs"]]
        self._generator.set_state(state["generator"].cpu())
        self.optimizer.load_state_dict(state["optimizer"])

    @classmethod
    def exchange_nbytes(cls, cfg, numel, world, frozen=True) -> int:
        """Without shapes the parameters count as one vector, which goes exact: the exact
        exchange's bytes. `shaped_exchange_nbytes` counts the compressed matrices."""
        return cls.shaped_exchange_nbytes(cfg, [(numel,)], world, frozen)

    @classmethod
    def shaped_exchange_nbytes(cls, cfg, shapes, world, frozen=True) -> int:
        if not frozen:  # before powersgd_start_step
            numel = sum(math.prod(s) for s in shapes)
            return ShardedAverager.nbytes(Fp32Vector(), numel, world)
        return Layout.of(cfg, shapes).nbytes(world)

    @classmethod
    def round_trip(cls, cfg, x, generator) -> None:
        """`x` as a near-square matrix (zero-padded): one power step, the rank-r
        approximation and its error."""
        n = max(1, math.isqrt(x.numel()))
        m = math.ceil(x.numel() / n)
        mat = torch.zeros(n * m, dtype=torch.float32, device=x.device)
        mat[: x.numel()] = x
        mat = mat.view(n, m)
        q = torch.randn(m, min(cfg.powersgd_rank, n, m), generator=generator).to(x.device)
        p, q = power_step(mat, q, cfg.powersgd_orthogonalization_eps)
        mat.sub_(p @ q.T)  # the error the next step adds back


CODEC = PowerSGDDataParallel
