"""The performance model on synthetic steps whose answer is known by hand: pure compute,
pure communication (GPipe against 1F1B), one slow link, delay-dominated, cores shared."""

from __future__ import annotations

import re

import pytest

from bench.perfmodel.predict import bottleneck, comm_bound_rate_mbit, predict, with_rate
from bench.perfmodel.profile import CommProfile, ComputeProfile, Profile, StageCost
from bench.perfmodel.sim import simulate
from bench.perfmodel.workload import LinkWork, StageWork, StepWorkload

FAST = 1e9  # Mbit/s: transfers take ~0


def _work(stages=2, micro_batches=4, f=0.01, b=0.02, opt=0.0, act=0, grad=0,
          rate=FAST, delay_ms=0.0, schedule="gpipe", slow: dict | None = None) -> StepWorkload:
    links = {}
    for s in range(stages - 1):
        for a, c in ((s, s + 1), (s + 1, s)):
            links[(a, c)] = LinkWork((slow or {}).get(s, rate), delay_ms)
    return StepWorkload(
        schedule=schedule, stages=stages, replicas=1, micro_batches=micro_batches,
        samples_per_step=micro_batches, stage=tuple(StageWork(f, b, opt, 10)
                                                    for _ in range(stages)),
        act_bytes=act, grad_bytes=grad, encode_act_s=0.0, decode_act_s=0.0,
        encode_grad_s=0.0, decode_grad_s=0.0, dp_bytes=(0,) * stages,
        dp_codec_s=(0.0,) * stages, grad_mode="fp32", links=links)


def _profile(overhead_s=0.0, overlap=1.0, cores=None) -> Profile:
    return Profile(name="synthetic", device="none", source="test", date="2026-01-01",
                   kind="published", cores=cores,
                   compute=ComputeProfile(stages=(StageCost("tiny", 2, 0, 1, 0.1, 0.2, 0.0),
                                                  StageCost("tiny", 2, 1, 1, 0.1, 0.2, 0.0))),
                   comm=CommProfile(overhead_s, overlap, 1e4))


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pure_compute_is_the_pipeline_bubble_formula(schedule):
    S, M, f, b, opt = 4, 6, 0.010, 0.025, 0.004
    sim = simulate(_work(S, M, f, b, opt, schedule=schedule))
    assert sim.step_s == pytest.approx((M + S - 1) * (f + b) + opt, rel=1e-9)


def test_pure_communication_gpipe_serialises_the_directions_and_1f1b_overlaps_them():
    M, nbytes, rate = 4, 1_000_000, 100.0
    one = nbytes * 8 / (rate * 1e6)  # 80 ms a message
    work = _work(2, M, f=0.0, b=0.0, act=nbytes, grad=nbytes, rate=rate)
    # GPipe: every activation, then every gradient, on two links used one after the other
    assert simulate(work).step_s == pytest.approx(2 * M * one, rel=1e-9)
    # 1F1B: the last stage returns gradient k as activation k arrives: both links busy
    assert simulate(work.replace(schedule="1f1b")).step_s == pytest.approx((M + 1) * one,
                                                                           rel=1e-9)


def test_one_slow_link_sets_the_step_and_is_named_the_bottleneck():
    M, nbytes = 8, 500_000
    work = _work(4, M, f=0.0, b=0.0, act=nbytes, grad=nbytes, slow={1: 50.0})
    slow_s = nbytes * 8 / 50e6
    assert simulate(work).step_s == pytest.approx(2 * M * slow_s, rel=1e-6)
    label, share = bottleneck(work, _profile())
    assert re.fullmatch(r"communication 1\.0\d; most: link rank (1->2|2->1) .* 0\.50", label)
    assert share == pytest.approx(1.0, abs=0.02)  # every link 10% faster: the step 10% shorter
    # (either direction of the slow link alone: half the step)


def test_delay_dominated_step_is_the_round_trips():
    S, M, d = 4, 3, 20.0  # ms one way, infinite rate, no compute
    sim = simulate(_work(S, M, f=0.0, b=0.0, act=10, grad=10, delay_ms=d))
    # forward through S-1 hops, back through S-1 hops, then the clipping all-reduce's
    # 2 (S - 1) hops
    assert sim.step_s == pytest.approx(4 * (S - 1) * d / 1e3, rel=1e-6)


def test_message_overhead_adds_per_hop_like_a_delay():
    S, M = 3, 2
    work = _work(S, M, f=0.0, b=0.0, act=10, grad=10)
    sim = simulate(work, overhead_s=0.005)
    assert sim.step_s == pytest.approx(4 * (S - 1) * 0.005, rel=1e-6)


def test_one_core_shared_by_two_ranks_runs_all_compute_back_to_back():
    M, f, b, opt = 4, 0.01, 0.02, 0.003
    work = _work(2, M, f, b, opt)
    alone = simulate(work).step_s
    shared = simulate(work, cores=1).step_s
    # a 2-stage GPipe always has a rank with work, so one core never idles
    assert shared == pytest.approx(2 * (M * (f + b) + opt), rel=1e-9)
    assert alone == pytest.approx((M + 1) * (f + b) + opt, rel=1e-9)
    assert simulate(work, cores=2).step_s == pytest.approx(alone, rel=1e-9)


def test_blocking_sends_and_the_overlap_weigh_the_two_simulations():
    nbytes, rate = 1_000_000, 100.0
    work = _work(2, 4, f=0.05, b=0.05, act=nbytes, grad=nbytes, rate=rate)
    bg, blk = simulate(work).step_s, simulate(work, blocking_sends=True).step_s
    assert blk > bg
    half = predict(work, _profile(overlap=0.5), cores=False).step_s
    assert half == pytest.approx(0.5 * bg + 0.5 * blk, rel=1e-9)


def test_comm_bound_rate_is_where_transfer_time_reaches_the_compute_slack():
    # 2 stages, 1F1B-free GPipe: with compute c per micro-batch a message of t seconds
    # on the link adds ~ t per message beyond the compute; bisection finds the rate
    work = _work(2, 4, f=0.01, b=0.02, act=100_000, grad=100_000, rate=1000.0)
    rate = comm_bound_rate_mbit(work, _profile())
    fast = simulate(with_rate(work, 1e6)).step_s
    assert simulate(with_rate(work, rate * 1.05)).step_s <= 1.10 * fast + 1e-9
    assert simulate(with_rate(work, rate * 0.95)).step_s > 1.10 * fast
    assert 1.0 < rate < 1000.0
