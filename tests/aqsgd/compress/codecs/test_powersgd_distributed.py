"""PowerSGD on 2 replicas (two gloo processes on loopback): the bytes of every step
against the rank formula, identical replicas, error feedback over the group, and a save
and restore in the middle of a run that changes nothing that follows."""

import math
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from aqsgd.compress.gradient import GradCompressionConfig, exchange_nbytes, make_data_parallel
from bench.launch.process import free_port

# exact: (37,) and (40, 3) (43 x 2 x 2 = 172 >= 120); compressed at rank 2: the others
SHAPES = [(37,), (64, 48), (13, 11), (40, 3), (5, 3, 20)]
NUMEL = sum(math.prod(s) for s in SHAPES)  # 3529
CFG = GradCompressionConfig(mode="powersgd", powersgd_rank=2, powersgd_start_step=2, seed=4)
STEPS, SAVE_AFTER = 6, 3


def _grads(rank: int, step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 * rank + step)
    return [torch.randn(s, generator=g) * (1 + rank) for s in SHAPES]


def _replica(params=None):
    params = params or [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    return params, make_data_parallel(CFG, params, None, {"lr": 0.01})


def _step(params, dp, rank: int, step: int) -> tuple[torch.Tensor, int, int]:
    for p, g in zip(params, _grads(rank, step), strict=True):
        p.grad = g
    sent, recv = dp.bytes_sent, dp.bytes_recv
    dp.synchronize()
    out = torch.cat([p.grad.reshape(-1) for p in params]).clone()
    dp.optimizer.step()
    return out, dp.bytes_sent - sent, dp.bytes_recv - recv


def _flat_params(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params]).clone()


def _run(rank: int, out_dir: str) -> dict:
    out = {}
    params, dp = _replica()  # without interruption
    steps = [_step(params, dp, rank, t) for t in range(STEPS)]
    out["grads"] = [s[0] for s in steps]
    out["bytes"] = [s[1:] for s in steps]
    out["errors"] = [e.clone() for e in dp.errors]
    out["params"] = _flat_params(params)

    params, dp = _replica()  # interrupted after SAVE_AFTER steps
    for t in range(SAVE_AFTER):
        _step(params, dp, rank, t)
    path = f"{out_dir}/state{rank}.pt"
    torch.save({"dp": dp.state_dict(), "params": _flat_params(params)}, path)
    saved = torch.load(path)
    fresh = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    torch.nn.utils.vector_to_parameters(saved["params"], fresh)
    params, dp = _replica(fresh)
    dp.load_state_dict(saved["dp"])
    out["saved"], out["restored"] = saved["dp"], dp.state_dict()
    out["resumed_grads"] = [_step(params, dp, rank, t)[0] for t in range(SAVE_AFTER, STEPS)]
    out["resumed_params"] = _flat_params(params)
    return out


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    try:
        torch.save(_run(rank, out_dir), f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("powersgd")
    # The first optimizer built in a process imports torch._dynamo (seconds); do it once
    # here so the forked ranks inherit it.
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    mp.start_processes(_worker, args=(free_port(), str(out_dir)), nprocs=2, join=True,
                       start_method="fork")
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(2)]


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_bytes_of_every_step_follow_the_rank_formula(runs):
    exact = 2 * 1 * 4 * math.ceil(NUMEL / 2)  # the sharded fp32 average, W = 2
    first = 37 + 40 * 3 + 2 * (64 + 13 + 5)  # exact tensors, then P (n x 2) of each matrix
    second = 2 * (48 + 11 + 60)  # Q (m x 2) of each matrix
    compressed = 2 * 1 * 4 * (math.ceil(first / 2) + math.ceil(second / 2))
    assert compressed == 2240
    assert exchange_nbytes(CFG, NUMEL, 2, shapes=SHAPES) == compressed
    assert exchange_nbytes(CFG, NUMEL, 2, frozen=False, shapes=SHAPES) == exact
    for res in runs:
        assert res["bytes"] == [(exact, exact)] * 2 + [(compressed, compressed)] * 4


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_replicas_agree_and_error_feedback_keeps_the_mean_of_what_was_not_sent(runs):
    for a, b in zip(runs[0]["grads"], runs[1]["grads"], strict=True):
        assert torch.equal(a, b)
    assert torch.equal(runs[0]["params"], runs[1]["params"])
    mean = [torch.stack([torch.cat([g.reshape(-1) for g in _grads(r, t)]) for r in range(2)]
                        ).mean(0) for t in range(STEPS)]
    for t in range(2):  # before the start step: the exact mean
        assert torch.allclose(runs[0]["grads"][t], mean[t], atol=1e-6, rtol=0)
    # applied so far + the replicas' mean residual = the mean of every gradient so far
    offsets = [0] + list(torch.tensor([math.prod(s) for s in SHAPES]).cumsum(0))
    applied, total = sum(runs[0]["grads"]), sum(mean)
    kept = torch.zeros(NUMEL)
    for i, e in zip([1, 2, 4], zip(*(r["errors"] for r in runs), strict=True), strict=True):
        kept[offsets[i]: offsets[i + 1]] = (e[0] + e[1]).reshape(-1) / 2
    assert torch.allclose(applied + kept, total, atol=1e-4, rtol=0)
    assert float(kept.abs().max()) > 0.1  # something was held back


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_a_restored_run_continues_as_if_never_stopped(runs):
    for res in runs:
        saved, restored = res["saved"], res["restored"]
        assert saved["steps"] == restored["steps"] == SAVE_AFTER
        for key in ("errors", "qs"):
            assert len(saved[key]) == len(restored[key]) == 3
            for a, b in zip(saved[key], restored[key], strict=True):
                assert torch.equal(a, b)  # bit for bit
        assert torch.equal(saved["generator"], restored["generator"])
        for a, b in zip(res["grads"][SAVE_AFTER:], res["resumed_grads"], strict=True):
            assert torch.equal(a, b)
        assert torch.equal(res["params"], res["resumed_params"])
