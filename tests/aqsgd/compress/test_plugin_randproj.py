"""The example plug-in examples/plugins/randproj.py (a random projection of activation
deltas): it loads, round-trips through the suite's compressor with the bytes its rule
says, both caches stay equal, and a change inside span(Q) arrives exactly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig, message_spec, steady_raw_rows
from aqsgd.compress.registry import load_plugins, unload_plugins
from aqsgd.compress.wire import message_nbytes, spec_nbytes
from aqsgd.quant import QuantConfig

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plugins" / "randproj.py"
SHAPE = (5, 48)  # (L, D): irregular; 4 bits: k = 12 fp16 values per token


@pytest.fixture(scope="module")
def randproj():
    plugins = load_plugins([str(EXAMPLE)])
    import randproj  # the plug-in's module, as loaded (by its file's stem)
    yield randproj
    unload_plugins(plugins)


# (epoch, sample ids) of three messages: a warm-up visit (raw), then samples 4 and 5 seen
# for the first time (raw rows beside coded ones), then a steady message (all coded)
VISITS = ((0, (0, 1, 2, 3)), (1, (2, 3, 4, 5)), (1, (0, 1, 2, 3)))


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_randproj_round_trips_with_the_bytes_its_rule_says(randproj, bits):
    cfg = CompressionConfig(mode="randproj", quant=QuantConfig(bits=bits), warmup_epochs=1)
    pair = [make_compressor(cfg, role, SHAPE, 8, seed=0) for role in ("send", "recv")]
    drift = torch.Generator().manual_seed(0)
    samples = torch.randn(8, *SHAPE, generator=drift)  # (N, L, D)
    for epoch, visit in VISITS:
        for c in pair:
            c.set_epoch(epoch)
        ids = torch.tensor(visit)
        x = samples[ids] + 0.05 * torch.randn(len(visit), *SHAPE, generator=drift)
        msg = pair[0].encode(x, ids)
        spec = pair[1].wire_spec(tuple(x.shape), ids)
        assert [(tuple(t.shape), t.dtype) for t in msg] == [(tuple(s), d) for s, d in spec]
        out = pair[1].decode(msg, ids)
        assert message_nbytes(msg) == spec_nbytes(message_spec(cfg, x.shape, int(msg[0][2])))
        assert torch.equal(pair[0].cache.gather(ids), pair[1].cache.gather(ids))
        # the change outside span(Q) is lost: at most the drift, 0.05 x N(0, 1) a value
        assert float((out - x).abs().max()) < 0.5
    assert int(msg[0][2]) == steady_raw_rows(cfg, 4) == 0
    k = math.ceil(SHAPE[1] * bits / 16)
    assert message_nbytes(msg[1:]) == 4 * SHAPE[0] * k * 2  # (n, L, k) fp16
    for c in pair:
        c.close()


def test_a_change_inside_the_basis_arrives_exactly_and_the_basis_is_orthonormal(randproj):
    q = randproj.basis(48, 12, torch.device("cpu"))
    assert torch.allclose(q.T @ q, torch.eye(12), atol=1e-5)
    assert torch.equal(q, randproj.basis(48, 12, torch.device("cpu")))
    mode = randproj.RandomProjection(CompressionConfig(mode="randproj",
                                                       quant=QuantConfig(bits=4)))
    m_send, m_recv = torch.zeros(2, 5, 48), torch.zeros(2, 5, 48)
    x = torch.randn(2, 5, 12) @ q.T  # (2, 5, 48) inside span(Q)
    coded = mode.encode(x, None, m_send)
    out = mode.decode(coded, (2, 5, 48), m_recv)
    assert torch.allclose(out, x, atol=1e-2) and torch.equal(m_send, m_recv)
