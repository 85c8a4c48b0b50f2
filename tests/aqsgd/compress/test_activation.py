"""Pipeline compressors (aqsgd.compress.activation): cache agreement, AQ-SGD vs DirectQ error,
exact message sizes."""

import math

import pytest
import torch

from aqsgd import quant
from aqsgd.compress.activation import make_compressor
from aqsgd.compress.message import CompressionConfig
from aqsgd.compress.wire import message_nbytes
from aqsgd.quant import QuantConfig

L, D = 6, 16  # one sample's activation (L, D); small so that every case runs in ms


def _pair(cfg, num_samples=12, seed=0, shape=(L, D)):
    send = make_compressor(cfg, "send", shape, num_samples, seed=seed)
    recv = make_compressor(cfg, "recv", shape, num_samples, seed=seed + 1)
    return send, recv


def _transfer(send, recv, x, ids, training=True):
    """One message as the pipeline does it: receiver sizes buffers from wire_spec first."""
    spec = recv.wire_spec(tuple(x.shape), ids, training=training)
    msg = send.encode(x, ids, training=training)
    assert [(tuple(t.shape), t.dtype) for t in msg] == [(tuple(s), d) for s, d in spec]
    buffers = [torch.empty(s, dtype=d) for s, d in spec]
    for buf, t in zip(buffers, msg, strict=True):
        buf.copy_(t)
    return recv.decode(buffers, ids, training=training), msg


def _storage(cache):
    if cache._values is not None:
        return [cache._values]
    return [cache._codes, cache._scales]


@pytest.mark.parametrize(
    "overrides",
    [
        {"mode": "aqsgd"},
        {"mode": "aqsgd", "cache_dtype": "fp32", "bits": 2, "rounding": "stochastic"},
        {"mode": "aqsgd", "first_visit": "zero", "warmup_epochs": 0, "granularity": "token"},
        {"mode": "aqsgd-lowbits", "cache_bits": 3, "bits": 3, "grid": "symmetric"},
        {"mode": "aqsgd-lowbits", "cache_bits": 1, "bits": 8, "granularity": "group",
         "group_size": 32, "dtype": "bf16"},
        {"mode": "aqsgd", "cache_storage": "mmap"},
    ],
)
def test_sender_and_receiver_caches_stay_bit_identical(tmp_path, overrides):
    if overrides.get("cache_storage") == "mmap":
        overrides = {**overrides, "cache_dir": str(tmp_path)}
    cfg = CompressionConfig.from_dict(overrides)
    n = 12
    send, recv = _pair(cfg, n)
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(n, L, D, generator=gen)
    for epoch in range(4):
        send.set_epoch(epoch)
        recv.set_epoch(epoch)
        # Epoch 0 visits only 7 samples, so later micro-batches mix fresh and known rows.
        order = torch.randperm(n, generator=gen)[: 7 if epoch == 0 else n]
        for ids in order.split(3):
            x = base[ids] + 0.05 * torch.randn(len(ids), L, D, generator=gen)
            y, _ = _transfer(send, recv, x, ids)
            assert y.shape == x.shape and y.dtype == torch.float32
            assert torch.equal(send.cache.initialised, recv.cache.initialised)
        for a, b in zip(_storage(send.cache), _storage(recv.cache), strict=True):
            assert torch.equal(a, b), f"caches differ after epoch {epoch}"
    assert bool(send.cache.initialised.all())
    send.close()
    recv.close()


def test_first_visit_raw_sends_new_samples_uncompressed_in_a_mixed_batch():
    cfg = CompressionConfig(mode="aqsgd", quant=QuantConfig(bits=2), warmup_epochs=0,
                            cache_dtype="fp32")
    send, recv = _pair(cfg)
    x = torch.randn(3, L, D)
    _transfer(send, recv, x[:1] + 0.3 * torch.randn(1, L, D), [5])  # sample 5 now initialised
    y, msg = _transfer(send, recv, x, torch.tensor([5, 2, 9]))
    assert msg[0].tolist() == [3, 0, 2, 5, 2, 9]  # delta format, epoch 0, 2 raw rows, ids
    assert torch.equal(y[1:], x[1:])  # raw rows arrive exactly (fp32 transport)
    assert not torch.equal(y[0], x[0])  # the known sample went through 2-bit deltas


