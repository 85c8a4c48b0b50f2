"""The ``tahquant`` activation mode (aqsgd/compress/modes/tahquant.py): it round-trips
through the pipeline compressors with the bytes its byte rule says, its TahConfig follows
the message's bits and rounding, and a sweep can name it."""

from pathlib import Path

import pytest
import torch

from aqsgd import quant
from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig, message_spec
from aqsgd.compress.modes.tahquant import TahQuant, tah_config
from aqsgd.compress.registry import ACTIVATION_MODES, COMPARISONS
from aqsgd.compress.wire import message_nbytes, spec_nbytes
from aqsgd.quant import QuantConfig
from bench.harness.cells import run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload

L, D = 64, 128  # the tiny preset's boundary


def _pair(cfg, shape=(L, D), num_samples=8):
    return (make_compressor(cfg, "send", shape, num_samples, seed=0),
            make_compressor(cfg, "recv", shape, num_samples, seed=1))


def _send(send, recv, x, ids, training=True):
    spec = recv.wire_spec(tuple(x.shape), ids, training=training)
    msg = send.encode(x, ids, training=training)
    assert [(tuple(t.shape), t.dtype) for t in msg] == [(tuple(s), d) for s, d in spec]
    return recv.decode(msg, ids, training=training), msg


def test_mode_is_registered_with_its_comparison():
    assert ACTIVATION_MODES["tahquant"] is TahQuant
    c = COMPARISONS["tahquant"]
    assert (c.forward, c.backward, c.default_bits) == ("tahquant", "directq", (3, 6))
    assert list(COMPARISONS).index("tahquant") == list(COMPARISONS).index("directq") + 1


@pytest.mark.parametrize("bits,rounding", [(2, "nearest"), (3, "stochastic"), (4, "nearest")])
def test_round_trip_after_warm_up_sends_what_the_byte_rule_says(bits, rounding):
    cfg = CompressionConfig(mode="tahquant", quant=QuantConfig(bits=bits, rounding=rounding),
                            warmup_epochs=1)
    send, recv = _pair(cfg)
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(4, L, D, generator=g) * torch.rand(4, L, 1, generator=g).mul(3).exp()
    ids = torch.arange(4)
    y, msg = _send(send, recv, x, ids)  # warm-up: raw
    assert torch.equal(y, x)
    send.set_epoch(1)
    recv.set_epoch(1)
    y, msg = _send(send, recv, x, ids)
    assert int(msg[0][0]) == TahQuant.wire_format
    assert message_nbytes(msg) == spec_nbytes(message_spec(cfg, x.shape, 0))
    tcfg = tah_config(cfg, D)
    assert message_nbytes(msg[1:]) == quant.tah_wire_nbytes(x.shape, tcfg)
    # the mode's own quantizer, nothing else, stands between x and y
    want = quant.tah_dequantize(quant.TahPacked(*msg[1:]), x.shape, tcfg)
    assert torch.equal(y, want)
    directq = CompressionConfig(mode="directq", quant=QuantConfig(bits=bits))
    dq = quant.dequantize_packed(*quant.quantize_packed(x, directq.quant), x.shape,
                                 directq.quant)
    # token scales over e**3: tiles adapt, DirectQ's per-channel scales cannot
    assert (y - x).norm() < (dq - x).norm()


def test_evaluation_messages_are_raw():
    cfg = CompressionConfig(mode="tahquant", warmup_epochs=0)
    send, recv = _pair(cfg)
    x = torch.randn(2, L, D)
    y, msg = _send(send, recv, x, torch.arange(2), training=False)
    assert torch.equal(y, x) and len(msg) == 2


@pytest.mark.parametrize("width,tile", [(12, 16), (5, 8), (64, 64), (100, 64), (1600, 64)])
def test_tah_config_follows_bits_rounding_and_width(width, tile):
    for bits, low, high in ((1, 1, 2), (3, 2, 4), (8, 7, 8)):
        tcfg = tah_config(CompressionConfig(mode="tahquant",
                                            quant=QuantConfig(bits=bits, rounding="stochastic")),
                          width)
        assert (tcfg.bits, tcfg.min_bits, tcfg.max_bits) == (bits, low, high)
        assert tcfg.tile_size == tile and tcfg.rounding == "stochastic"
        assert tcfg.hadamard and tcfg.pivot_swap


def test_codes_activation_gradients_too():
    cfg = CompressionConfig(mode="tahquant", quant=QuantConfig(bits=6), warmup_epochs=0)
    send = make_compressor(cfg, "send", (L, D), 4, kind="gradient")
    recv = make_compressor(cfg, "recv", (L, D), 4, kind="gradient")
    g = torch.randn(2, L, D) * 1e-3
    y, _ = _send(send, recv, g, torch.arange(2))
    assert float((y - g).norm() / g.norm()) < 0.05


def test_a_sweep_names_it_with_bit_widths():
    spec = parse_mode("tahquant:4/8")
    assert (spec.name, spec.fw_bits, spec.bw_bits) == ("tahquant", 4, 8)
    config = run_config(CellSpec("s", spec, Workload()), Path("/out"))
    assert (config.forward.mode, config.forward.bits) == ("tahquant", 4)
    assert (config.backward.mode, config.backward.bits) == ("directq", 8)
    assert (parse_mode("tahquant").fw_bits, parse_mode("tahquant").bw_bits) == (3, 6)
