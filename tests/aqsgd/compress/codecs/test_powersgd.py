"""PowerSGD on one process (aqsgd.compress.codecs.powersgd): the power step against
torch's QR, which matrices it compresses and what they cost on the wire, and error
feedback keeping what a step did not send."""

import math

import pytest
import torch

from aqsgd.compress.codecs.powersgd import Layout, orthogonalize_, power_step
from aqsgd.compress.gradient import GradCompressionConfig, exchange_nbytes, make_data_parallel
from aqsgd.compress.registry import GRAD_CODECS


def _low_rank(n: int, m: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) @ torch.randn(k, m, generator=g)  # (n, m), rank k


def test_orthogonalize_matches_torch_qr_up_to_signs():
    a = torch.randn(37, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want, _ = torch.linalg.qr(a)  # the reference: Householder QR
    got = orthogonalize_(a.clone())
    assert torch.allclose(got.abs(), want.abs(), atol=1e-12, rtol=0)
    assert torch.allclose(got.T @ got, torch.eye(5, dtype=torch.float64), atol=1e-12)


def test_a_zero_column_stays_zero_and_the_rest_orthonormal():
    p = torch.randn(23, 3, generator=torch.Generator().manual_seed(1))
    p[:, 1] = 0.0
    orthogonalize_(p)
    assert bool(torch.isfinite(p).all()) and float(p[:, 1].abs().max()) == 0.0
    assert torch.allclose(p[:, [0, 2]].T @ p[:, [0, 2]], torch.eye(2), atol=1e-6)


def test_a_column_in_the_span_of_those_before_it_is_dropped():
    # a constant gradient makes every column of P constant: what one projection leaves
    # of the second is rounding along the first, which normalised would be the first again
    p = torch.ones(31, 17) @ torch.randn(17, 2, generator=torch.Generator().manual_seed(2))
    orthogonalize_(p)
    assert float(p[:, 1].abs().max()) == 0.0
    assert torch.allclose(p[:, 0].norm(), torch.tensor(1.0))


@pytest.mark.parametrize("k, r", [(4, 4), (3, 4), (1, 2)], ids=["k4r4", "k3r4", "k1r2"])
def test_a_matrix_of_rank_at_most_r_is_reconstructed(k, r):
    mat = _low_rank(37, 23, k, seed=k)
    q = torch.randn(23, r, generator=torch.Generator().manual_seed(7))
    p, q = power_step(mat, q)  # P (37, r), Q (23, r)
    assert p.shape == (37, r) and q.shape == (23, r)
    assert torch.allclose(p @ q.T, mat, atol=1e-4 * float(mat.abs().max()), rtol=0)


def test_a_full_rank_matrix_loses_what_error_feedback_keeps():
    mat = torch.randn(37, 23, generator=torch.Generator().manual_seed(3))
    p, q = power_step(mat, torch.randn(23, 2, generator=torch.Generator().manual_seed(4)))
    approx = p @ q.T
    assert float((mat - approx).norm()) > 0.5 * float(mat.norm())  # rank 2 of 23
    assert torch.allclose(approx.T @ p, q, atol=1e-5)  # P is an orthonormal basis of it


@pytest.mark.parametrize("shape, rank, want", [
    ((37,), 4, 0),  # 1-D: always exact
    ((13, 11), 4, 0),  # (13 + 11) x 4 x 2 = 192 >= 143
    ((13, 11), 2, 2),  # 96 < 143
    ((64, 48), 4, 4),
    ((3, 100), 4, 0),  # rank clamped to 3: 103 x 3 x 2 = 618 >= 300
    ((5, 3, 20), 2, 2),  # viewed (5, 60): 65 x 2 x 2 = 260 < 300
])
def test_which_tensors_are_compressed_at_what_rank(shape, rank, want):
    cfg = GradCompressionConfig(mode="powersgd", powersgd_rank=rank)
    assert Layout.of(cfg, [shape]).ranks == (want,)


@pytest.mark.parametrize("world", [2, 3])
def test_bytes_follow_the_rank_formula(world):
    shapes = [(37,), (64, 48), (8,)]
    numel = sum(math.prod(s) for s in shapes)
    cfg = GradCompressionConfig(mode="powersgd", powersgd_rank=4)
    exact_u, p_rows, q_rows = 37 + 8, 64 * 4, 48 * 4
    want = 2 * (world - 1) * 4 * (math.ceil((exact_u + p_rows) / world)
                                  + math.ceil(q_rows / world))
    assert exchange_nbytes(cfg, numel, world, shapes=shapes) == want
    assert want == {2: 1976, 3: 2640}[world]
    exact = 2 * (world - 1) * 4 * math.ceil(numel / world)
    assert exchange_nbytes(cfg, numel, world, frozen=False, shapes=shapes) == exact
    assert exchange_nbytes(cfg, numel, world) == exact  # shapes unknown: one vector
    fp32 = GradCompressionConfig(mode="fp32")
    assert exchange_nbytes(fp32, numel, world, shapes=shapes) == exchange_nbytes(
        fp32, numel, world)
    with pytest.raises(ValueError, match=r"shapes must hold numel=3117 elements, got 3116"):
        exchange_nbytes(cfg, numel, world, shapes=[(37,), (64, 48), (7,)])


def _one_replica(**settings):
    cfg = GradCompressionConfig(mode="powersgd", powersgd_rank=2, **settings)
    params = [torch.nn.Parameter(torch.zeros(s)) for s in [(9,), (31, 17)]]
    return params, make_data_parallel(cfg, params, None, {"lr": 0.1})


def test_error_feedback_keeps_what_was_not_sent():
    params, dp = _one_replica(powersgd_start_step=1)
    gen = torch.Generator().manual_seed(5)
    sent, total = torch.zeros(31, 17), torch.zeros(31, 17)
    for step in range(6):
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        dp.synchronize()
        assert torch.equal(params[0].grad, grads[0])  # 1-D: exact (one replica)
        if step == 0:  # before the start step: exact, nothing kept
            assert torch.equal(params[1].grad, grads[1]) and dp.qs == []
        total += grads[1]
        sent += params[1].grad
        # what was applied so far plus what is kept is everything that arrived
        assert torch.allclose(sent + dp.errors[0], total, atol=1e-5, rtol=0)
        assert float(dp.errors[0].norm()) > 0 or step == 0
    assert dp.steps == 6 and dp.bytes_sent == 0


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_warm_start_reuses_q_and_a_cold_start_draws_a_fresh_one(warm):
    params, dp = _one_replica(powersgd_start_step=0, powersgd_error_feedback=False,
                              powersgd_warm_start=warm)
    draws = []
    for _ in range(3):
        params[1].grad = torch.ones(31, 17)
        dp.synchronize()
        draws.append(dp.state_dict()["generator"])
        assert torch.allclose(params[1].grad, torch.ones(31, 17), atol=1e-5)  # rank 1
    assert dp.errors == []
    assert torch.equal(draws[1], draws[2]) == warm  # the generator moves on when cold


def test_a_state_of_other_parameters_is_refused():
    params, dp = _one_replica(powersgd_start_step=0)
    for p in params:
        p.grad = torch.randn(p.shape)
    dp.synchronize()
    state = dp.state_dict()
    state["errors"] = [torch.zeros(31, 16)]
    with pytest.raises(ValueError, match=r"errors must have shapes \[\(31, 17\)\].*"
                                         r"got \[\(31, 16\)\]"):
        dp.load_state_dict(state)


def test_round_trip_codes_an_irregular_length():
    x = torch.randn(1031, generator=torch.Generator().manual_seed(0))  # prime: 32 x 33
    cfg = GradCompressionConfig(mode="powersgd")
    GRAD_CODECS["powersgd"].round_trip(cfg, x, torch.Generator().manual_seed(0))
