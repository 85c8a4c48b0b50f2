"""Adaptive widths in the compressor (aqsgd.compress.activation, Note [adaptive widths]):
the width travels in the header one message ahead, the receiver sizes and decodes with it,
and both caches stay bit-identical whatever widths are chosen."""

import pytest
import torch

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig, header_fields, message_spec
from aqsgd.compress.wire import message_nbytes, spec_nbytes
from aqsgd.quant import QuantConfig

S, N, B = (8, 32), 64, 4  # sample shape (L, D), cache rows, micro-batch


def pair(**overrides):
    cfg = CompressionConfig.from_dict({"mode": "aqsgd", "bits": 8, "widths": (2, 3, 4, 8),
                               "warmup_epochs": 0, **overrides})
    return cfg, make_compressor(cfg, "send", S, N, seed=1), make_compressor(cfg, "recv", S, N)


def send(snd, rcv, x, ids, next_bits=None, training=True):
    """One message: the receiver's spec posted first (as the pipeline does), then encode,
    check the sizes against the spec, decode."""
    spec = rcv.wire_spec((x.shape[0], *S), ids, training=training)
    if next_bits is not None:
        snd.set_next_bits(next_bits)
    msg = snd.encode(x, ids, training=training)
    assert [(tuple(t.shape), t.dtype) for t in msg] == spec
    return msg, rcv.decode(msg, ids, training=training)


@pytest.mark.parametrize("overrides", [{}, {"cache_dtype": "fp32"}, {"rounding": "stochastic"},
                                       {"first_visit": "zero"}, {"warmup_epochs": 1}])
def test_caches_stay_bit_identical_across_changing_widths(overrides):
    _, snd, rcv = pair(**overrides)
    g = torch.Generator().manual_seed(0)
    widths = [8, 2, 2, 4, 3, 8, 2, 3, 4, 4, 8, 2] * 2
    for i, bits in enumerate(widths):
        epoch = i // 12
        snd.set_epoch(epoch)
        rcv.set_epoch(epoch)
        ids = torch.randperm(N, generator=g)[:B]
        x = torch.randn(B, *S, generator=g) + i * 0.1
        send(snd, rcv, x, ids, next_bits=bits)
        assert snd.last_bits == rcv.last_bits
        assert torch.equal(snd.cache.initialised, rcv.cache.initialised)
        assert torch.equal(snd.cache.gather(torch.arange(N)), rcv.cache.gather(torch.arange(N)))


def test_header_carries_this_width_and_the_next_and_the_bytes_follow_it():
    cfg, snd, rcv = pair(first_visit="zero")
    ids = torch.arange(B)
    x = torch.randn(B, *S)
    msg, _ = send(snd, rcv, x, ids, next_bits=2)
    assert msg[0][:5].tolist() == [3, 0, 0, 8, 2]  # format aqsgd, epoch 0, n_raw 0, 8, next 2
    assert msg[0].numel() == header_fields(cfg) + B == 5 + B
    assert message_nbytes(msg) == spec_nbytes(message_spec(cfg, (B, *S), 0, bits=8))
    msg, _ = send(snd, rcv, x, ids, next_bits=2)
    assert msg[0][3:5].tolist() == [2, 2] and rcv.bits == 2 and snd.bits == 2
    assert message_nbytes(msg) == spec_nbytes(message_spec(cfg, (B, *S), 0, bits=2))
    assert message_nbytes(msg) < spec_nbytes(message_spec(cfg, (B, *S), 0, bits=8))


def test_evaluation_messages_repeat_the_width_and_change_nothing():
    _, snd, rcv = pair(first_visit="zero")
    ids = torch.arange(B)
    send(snd, rcv, torch.randn(B, *S), ids, next_bits=3)
    snd.set_next_bits(2)  # pending for the next training message
    msg, _ = send(snd, rcv, torch.randn(B, *S), ids, training=False)
    assert msg[0][3:5].tolist() == [3, 3] and snd.last_bits == 0
    assert snd.bits == rcv.bits == 3
    msg, _ = send(snd, rcv, torch.randn(B, *S), ids)
    assert msg[0][3:5].tolist() == [3, 2] and rcv.bits == 2


def test_receiver_refuses_a_width_it_did_not_expect():
    _, snd, rcv = pair(first_visit="zero")
    ids = torch.arange(B)
    msg = snd.encode(torch.randn(B, *S), ids)
    msg[0][3] = 4  # the sender claims 4 bits where 8 were announced
    with pytest.raises(RuntimeError, match="bits, next bits"):
        rcv.decode(msg, ids)
    msg[0][3], msg[0][4] = 8, 5  # announces a width outside the ladder
    with pytest.raises(RuntimeError, match=r"widths \(2, 3, 4, 8\)"):
        rcv.decode(msg, ids)


def test_a_fixed_width_direction_keeps_its_three_header_fields():
    cfg = CompressionConfig(mode="aqsgd", quant=QuantConfig(bits=2))
    assert header_fields(cfg) == 3
    assert message_spec(cfg, (B, *S), 0)[0] == ((3 + B,), torch.int64)


@pytest.mark.parametrize(("fields", "match"), [
    ({"widths": (4, 2)}, "distinct and ascending"),
    ({"widths": (2, 9)}, r"widths\[\] must be in 1\.\.8, got 9"),
    ({"bits": 5, "widths": (2, 4)}, "must be one of widths"),
    ({"mode": "none", "widths": (2, 4)}, "codes no rows"),
])
def test_bad_widths_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        CompressionConfig.from_dict({"mode": "aqsgd", "bits": 4, **fields})


def test_set_next_bits_is_for_an_adaptive_sender_and_a_ladder_width():
    _, snd, rcv = pair()
    with pytest.raises(ValueError, match="not one of widths"):
        snd.set_next_bits(5)
    with pytest.raises(RuntimeError, match="sender of an adaptive direction"):
        rcv.set_next_bits(2)


def test_directq_gradients_follow_widths_too():
    cfg = CompressionConfig(mode="directq", quant=QuantConfig(bits=8), widths=(4, 6, 8),
                            warmup_epochs=0)
    snd = make_compressor(cfg, "send", S, N, kind="gradient")
    rcv = make_compressor(cfg, "recv", S, N, kind="gradient")
    x = torch.randn(B, *S)
    ids = torch.arange(B)
    _, y8 = send(snd, rcv, x, ids, next_bits=4)
    _, y4 = send(snd, rcv, x, ids, next_bits=4)
    assert rcv.last_bits == 4
    assert (y4 - x).abs().mean() > (y8 - x).abs().mean()  # fewer bits, coarser
