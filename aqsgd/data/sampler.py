"""The sampler: which sample ids every rank trains on at each step.

    from aqsgd.data.sampler import Sampler
    s = Sampler(num_samples=256, micro_batch_size=16, num_micro_batches=4, seed=0)
    s.step_ids(5)           # (4, 16) int64 ids of step 5, the same on every rank

Every rank builds the same Sampler from the run configuration and derives its ids
from (seed, step) alone, so no rank waits on another to learn them: the first stage
reads its inputs and the last stage its targets by id, and the activation caches of
AQ-SGD are keyed by it. The permutation comes from torch's CPU generator, seeded
explicitly, so it does not depend on the interpreter's hash seed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

__all__ = ["Sampler"]


@functools.lru_cache(maxsize=4)
def _permutation(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    # Cached: every step of an epoch slices the same permutation.
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_samples, generator=gen)  # (N,) int64


@dataclass(frozen=True)
class Sampler:
    """Sample ids per (step, micro-batch, replica), identical on every rank.

    Epoch e is a permutation of the N sample ids drawn from (seed, e). Each optimizer
    step takes the next num_replicas * num_micro_batches * micro_batch_size ids of it,
    laid out (replica, micro-batch, sample); an epoch's tail that does not fill a
    step is dropped. `step` is global (0, 1, ... across epochs).
    """

    num_samples: int
    micro_batch_size: int
    num_micro_batches: int
    seed: int
    num_replicas: int = 1

    def __post_init__(self) -> None:
        for name in ("num_samples", "micro_batch_size", "num_micro_batches", "num_replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Sampler.{name} must be a positive int, got {value!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"Sampler.seed must be an int >= 0, got {self.seed!r}")
        if self.num_samples < self.samples_per_step:
            raise ValueError(
                f"Sampler.num_samples={self.num_samples} is fewer than the {self.samples_per_step} "
                f"samples of one step (replicas x micro-batches x micro-batch size)"
            )

    @property
    def samples_per_step(self) -> int:
        return self.num_replicas * self.num_micro_batches * self.micro_batch_size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.samples_per_step

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    def step_ids(self, step: int, replica: int = 0) -> torch.Tensor:
        """(num_micro_batches, micro_batch_size) int64 ids of `replica` at global `step`."""
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        if not 0 <= replica < self.num_replicas:
            raise ValueError(f"replica must be in [0, {self.num_replicas}), got {replica!r}")
        perm = _permutation(self.num_samples, self.seed, self.epoch_of(step))
        start = (step % self.steps_per_epoch) * self.samples_per_step
        shape = (self.num_replicas, self.num_micro_batches, self.micro_batch_size)
        # clone: callers own their ids; the cached permutation must not change.
        return perm[start : start + self.samples_per_step].view(shape)[replica].clone()
