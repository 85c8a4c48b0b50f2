"""The ``tahquant-pub`` activation mode (aqsgd/compress/modes/tahquant_pub.py): registered
with its comparison, it round-trips through the pipeline compressors sending its
worst-case buffer, its TahPubConfig follows the message's bits and width, it refuses
stochastic rounding, and a sweep can name it."""

from pathlib import Path

import pytest
import torch

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig, message_spec
from aqsgd.compress.modes.tahquant_pub import TahQuantPub, pub_config
from aqsgd.compress.registry import ACTIVATION_MODES, COMPARISONS
from aqsgd.compress.wire import message_nbytes, spec_nbytes
from aqsgd.quant import QuantConfig, tahpub
from aqsgd.quant.tahpub_config import TahPubPacked, wire_nbytes
from bench.harness.cells import run_config
from bench.harness.modes import parse_mode
from bench.harness.sweep import CellSpec, Workload

L, D = 64, 128  # the tiny preset's boundary


def test_mode_is_registered_beside_tahquant_with_its_comparison():
    assert ACTIVATION_MODES["tahquant-pub"] is TahQuantPub
    c = COMPARISONS["tahquant-pub"]
    assert (c.forward, c.backward, c.default_bits) == ("tahquant-pub", "directq", (4, 8))
    names = list(COMPARISONS)
    assert names.index("tahquant-pub") == names.index("tahquant") + 1
    assert not TahQuantPub.codes_gradients and not TahQuantPub.uses_cache


@pytest.mark.parametrize("bits", [2, 4])
def test_round_trip_after_warm_up_sends_the_worst_case_buffer(bits):
    cfg = CompressionConfig(mode="tahquant-pub", quant=QuantConfig(bits=bits), warmup_epochs=1)
    send = make_compressor(cfg, "send", (L, D), 8, seed=0)
    recv = make_compressor(cfg, "recv", (L, D), 8, seed=1)
    g = torch.Generator().manual_seed(bits)
    x = torch.randn(4, L, D, generator=g) * torch.rand(4, L, 1, generator=g).mul(3).exp()
    ids = torch.arange(4)
    assert torch.equal(recv.decode(send.encode(x, ids), ids), x)  # warm-up: raw
    send.set_epoch(1)
    recv.set_epoch(1)
    msg = send.encode(x, ids)
    assert [(tuple(t.shape), t.dtype) for t in msg] == [
        (tuple(s), d) for s, d in recv.wire_spec(tuple(x.shape), ids)]
    assert int(msg[0][0]) == TahQuantPub.wire_format
    assert message_nbytes(msg) == spec_nbytes(message_spec(cfg, x.shape, 0))
    tcfg = pub_config(cfg, D)
    assert message_nbytes(msg[1:]) == wire_nbytes(x.shape, tcfg)
    y = recv.decode(msg, ids)
    # the mode's own quantizer, nothing else, stands between x and y
    assert torch.equal(y, tahpub.dequantize(TahPubPacked(*msg[1:]), x.shape, tcfg))
    # the asymmetric grid's error at these widths (measured 0.12 and 0.84): 1-bit tokens
    # and 4 levels over a Gaussian's range at 2 bits
    assert float((y - x).norm() / x.norm()) < (0.15 if bits == 4 else 0.9)


def test_bits_an_element_beside_aqsgd_at_the_same_widths():
    # 4 samples of the tiny boundary: high FW, low FW - 1 on 12 of 64 tokens, 39 bits a
    # tile of 64 (fp16 zero point and scale, 1-bit map, room for a 6-bit pivot), 1 a token
    n = 4 * L * D
    for fw, want in ((2, 2.4297), (4, 4.4297)):
        got = spec_nbytes(message_spec(CompressionConfig(
            mode="tahquant-pub", quant=QuantConfig(bits=fw)), (4, L, D), 0)) * 8 / n
        aqsgd = spec_nbytes(message_spec(CompressionConfig(
            mode="aqsgd", quant=QuantConfig(bits=fw)), (4, L, D), 0)) * 8 / n
        assert round(got - (3 + 4) * 64 / n, 4) == want  # less the header: int64 (3 + B,)
        assert aqsgd < got < aqsgd + 0.5


@pytest.mark.parametrize("width,tile", [(12, 16), (5, 8), (64, 64), (100, 64), (1600, 64)])
def test_pub_config_follows_bits_and_width(width, tile):
    for bits, low in ((1, 1), (2, 1), (4, 3), (8, 7)):
        tcfg = pub_config(CompressionConfig(mode="tahquant-pub",
                                            quant=QuantConfig(bits=bits)), width)
        assert (tcfg.high_bits, tcfg.low_bits, tcfg.tile_size) == (bits, low, tile)
        assert tcfg.high_share == 0.8


def test_stochastic_rounding_is_refused_by_name():
    cfg = CompressionConfig(mode="tahquant-pub", quant=QuantConfig(rounding="stochastic"))
    with pytest.raises(ValueError, match=r"rounding must be 'nearest', got 'stochastic'"):
        message_spec(cfg, (4, L, D), 0)


def test_a_sweep_names_it_with_bit_widths():
    spec = parse_mode("tahquant-pub:2/4")
    assert (spec.name, spec.fw_bits, spec.bw_bits, spec.label) == (
        "tahquant-pub", 2, 4, "tahquant-pub-fw2-bw4")
    config = run_config(CellSpec("s", spec, Workload()), Path("/out"))
    assert (config.forward.mode, config.forward.bits) == ("tahquant-pub", 2)
    assert (config.backward.mode, config.backward.bits) == ("directq", 4)
