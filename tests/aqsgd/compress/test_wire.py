"""Message sizes on the wire (aqsgd.compress.wire): the paper's example, the message spec
the performance model uses against a real steady-state message, and the length prefix of
a message sized by data."""

from __future__ import annotations

import math

import pytest
import torch

from aqsgd import quant
from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig, message_spec
from aqsgd.compress.wire import (
    DATA_SIZED,
    message_nbytes,
    prefix_spec,
    resolve_spec,
    shape_prefix,
    sized_by_data,
    spec_nbytes,
)
from aqsgd.quant import QuantConfig


def test_paper_message_size_example():
    # the paper's GPT2-XL micro-batch 1 x 1024 x 1600 at 4 bits: 819200 bytes + 1600 scales.
    cfg = CompressionConfig(mode="directq", quant=QuantConfig(bits=4), warmup_epochs=0)
    spec = make_compressor(cfg, "recv", (1024, 1600), 1).wire_spec((1, 1024, 1600), [0])
    sizes = [math.prod(s) * d.itemsize for s, d in spec]
    assert sizes == [8 * 4, 819200, 2 * 1600]
    assert quant.packed_nbytes(1024 * 1600, 4) == 819200


@pytest.mark.parametrize("mode,bits", [("none", 4), ("directq", 2), ("directq", 8),
                                       ("aqsgd", 2), ("aqsgd-lowbits", 3)])
def test_message_spec_is_the_size_of_a_real_steady_state_message(mode, bits):
    shape = (4, 8, 16)
    cfg = CompressionConfig(mode=mode, quant=QuantConfig(bits=bits), warmup_epochs=0)
    send = make_compressor(cfg, "send", shape[1:], 4)
    ids = torch.arange(4)
    x = torch.randn(shape)
    send.encode(x, ids)  # first visit (raw for the aqsgd modes) fills the cache
    msg = send.encode(x, ids)
    n_raw = 4 if mode == "none" else 0
    assert message_nbytes(msg) == spec_nbytes(message_spec(cfg, shape, n_raw))
    assert send.wire_spec(shape, ids) == message_spec(cfg, shape, n_raw)


def test_message_spec_refuses_quantized_rows_for_mode_none():
    with pytest.raises(ValueError, match="mode 'none' sends every row raw"):
        message_spec(CompressionConfig(mode="none"), (4, 8, 16), 0)


def test_a_length_prefix_sizes_the_data_sized_dims_and_checks_the_fixed_ones():
    spec = [((3,), torch.int64), ((DATA_SIZED,), torch.int16), ((2, DATA_SIZED), torch.uint8)]
    assert sized_by_data(spec) and not sized_by_data(spec[:1])
    assert prefix_spec(spec) == ((4,), torch.int64)
    msg = [torch.zeros(3, dtype=torch.int64), torch.zeros(0, dtype=torch.int16),
           torch.zeros(2, 5, dtype=torch.uint8)]
    resolved = resolve_spec(spec, shape_prefix(msg))
    assert resolved == [((3,), torch.int64), ((0,), torch.int16), ((2, 5), torch.uint8)]
    assert spec_nbytes(resolved) == message_nbytes(msg) == 24 + 10
    with pytest.raises(ValueError, match=r"shape \(4,\) where the spec says \(3,\)"):
        resolve_spec(spec, torch.tensor([4, 0, 2, 5]))
    with pytest.raises(ValueError, match="length prefix holds 3 dims, the spec"):
        resolve_spec(spec, torch.tensor([3, 0, 2]))
    with pytest.raises(ValueError, match="known only after encoding"):
        spec_nbytes(spec)


def test_a_fixed_size_mode_expects_what_its_rule_says():
    cfg = CompressionConfig(mode="aqsgd", quant=QuantConfig(bits=2))
    assert message_spec(cfg, (4, 8, 16), 0, expected=True) == message_spec(cfg, (4, 8, 16), 0)
