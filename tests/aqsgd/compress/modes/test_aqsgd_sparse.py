"""aqsgd-sparse: AQ-SGD's deltas sent sparse (aqsgd.compress.modes.aqsgd_sparse): both
caches stay bit-identical, what is left out is what rounds to level 0, the message's size
follows the data, and the size it declares it expects is what the model reads."""

import math

import pytest
import torch

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig, message_spec
from aqsgd.compress.modes.aqsgd_sparse import SparseDelta, expected_kept
from aqsgd.compress.registry import ACTIVATION_MODES, COMPARISONS
from aqsgd.compress.wire import (
    DATA_SIZED,
    message_nbytes,
    prefix_spec,
    resolve_spec,
    shape_prefix,
    spec_nbytes,
)
from aqsgd.quant import QuantConfig

SHAPE = (16, 48)  # (L, D): 768 elements a row, int16 positions


def _pair(bits=2, cache_dtype="fp16"):
    cfg = CompressionConfig(mode="aqsgd-sparse", quant=QuantConfig(bits=bits),
                            warmup_epochs=0, cache_dtype=cache_dtype)
    return cfg, make_compressor(cfg, "send", SHAPE, 8), make_compressor(cfg, "recv", SHAPE, 8)


def test_it_is_registered_sized_by_data_with_directq_backward():
    assert ACTIVATION_MODES["aqsgd-sparse"] is SparseDelta and SparseDelta.sized_by_data
    c = COMPARISONS["aqsgd-sparse"]
    assert (c.forward, c.backward, c.default_bits) == ("aqsgd-sparse", "directq", (2, 4))
    names = list(COMPARISONS)
    assert names.index("aqsgd-lowbits") < names.index("aqsgd-sparse") < names.index("aqsgd+gc")


@pytest.mark.parametrize("cache_dtype", ["fp16", "fp32"])
def test_both_caches_stay_bit_identical_and_sizes_follow_the_data(cache_dtype):
    cfg, send, recv = _pair(cache_dtype=cache_dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, *SHAPE, generator=gen)
    ids = torch.tensor([1, 4, 6, 7])
    sizes = []
    for drift in (0.0, 0.01, 0.3, 0.01):  # first visit coded against a zero cache
        x = x + drift * torch.randn(x.shape, generator=gen)
        spec = recv.wire_spec((4, *SHAPE), ids)
        msg = send.encode(x[ids], ids)
        assert resolve_spec(spec, shape_prefix(msg)) == [(tuple(t.shape), t.dtype) for t in msg]
        recv.decode(msg, ids)
        sent, got = (c.cache.gather_checked(ids, None) for c in (send, recv))
        assert torch.equal(sent, got)
        sizes.append(message_nbytes(msg))
    assert len(set(sizes)) == len(sizes)  # same shapes, four sizes


def test_a_change_in_few_entries_sends_those_entries():
    mode = SparseDelta(CompressionConfig(mode="aqsgd-sparse", quant=QuantConfig(bits=2)))
    m = torch.zeros(3, *SHAPE)
    rows = 0.01 * torch.randn(3, *SHAPE)
    rows[:, 2, :5] = 10.0  # five entries a row change a lot
    counts, pos, _, _ = mode.encode(rows, None, m)
    assert counts.tolist() == [5, 5, 5] and pos.tolist() == [96, 97, 98, 99, 100] * 3


def test_what_is_left_out_rounds_to_level_zero_and_what_is_sent_is_within_half_a_level():
    bits = 3
    cfg = CompressionConfig(mode="aqsgd-sparse", quant=QuantConfig(bits=bits))
    mode = SparseDelta(cfg)
    gen = torch.Generator().manual_seed(1)
    rows = torch.randn(5, *SHAPE, generator=gen)
    m = torch.randn(5, *SHAPE, generator=gen)
    delta = (rows - m).reshape(5, -1)
    counts, pos, codes, scale = mode.encode(rows, None, m0 := m.clone())
    step = scale.float().unsqueeze(1) / 3  # L = 2**(bits-1) - 1
    sent = (m0 - m).reshape(5, -1)  # what the sender's cache gained
    assert float(((delta - sent).abs() - step / 2).max()) <= 1e-5 * float(step.max())
    kept = sent != 0
    assert torch.equal(kept.sum(1).int(), counts) and pos.dtype == torch.int16
    assert torch.equal(kept, delta.abs() > step / 2)
    assert codes.numel() == math.ceil(pos.numel() * bits / 8)
    back = m.clone()
    mode.decode([counts, pos, codes, scale], tuple(rows.shape), back)
    assert torch.equal(back, m0)


def test_an_unchanged_activation_sends_no_entry():
    cfg, send, recv = _pair()
    ids = torch.arange(4)
    x = torch.randn(4, *SHAPE)
    recv.decode(send.encode(x, ids), ids)
    y = x.to(torch.float16).float()  # what the fp16 caches hold: the delta is 0
    msg = send.encode(y, ids)
    assert [t.numel() for t in msg[1:3]] == [4, 0] and int(msg[1].sum()) == 0
    assert torch.equal(recv.decode(msg, ids), y)


def test_expected_size_fills_the_data_sized_dims_and_counts_the_prefix():
    cfg = CompressionConfig(mode="aqsgd-sparse", quant=QuantConfig(bits=2))
    shape = (4, *SHAPE)
    spec = message_spec(cfg, shape, 0)
    assert [s for s, _ in spec][1:3] == [(4,), (DATA_SIZED,)]
    with pytest.raises(ValueError, match="known only after encoding"):
        spec_nbytes(spec)
    kept = round(4 * 768 * expected_kept(2))
    expected = message_spec(cfg, shape, 0, expected=True)
    assert expected[0] == prefix_spec(spec) and expected[3][0] == (kept,)
    assert spec_nbytes(expected) == 8 * 5 + 8 * 7 + 4 * 4 + 2 * kept + math.ceil(kept / 4) + 8
    assert 0.11 < expected_kept(2) < 0.13 and expected_kept(8) > 0.98


def test_one_bit_and_adaptive_widths_are_refused():
    with pytest.raises(ValueError, match="at least 2 bits"):
        make_compressor(CompressionConfig(mode="aqsgd-sparse", quant=QuantConfig(bits=1)),
                        "send", SHAPE, 4)
    with pytest.raises(ValueError, match="sized by data"):
        CompressionConfig(mode="aqsgd-sparse", quant=QuantConfig(bits=2), widths=(2, 4))
