"""Data-parallel gradient compression over real gloo process groups (2 and 3 replicas).

One spawn of 3 processes runs every compressor's scenario on the default group (3
replicas) and then on a subgroup of global ranks 1 and 2 (2 replicas, group ranks differ
from global ranks, as for a pipeline stage's data-parallel group); each rank saves what it
saw, and the tests check those files against the exact mean and each compressor's bound.
And one replica without torch.distributed: a plain optimizer.
"""

import math
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from aqsgd import quant
from aqsgd.compress.gradient import GradCompressionConfig, make_data_parallel
from bench.launch.process import free_port

SIZES = [(37,), (13, 11)]  # 180 parameters: divides by neither 2*8 nor 3*8 buckets
NUMEL = 180
NATURAL_REPEATS = 200  # copies of the gradient compressed in one exchange
EF_STEPS = 16


def _params():
    return [torch.nn.Parameter(torch.zeros(s)) for s in SIZES]


def _grads(rank: int, step: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return [torch.randn(s, generator=g) * (1 + rank) for s in SIZES]


def _set_grads(params, grads) -> None:
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()


def _flat(params) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in params])


def _scenarios(rank: int, group) -> dict:
    out = {}
    # fp32: exact mean.
    params = _params()
    dp = make_data_parallel(GradCompressionConfig(mode="fp32"), params, group, {"lr": 0.1})
    _set_grads(params, _grads(rank))
    dp.synchronize()
    out["fp32"] = _flat(params).clone()
    out["fp32_bytes"] = (dp.bytes_sent, dp.bytes_recv)

    # natural: many independent copies of the same gradient in one exchange; the mean over
    # the copies must approach the exact mean (each value is rounded independently).
    copies = [torch.nn.Parameter(torch.zeros(NATURAL_REPEATS, NUMEL))]
    dp = make_data_parallel(GradCompressionConfig(mode="natural", seed=3), copies, group, {})
    flat = torch.cat([t.reshape(-1) for t in _grads(rank)])
    _set_grads(copies, [flat.expand(NATURAL_REPEATS, NUMEL)])
    dp.synchronize()
    out["natural"] = copies[0].grad.clone()  # (repeats, numel)
    out["natural_bytes"] = (dp.bytes_sent, dp.bytes_recv)

    # ef21: gradients change every step; record local g_i, the shared g and the gradients.
    params = _params()
    cfg = GradCompressionConfig(mode="ef21", topk_ratio=0.1)  # k = 18 of 180
    dp = make_data_parallel(cfg, params, group, {})
    local, shared, grads = [], [], []
    for step in range(EF_STEPS):
        g = _grads(rank, step if step < 4 else 4)  # constant from step 4 on
        _set_grads(params, g)
        dp.synchronize()
        local.append(dp.ef21_local.clone())
        shared.append(_flat(params).clone())
        grads.append(torch.cat([t.reshape(-1) for t in g]))
    out["ef21"] = (torch.stack(local), torch.stack(shared), torch.stack(grads))
    out["ef21_bytes"] = (dp.bytes_sent, dp.bytes_recv)

    # qadam, exchange alone: a constant vector averaged EF_STEPS times with error feedback.
    params = _params()
    cfg = GradCompressionConfig(mode="qadam", bits=4, bucket_size=8, freeze_after_steps=2)
    dp = make_data_parallel(cfg, params, group, {"lr": 0.01})
    opt = dp.optimizer
    avg, st = opt._avg, opt.flat_state
    x = avg.pad(torch.cat([t.reshape(-1) for t in _grads(rank)]))
    outs = [avg.average(x, opt._codec, st["worker_err"], st["server_err"])
            for _ in range(EF_STEPS)]  # fmt: skip
    out["qadam_avg"] = torch.stack(outs)[:, :NUMEL]
    out["qadam_err_norm"] = float(st["worker_err"].abs().sum() + st["server_err"].abs().sum())

    # qadam, optimizer: 2 exact steps then 3 compressed ones; replicas must stay identical.
    params = _params()
    dp = make_data_parallel(cfg, params, group, {"lr": 0.01, "weight_decay": 0.1})
    sent = []
    for step in range(5):
        _set_grads(params, _grads(rank, step))
        dp.synchronize()  # no-op for qadam
        before = dp.bytes_sent
        dp.optimizer.step()
        sent.append(dp.bytes_sent - before)
        if step == 1:
            out["qadam_params_exact"] = torch.cat([p.detach().reshape(-1) for p in params])
    out["qadam_params"] = torch.cat([p.detach().reshape(-1) for p in params])
    out["qadam_step_bytes"] = sent
    out["qadam_shard"] = dp.optimizer._avg.shard
    return out


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=3, timeout=timedelta(seconds=60))  # fmt: skip
    try:
        torch.save(_scenarios(rank, None), f"{out_dir}/world3_rank{rank}.pt")
        pair = dist.new_group([1, 2])  # every rank must take part in creating it
        if rank in (1, 2):
            torch.save(_scenarios(rank - 1, pair), f"{out_dir}/world2_rank{rank - 1}.pt")
        dist.barrier()  # rank 0 hosts the store: it must outlive the pair's exchanges
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("gradcomp")
    # The first optimizer built in a process imports torch._dynamo (seconds); do it once
    # here so the forked ranks inherit it.
    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    mp.start_processes(_worker, args=(free_port(), str(out_dir)), nprocs=3, join=True,
                       start_method="fork")  # fork: no re-import of torch per process
    return out_dir


