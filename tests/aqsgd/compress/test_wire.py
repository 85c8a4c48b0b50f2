"""Message sizes on the wire (aqsgd.compress.wire): the paper's example, and the message spec
the performance model uses against a real steady-state message."""

from __future__ import annotations

import math

import pytest
import torch

from aqsgd import quant
from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig, message_spec
from aqsgd.compress.wire import message_nbytes, spec_nbytes
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
