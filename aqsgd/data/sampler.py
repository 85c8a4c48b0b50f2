"""The sampler: which sample ids every rank trains on at each step.

    from aqsgd.data.sampler import Sampler
    s = Sampler(num_samples=256, micro_batch_size=16, num_micro_batches=4, seed=0)
    s.step_ids(5)           # (4, 16) int64 ids of step 5, the same on every rank

Every rank builds the same Sampler from the run configuration and derives its ids
from (seed, step) alone, so no rank waits on another to learn them: the first stage
reads its inputs and the last stage its targets by id, and the activation caches of
AQ-SGD are keyed by it. The permutation comes from torch's CPU generator, seeded
explicitly, so it does not depend on the interpreter's hash seed. Each data-parallel
replica keeps a fixed shard of the ids: Note [fixed shards] below.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import torch

__all__ = ["Sampler"]


# Note [fixed shards]: each data-parallel replica trains on a fixed shard of the ids
# (replica r holds ids r, r + R, r + 2R, ...) and permutes only within it every epoch.
# AQ-SGD's caches sit on the pipeline links of one replica, so a sample must come back
# to the replica that cached it: with one global permutation sliced by replica, a
# sample would change replica between epochs and reach a cache that has never seen it,
# which then sends it raw. Strided shards interleave neighbouring windows of a document
# across replicas rather than giving each replica one stretch of the corpus.
def _generator_seed(seed: int, epoch: int, replica: int) -> int:
    # Replica 0 keeps the seed a single replica has always used, so one-replica runs keep
    # their order. The CPU generator keeps only the low 32 bits of a seed, so the other
    # replicas take a hash of all three numbers rather than an offset in high bits.
    if replica == 0:
        return seed * 1_000_003 + epoch
    digest = hashlib.sha256(f"sampler:{seed}:{epoch}:{replica}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


@functools.lru_cache(maxsize=8)
def _permutation(shard_size: int, seed: int, epoch: int, replica: int) -> torch.Tensor:
    # Cached: every step of an epoch slices the same permutation.
    gen = torch.Generator().manual_seed(_generator_seed(seed, epoch, replica))
    return torch.randperm(shard_size, generator=gen)  # (S,) int64


@dataclass(frozen=True)
class Sampler:
    """Sample ids per (step, micro-batch, replica), identical on every rank.

    Replica r owns the shard {r + k * R : k < S} of S = num_samples // R ids (Note
    [fixed shards]); the ids from S * R on are never used. Epoch e visits the shard in
    the order of a permutation drawn from (seed, e, r); each optimizer step takes the
    next num_micro_batches * micro_batch_size ids of it, laid out (micro-batch, sample);
    an epoch's tail that does not fill a step is dropped. `step` is global (0, 1, ...
    across epochs); every replica has the same number of steps per epoch.
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
        """Samples of one optimizer step over all replicas."""
        return self.num_replicas * self.num_micro_batches * self.micro_batch_size

    @property
    def shard_size(self) -> int:
        return self.num_samples // self.num_replicas

    @property
    def steps_per_epoch(self) -> int:
        return self.shard_size // (self.num_micro_batches * self.micro_batch_size)

    def epoch_of(self, step: int) -> int:
        return step // self.steps_per_epoch

    def _check_replica(self, replica: int) -> None:
        if not 0 <= replica < self.num_replicas:
            raise ValueError(f"replica must be in [0, {self.num_replicas}), got {replica!r}")

    def shard(self, replica: int = 0) -> torch.Tensor:
        """(shard_size,) int64: the ids `replica` trains on, in every epoch."""
        self._check_replica(replica)
        return torch.arange(self.shard_size, dtype=torch.int64) * self.num_replicas + replica

    def step_ids(self, step: int, replica: int = 0) -> torch.Tensor:
        """(num_micro_batches, micro_batch_size) int64 ids of `replica` at global `step`."""
        if not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        self._check_replica(replica)
        perm = _permutation(self.shard_size, self.seed, self.epoch_of(step), replica)
        per_replica = self.num_micro_batches * self.micro_batch_size
        start = (step % self.steps_per_epoch) * per_replica
        positions = perm[start : start + per_replica]  # (M * B,) positions in the shard
        # a new tensor: callers own their ids; the cached permutation must not change.
        ids = positions * self.num_replicas + replica
        return ids.view(self.num_micro_batches, self.micro_batch_size)