@pytest.fixture(params=[2, 3], ids=["world2", "world3"])
def runs(request, spawned):
    world = request.param
    return world, [torch.load(spawned / f"world{world}_rank{r}.pt") for r in range(world)]


def _exact_mean(world: int, step: int = 0) -> torch.Tensor:
    return torch.stack(
        [torch.cat([t.reshape(-1) for t in _grads(r, step)]) for r in range(world)]
    ).mean(0)


def _shard(world: int, multiple: int = 1) -> int:
    return math.ceil(math.ceil(NUMEL / world) / multiple) * multiple


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_fp32_average_is_the_exact_mean_and_counts_bytes(runs):
    world, res = runs
    mean = _exact_mean(world)
    for r in range(world):
        assert torch.allclose(res[r]["fp32"], mean, atol=1e-6, rtol=0)
        assert torch.equal(res[r]["fp32"], res[0]["fp32"])
        # reduce-scatter + all-gather of fp32 shards, (W - 1) shards out and in, twice
        expected = 2 * (world - 1) * _shard(world) * 4
        assert res[r]["fp32_bytes"] == (expected, expected)


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_natural_compression_is_unbiased_and_one_byte_per_value(runs):
    world, res = runs
    mean = _exact_mean(world)
    xs = torch.stack([torch.cat([t.reshape(-1) for t in _grads(r)]) for r in range(world)])
    # Variance of one natural rounding is at most x^2 / 8; two roundings (worker, owner).
    v1 = (xs**2).sum(0) / (8 * world**2)
    var = v1 + (mean**2 + v1) / 8
    runs_ = res[0]["natural"]  # (repeats, numel)
    for r in range(world):
        assert torch.equal(res[r]["natural"], runs_)  # every replica applies the same values
    err = (runs_.mean(0) - mean).abs()
    assert bool((err <= 5 * (var / NATURAL_REPEATS).sqrt() + 1e-7).all())
    single = (runs_[0] - mean).abs()
    assert float(single.max()) > 0  # it really is compressed
    shard = math.ceil(NATURAL_REPEATS * NUMEL / world)
    per_step = 2 * (world - 1) * (shard + 4)  # uint8 codes + one int32 exponent per shard
    assert res[0]["natural_bytes"] == (per_step, per_step)


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_ef21_keeps_g_the_mean_of_local_states_and_contracts(runs):
    world, res = runs
    local = torch.stack([res[r]["ef21"][0] for r in range(world)])  # (W, steps, numel)
    shared, grads = res[0]["ef21"][1], torch.stack([res[r]["ef21"][2] for r in range(world)])
    k = math.ceil(0.1 * NUMEL)
    for r in range(world):
        assert torch.equal(res[r]["ef21"][1], shared)
    assert torch.allclose(shared, local.mean(0), atol=1e-5)
    assert torch.allclose(shared[0], grads[:, 0].mean(0), atol=1e-6)  # exact first step
    for t in range(1, EF_STEPS):
        # top-k is contractive: ||g_i^t - grad_i^t|| <= sqrt(1 - k/n) ||g_i^{t-1} - grad_i^t||
        after = (local[:, t] - grads[:, t]).norm(dim=1)
        before = (local[:, t - 1] - grads[:, t]).norm(dim=1)
        assert bool((after <= math.sqrt(1 - k / NUMEL) * before + 1e-5).all())
    # The memory is carried: after the gradients stop changing the estimate becomes exact.
    assert float((shared[4] - grads[:, 4].mean(0)).abs().max()) > 1e-2
    assert float((shared[-1] - grads[:, -1].mean(0)).abs().max()) < 1e-5
    exact_step = 2 * (world - 1) * _shard(world) * 4
    sparse_step = (world - 1) * k * 8  # int32 index + fp32 value per entry, to every peer
    assert res[0]["ef21_bytes"][0] == exact_step + (EF_STEPS - 1) * sparse_step


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_qadam_exchange_is_within_the_quantizer_bound_and_error_feedback_carries(runs):
    world, res = runs
    mean = _exact_mean(world)
    xmax = max(float(torch.cat([t.reshape(-1) for t in _grads(r)]).abs().max())
               for r in range(world))  # fmt: skip
    q = 2 ** (4 - 1)
    bound = 2.1 * xmax / q  # worker rounding (averaged) + owner rounding, scales <= 1.001 max
    outs = res[0]["qadam_avg"]
    for r in range(world):
        assert torch.equal(res[r]["qadam_avg"], outs)
        assert res[r]["qadam_err_norm"] > 0
    first = (outs[0] - mean).abs()
    assert float(first.max()) <= bound
    assert float(first.max()) > bound / 20  # a 4-bit average is visibly off in one step
    # Error feedback: what was not sent is sent later, so the running mean converges.
    running = (outs.mean(0) - mean).abs()
    assert float(running.max()) <= 2 * bound / EF_STEPS


