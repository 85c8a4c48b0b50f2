"""The sampler's fixed data-parallel shards (aqsgd.data.sampler, Note [fixed shards]): each
epoch covers every sample once, the same in every process."""

import json
import os
import subprocess
import sys

import pytest
import torch

from aqsgd.data.sampler import Sampler


def test_each_replica_keeps_its_shard_and_reshuffles_within_it():
    s = Sampler(num_samples=61, micro_batch_size=3, num_micro_batches=2, seed=4, num_replicas=3)
    assert s.shard_size == 20 and s.steps_per_epoch == 3
    shards = [set(s.shard(r).tolist()) for r in range(3)]
    assert set().union(*shards) == set(range(60)) and sum(map(len, shards)) == 60  # disjoint
    for r in range(3):
        seen = [s.step_ids(t, r).flatten().tolist() for t in range(12)]  # 4 epochs
        for epoch in range(4):
            ids = sum(seen[epoch * 3:(epoch + 1) * 3], [])
            assert len(set(ids)) == 18 and set(ids) <= shards[r], (r, epoch, ids)
        assert seen[0] != seen[3]  # a new order every epoch
    # replicas do not walk their shards in lockstep (which would pair neighbouring windows)
    pos = [(s.step_ids(0, r).flatten() - r) // 3 for r in range(3)]
    assert not torch.equal(pos[0], pos[1]) and not torch.equal(pos[1], pos[2])


def test_one_replica_keeps_the_order_of_one_global_permutation_per_epoch():
    """A single replica's ids are those of randperm(N) seeded by (seed, epoch) as before
    the shards existed, so single-replica results do not move."""
    s = Sampler(num_samples=50, micro_batch_size=4, num_micro_batches=3, seed=7)
    for epoch in range(3):
        gen = torch.Generator().manual_seed(7 * 1_000_003 + epoch)
        perm = torch.randperm(50, generator=gen)
        got = torch.cat([s.step_ids(epoch * 4 + k).flatten() for k in range(4)])
        assert torch.equal(got, perm[:48])


def test_step_ids_are_the_callers_own():
    s = Sampler(num_samples=16, micro_batch_size=2, num_micro_batches=2, seed=0, num_replicas=2)
    ids = s.step_ids(1, 1)
    ids.fill_(-1)
    assert (s.step_ids(1, 1) >= 0).all()
    with pytest.raises(ValueError, match=r"replica must be in \[0, 2\), got 5"):
        s.shard(5)


def test_sampler_epochs_cover_every_sample_once():
    s = Sampler(num_samples=50, micro_batch_size=3, num_micro_batches=2, seed=7, num_replicas=2)
    assert s.samples_per_step == 12 and s.steps_per_epoch == 4
    for epoch in range(2):
        steps = range(epoch * 4, epoch * 4 + 4)
        ids = torch.cat([s.step_ids(t, r).flatten() for t in steps for r in range(2)])
        assert len(set(ids.tolist())) == 48 and ids.max() < 50
    assert not torch.equal(s.step_ids(0), s.step_ids(4))  # reshuffled per epoch
    # Global step 5 is step 1 of epoch 1; its ids are laid out (micro-batch, sample).
    assert (s.epoch_of(3), s.epoch_of(4), s.epoch_of(5)) == (0, 1, 1)
    assert s.step_ids(5, 1).shape == (2, 3)
    with pytest.raises(ValueError, match="fewer than the 12 samples of one step"):
        Sampler(num_samples=11, micro_batch_size=3, num_micro_batches=2, seed=0, num_replicas=2)
    with pytest.raises(ValueError, match=r"replica must be in \[0, 2\), got 2"):
        s.step_ids(0, replica=2)


_RANK_SCRIPT = """
import sys, json
from aqsgd.data.sampler import Sampler
s = Sampler(num_samples=1000, micro_batch_size=4, num_micro_batches=3, seed=11, num_replicas=2)
print(json.dumps([s.step_ids(t, r).tolist() for t in (0, 1, 83, 84, 500) for r in (0, 1)]))
"""


@pytest.mark.timeout(60)
def test_sampler_identical_across_processes():
    """Two "ranks" in separate interpreters (different hash seeds) derive equal ids."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _RANK_SCRIPT], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONHASHSEED": hash_seed})
        for hash_seed in ("1", "2")
    ]  # fmt: skip
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=50)
        assert proc.returncode == 0
        outputs.append(json.loads(out))
    assert outputs[0] == outputs[1]
    local = Sampler(num_samples=1000, micro_batch_size=4, num_micro_batches=3, seed=11,
                    num_replicas=2)  # fmt: skip
    assert outputs[0][0] == local.step_ids(0, 0).tolist()