def test_aqsgd_error_vanishes_when_activations_stop_changing_directq_does_not():
    x = torch.randn(2, L, D)
    ids = torch.tensor([0, 1])
    errors = {}
    for mode in ("aqsgd", "directq"):
        cfg = CompressionConfig(mode=mode, quant=QuantConfig(bits=3), warmup_epochs=0,
                                first_visit="zero", cache_dtype="fp32")
        send, recv = _pair(cfg, num_samples=2)
        errs = []
        for epoch in range(12):
            send.set_epoch(epoch)
            recv.set_epoch(epoch)
            y, _ = _transfer(send, recv, x, ids)
            errs.append(float((y - x).abs().max()))
        errors[mode] = errs
    aq, dq = errors["aqsgd"], errors["directq"]
    assert aq[0] == pytest.approx(dq[0])  # zero cache: the first visit is a direct quantization
    assert aq[-1] < 1e-5 * aq[0]
    assert all(a <= b * 1.0001 for a, b in zip(aq[1:], aq[:-1], strict=False))
    assert max(dq) == min(dq) and dq[0] > 0.01  # DirectQ repeats the same error every time


def test_evaluation_messages_are_raw_and_leave_the_cache_alone():
    cfg = CompressionConfig(mode="aqsgd", warmup_epochs=0)
    send, recv = _pair(cfg, num_samples=4)
    x = torch.randn(2, L, D)
    y, msg = _transfer(send, recv, x, torch.tensor([100, 101]), training=False)
    assert torch.equal(y, x) and len(msg) == 2
    assert not bool(send.cache.initialised.any() or recv.cache.initialised.any())


