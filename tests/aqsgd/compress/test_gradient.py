"""Gradient compression in one process (aqsgd.compress.gradient and its codecs): QuantizedAdam's
frozen second moment and its floor, natural compression, the quantizer's buckets, bad
configs, and each codec's bytes per exchange."""

from __future__ import annotations

import math

import pytest
import torch

from aqsgd.compress.codecs.natural import natural_compress, natural_decompress
from aqsgd.compress.codecs.qadam import QuantVector
from aqsgd.compress.gradient import GradCompressionConfig, exchange_nbytes, make_data_parallel

VOCAB, DIM, LR, FREEZE, AFTER = 16, 8, 1e-3, 5, 3
ABSENT = 12  # a token no batch holds before the freeze


def _absent_token_move(cfg: GradCompressionConfig) -> tuple[float, float]:
    """Train an embedding and a head on tokens 0..7 for FREEZE steps (one replica,
    no torch.distributed), then AFTER steps on batches holding ABSENT too. Returns the
    largest coordinate move in one of those steps, of ABSENT's embedding row and of the
    rows seen before. (The first moment is exchanged 8-bit quantized with error
    feedback, so a small m can take a step or two to show.)"""
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(VOCAB, DIM), torch.nn.Linear(DIM, 1)
    dp = make_data_parallel(cfg, [*emb.parameters(), *head.parameters()], None,
                            {"lr": LR, "weight_decay": 0.0})  # fmt: skip
    gen = torch.Generator().manual_seed(1)
    absent = seen = 0.0
    for step in range(FREEZE + AFTER):
        tokens = torch.randint(0, 8, (32,), generator=gen)
        if step >= FREEZE:
            tokens[:4] = ABSENT
        loss = (head(emb(tokens)).squeeze(-1) - 1.0).pow(2).mean()
        loss.backward()
        assert (emb.weight.grad[ABSENT].abs().max() > 0) == (step >= FREEZE)
        before = emb.weight.detach().clone()
        dp.optimizer.step()
        dp.optimizer.zero_grad()
        if step >= FREEZE:
            move = (emb.weight.detach() - before).abs()
            absent, seen = max(absent, float(move[ABSENT].max())), max(seen, float(move[:8].max()))
    return absent, seen


def test_a_token_absent_until_the_freeze_moves_by_a_bounded_amount():
    absent, seen = _absent_token_move(GradCompressionConfig(mode="qadam",
                                                            freeze_after_steps=FREEZE))
    # at most 10 lr x (g / rms) (class docstring); a gradient of a typical size: ~ lr
    assert 0 < absent <= 20 * LR, absent
    assert seen <= 20 * LR
    # without the floor the same step is lr * m / eps: thousands of normal steps
    unfloored, _ = _absent_token_move(GradCompressionConfig(mode="qadam", v_floor=0.0,
                                                            freeze_after_steps=FREEZE))
    assert unfloored > 1000 * LR, unfloored


def test_the_floor_leaves_coordinates_with_gradient_history_alone():
    """A run where every coordinate had gradient before the freeze moves exactly as
    without the floor when their v is above it."""
    moves = [_absent_token_move(GradCompressionConfig(mode="qadam", v_floor=f,
                                                      freeze_after_steps=FREEZE))[1]
             for f in (0.0, 1e-6)]  # fmt: skip
    assert moves[0] == moves[1]


@pytest.mark.parametrize("value", [-0.1, float("inf"), "0.01", True])
def test_bad_v_floor_is_rejected(value):
    with pytest.raises(ValueError, match=r"GradCompressionConfig.v_floor must be a finite "
                                         r"number >= 0, got"):
        GradCompressionConfig(mode="qadam", v_floor=value)


def test_exchange_nbytes_follows_the_codecs():
    n, w = 10_000, 2
    fp32 = exchange_nbytes(GradCompressionConfig(mode="fp32"), n, w)
    assert fp32 == 2 * (w - 1) * math.ceil(n / w) * 4
    qadam = exchange_nbytes(GradCompressionConfig(mode="qadam", bits=8, bucket_size=512), n, w)
    shard = math.ceil(math.ceil(n / w) / 512) * 512
    assert qadam == 2 * (shard + 2 * shard // 512)
    ef21 = exchange_nbytes(GradCompressionConfig(mode="ef21", topk_ratio=0.01), n, w)
    assert ef21 == 100 * 8
    assert exchange_nbytes(GradCompressionConfig(mode="qadam"), n, w, frozen=False) == (
        2 * shard * 4)


def test_natural_compression_single_process_properties():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(1000, generator=g), torch.tensor([0.0, 1e-30, -3e-39, 4.0])])
    codes, e_top = natural_compress(x, g)
    assert codes.dtype == torch.uint8 and codes.shape == x.shape
    y = natural_decompress(codes, e_top)
    nz = y != 0
    assert bool((torch.frexp(y[nz].abs()).mantissa == 0.5).all())  # powers of two
    assert bool((torch.sign(y[nz]) == torch.sign(x[nz])).all())
    ratio = y[x.abs() > 1e-20].abs() / x[x.abs() > 1e-20].abs()
    assert bool(((ratio >= 0.5) & (ratio <= 2.0)).all())  # one of the two neighbours
    assert y[1000] == 0
    mean = torch.stack([natural_decompress(*natural_compress(x, g)) for _ in range(400)]).mean(0)
    big = x.abs() > 1e-20
    assert bool(((mean[big] - x[big]).abs() <= 5 * x[big].abs() / math.sqrt(8 * 400)).all())


def test_quant_codec_buckets_are_max_abs_groups():
    codec = QuantVector(bits=8, bucket=16)
    x = torch.randn(64)
    tensors = codec.encode(x)
    assert [tuple(t.shape) for t in tensors] == [(64,), (4,)]
    assert float((codec.decode(tensors, 64) - x).abs().max()) <= float(x.abs().max()) / 128 * 1.01


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "signsgd"}, r"mode must be one of .* got 'signsgd'"),
        ({"bits": 0}, r"bits must be an int in 1\.\.8, got 0"),
        ({"bucket_size": 0}, "bucket_size must be an int >= 1"),
        ({"topk_ratio": 0.0}, r"topk_ratio must be in \(0, 1\]"),
        ({"freeze_after_steps": 0}, "freeze_after_steps must be an int >= 1"),
        ({"powersgd_rank": 0}, "powersgd_rank must be >= 1, got 0"),
        ({"powersgd_start_step": -1}, "powersgd_start_step must be >= 0, got -1"),
        ({"powersgd_min_compression_rate": 0.5},
         "powersgd_min_compression_rate must be >= 1, got 0.5"),
    ],
)
def test_bad_grad_config_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GradCompressionConfig(**kwargs)