@pytest.mark.slow
@pytest.mark.workers
@pytest.mark.timeout(120)
def test_qadam_optimizer_matches_adamw_while_exact_and_keeps_replicas_identical(runs):
    world, res = runs
    params = _params()
    ref = torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)
    for step in range(2):
        mean = _exact_mean(world, step)
        offset = 0
        for p in params:
            p.grad = mean[offset: offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        ref.step()
    want = torch.cat([p.detach().reshape(-1) for p in params])
    for r in range(world):
        assert torch.allclose(res[r]["qadam_params_exact"], want, atol=1e-6)
        assert torch.equal(res[r]["qadam_params"], res[0]["qadam_params"])
    shard = res[0]["qadam_shard"]
    assert shard == _shard(world, 8)
    exact = 2 * (world - 1) * shard * 4
    compressed = 2 * (world - 1) * (quant.packed_nbytes(shard, 4) + 2 * shard // 8)
    assert res[0]["qadam_step_bytes"] == [exact, exact, compressed, compressed, compressed]


def test_single_replica_without_torch_distributed_is_a_plain_optimizer():
    params = _params()
    dp = make_data_parallel(GradCompressionConfig(mode="natural"), params, None, {"lr": 0.1})
    _set_grads(params, _grads(0))
    dp.synchronize()
    assert dp.world_size == 1 and dp.bytes_sent == 0 and dp.bytes_recv == 0
    dp.optimizer.step()
    assert float(params[0].detach().abs().sum()) > 0