def _closed_form_nbytes(cfg, b, n_raw):
    """Bytes of one message from the wire format in aqsgd.compress.message's docstring."""
    header = 8 * (3 + b)
    itemsize = {"fp32": 4, "fp16": 2, "bf16": 2}[cfg.dtype]
    raw = n_raw * L * D * itemsize
    n_q = b - n_raw
    if n_q == 0:
        return header + raw
    codes = math.ceil(n_q * L * D * cfg.bits / 8)
    n_scales = {"channel": D, "token": n_q * L, "group": n_q * L * D // cfg.quant.group_size}
    return header + raw + codes + 2 * n_scales[cfg.quant.granularity]


@pytest.mark.parametrize("granularity", ["channel", "token", "group"])
@pytest.mark.parametrize("mode", ["none", "directq", "aqsgd", "aqsgd-lowbits"])
def test_message_sizes_match_the_closed_form_for_every_bit_width(mode, granularity):
    b = 3
    for bits in range(1, 9):
        for dtype in ("fp32", "fp16", "bf16"):
            cfg = CompressionConfig(mode=mode,
                                    quant=QuantConfig(bits=bits, granularity=granularity,
                                                      group_size=8),
                                    dtype=dtype, warmup_epochs=1, cache_bits=bits)
            send, recv = _pair(cfg, num_samples=8)
            x = torch.randn(b, L, D)
            _, msg = _transfer(send, recv, x, torch.tensor([0, 1, 2]))  # warm-up: raw
            assert message_nbytes(msg) == _closed_form_nbytes(cfg, b, n_raw=b)
            send.set_epoch(1)
            recv.set_epoch(1)
            _, msg = _transfer(send, recv, x, torch.tensor([1, 4, 2]))  # sample 4 is new
            n_raw = {"none": 3, "directq": 0}.get(mode, 1)
            assert message_nbytes(msg) == _closed_form_nbytes(cfg, b, n_raw), (bits, dtype)


def test_gradient_compressor_warms_up_then_quantizes_directly():
    cfg = CompressionConfig(mode="directq", quant=QuantConfig(bits=8), warmup_epochs=1)
    send = make_compressor(cfg, "send", (L, D), 4, kind="gradient")
    recv = make_compressor(cfg, "recv", (L, D), 4, kind="gradient", out_dtype=torch.bfloat16)
    g = torch.randn(2, L, D)
    y, msg = _transfer(send, recv, g, [0, 1])
    assert y.dtype == torch.bfloat16 and len(msg) == 2
    send.set_epoch(1)
    recv.set_epoch(1)
    y, msg = _transfer(send, recv, g, [0, 1])
    assert [t.dtype for t in msg] == [torch.int64, torch.uint8, torch.float16]
    assert float((y.float() - g).abs().max()) < 0.05 * float(g.abs().max())


def test_receiver_rejects_a_message_for_other_samples_or_epoch():
    cfg = CompressionConfig(mode="aqsgd", warmup_epochs=0)
    send, recv = _pair(cfg)
    x = torch.randn(2, L, D)
    msg = send.encode(x, [1, 2])
    with pytest.raises(RuntimeError, match="header disagrees"):
        recv.decode(msg, [1, 3])
    recv.set_epoch(3)
    with pytest.raises(RuntimeError, match="header disagrees"):
        recv.decode(msg, [1, 2])
    with pytest.raises(RuntimeError, match="'send' compressor"):
        send.decode(msg, [1, 2])


@pytest.mark.parametrize(
    "overrides, error, match",
    [
        ({"mode": "aqsgd2"}, ValueError, r"mode must be one of .* got 'aqsgd2'"),
        ({"bits": 0}, ValueError, r"bits must be in 1\.\.8, got 0"),
        ({"bits": 9}, ValueError, r"bits must be in 1\.\.8, got 9"),
        ({"cache_bits": 12}, ValueError, r"cache_bits must be in 1\.\.8, got 12"),
        ({"dtype": "fp8"}, ValueError, r"dtype must be one of .* got 'fp8'"),
        ({"first_visit": "skip"}, ValueError, "first_visit"),
        ({"warmup_epochs": -1}, ValueError, "warmup_epochs"),
        ({"mode": "aqsgd", "cache_storage": "mmap"}, ValueError, "cache_dir is required"),
    ],
)
def test_bad_config_fails_at_construction(overrides, error, match):
    with pytest.raises(error, match=match):
        CompressionConfig.from_dict(overrides)


def test_bad_setup_fails_before_any_step():
    with pytest.raises(ValueError, match="gradient compressors support modes"):
        make_compressor(CompressionConfig(mode="aqsgd"), "send", (L, D), 4, kind="gradient")
    with pytest.raises(ValueError, match="role must be"):
        make_compressor(CompressionConfig(), "sender", (L, D), 4)
    with pytest.raises(ValueError, match="group_size=7 must divide"):
        make_compressor(CompressionConfig(mode="directq",
                                          quant=QuantConfig(granularity="group", group_size=7)),
                        "send", (L, D), 4)
    send = make_compressor(CompressionConfig(mode="aqsgd"), "send", (L, D), 4)
    with pytest.raises(IndexError, match=r"sample id 4 .*capacity 4"):
        send.wire_spec((2, L, D), [3, 4])
    with pytest.raises(ValueError, match="sample_shape"):
        send.encode(torch.zeros(1, L, D + 1), [0])


@pytest.mark.parametrize("cache_dtype", ["fp16", "fp32"])
def test_delta_messages_match_quant_on_a_cache_of_the_stored_dtype(cache_dtype):
    # The compressor may work on a wider copy of m; the wire, the stage input and both
    # caches must still equal quant.aqsgd_encode/decode run on m in the stored dtype.
    cfg = CompressionConfig(mode="aqsgd", quant=QuantConfig(bits=2), cache_dtype=cache_dtype)
    send, recv = _pair(cfg)
    gen = torch.Generator().manual_seed(3)
    ids = torch.tensor([7, 2, 9, 4])
    x0, x1 = (torch.randn(4, L, D, generator=gen) for _ in range(2))
    _transfer(send, recv, x0, ids)  # epoch 0 is warm-up: the caches hold x0
    send.set_epoch(1)
    recv.set_epoch(1)
    out, msg = _transfer(send, recv, x1, ids)
    stored = {"fp16": torch.float16, "fp32": torch.float32}[cache_dtype]
    m_send, m_recv = x0.to(stored).clone(), x0.to(stored).clone()
    packed, scales = quant.aqsgd_encode(x1, m_send, cfg.quant)
    quant.aqsgd_decode(packed, scales, m_recv, cfg.quant)
    assert torch.equal(msg[1], packed) and torch.equal(msg[2], scales)
    assert torch.equal(out, m_recv.float())
    assert torch.equal(send.cache._values[ids], m_send)
    assert torch.equal(recv.cache._values[ids], m_recv)
