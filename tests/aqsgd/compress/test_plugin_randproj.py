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


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_randproj_round_trips_with_the_bytes_its_rule_says(randproj, bits):
    cfg = CompressionConfig(mode="randproj", quant=QuantConfig(bits=bits), warmup_epochs=1)
    send = make_compressor(cfg, "send", SHAPE, 8, seed=0)
    recv = make_compressor(cfg, "recv", SHAPE, 8, seed=1)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(8, *SHAPE, generator=gen)
    for epoch, ids in ((0, [0, 1, 2, 3]), (1, [2, 3, 4, 5]), (1, [0, 1, 2, 3])):
        send.set_epoch(epoch)
        recv.set_epoch(epoch)
        ids = torch.tensor(ids)
        x = base[ids] + 0.05 * torch.randn(len(ids), *SHAPE, generator=gen)
        msg = send.encode(x, ids)
        assert [(tuple(t.shape), t.dtype) for t in msg] == [
            (tuple(s), d) for s, d in recv.wire_spec(tuple(x.shape), ids)]
        n_raw = int(msg[0][2])
        y = recv.decode(msg, ids)
        assert message_nbytes(msg) == spec_nbytes(message_spec(cfg, x.shape, n_raw))
        assert torch.equal(send.cache.gather(ids), recv.cache.gather(ids))
        # the change outside span(Q) is lost: at most the drift, 0.05 x N(0, 1) a value
        assert float((y - x).abs().max()) < 0.5
    assert n_raw == steady_raw_rows(cfg, len(ids)) == 0
    k = math.ceil(SHAPE[1] * bits / 16)
    assert message_nbytes(msg[1:]) == 4 * SHAPE[0] * k * 2  # (n, L, k) fp16
    send.close()
    recv.close()


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
