"""aqsgd.quant (its torch path, aqsgd.quant.cpu) against aqsgd.quant.reference, the
plain-torch reference of the contract in docs/architecture/quant.md "Quantizer", bit for bit;
the reference itself against a worked example, pinned hash values and numpy's bit
packing; plus error bounds, unbiasedness and the AQ-SGD cache invariant (arguments and
dispatch: test_quant_api.py). Budget: about 30 s on a loaded 2-core machine."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from quant_helpers import DTYPES, GROUPS, PAPERISH, SMALL, sample, seed_of

from aqsgd import quant
from aqsgd.quant import QuantConfig, bitpack, cpu, reference


def check_against_reference(x: torch.Tensor, cfg: QuantConfig, gen_seed: int = 7) -> None:
    """The torch path's scales, packed codes and dequantized values against the reference."""
    shape = tuple(x.shape)
    gen = torch.Generator().manual_seed(gen_seed) if cfg.rounding == "stochastic" else None
    seed = seed_of(gen_seed) if gen is not None else 0
    packed, scales = quant.quantize_packed(x, cfg, generator=gen, backend="torch")
    want_s = reference.compute_scales(x, cfg).numpy().reshape(-1)
    got_s = scales.numpy().reshape(-1)
    if cfg.scale_method == "maxabs":
        np.testing.assert_array_equal(got_s.view(np.uint16), want_s.view(np.uint16))
    else:  # summation order is free: one fp16 ulp (docs/architecture/quant.md)
        ulps = np.abs(got_s.view(np.int16).astype(np.int32) - want_s.view(np.int16))
        assert ulps.max() <= 1, f"l2 scales differ by {ulps.max()} fp16 ulps"
    want_codes = reference.quantize(x, scales, cfg, seed)  # under the path's own scales
    codes = bitpack.unpack(packed, cfg.bits, x.numel()).numpy()
    mismatch = np.flatnonzero(codes != want_codes.numpy().reshape(-1))
    assert mismatch.size == 0, f"{mismatch.size} codes differ, first at {mismatch[:5]}"
    np.testing.assert_array_equal(packed.numpy(), reference.pack(want_codes, cfg.bits).numpy())
    values = quant.dequantize_packed(packed, scales, shape, cfg, backend="torch")
    want_v = reference.dequantize(want_codes, scales, cfg)
    np.testing.assert_array_equal(values.numpy().view(np.uint32), want_v.numpy().view(np.uint32))


# ---------------------------------------------------------------------------
# The reference itself: a worked example, pinned hash values, numpy's bit packing
# ---------------------------------------------------------------------------


def test_reference_worked_example():
    """2 bits, channel max-abs, reference grid (Q = 2), by hand. Channel 0: s = fp16(1.0 *
    (1 + 2**-10)) = 1 + 2**-10; 1.0 -> floor(1.998 + 0.5) = 2, clipped to Q - 1 = 1, code
    3; 0.25 -> floor(0.4995 + 0.5) = 0, code 2. Channel 1: s = 0.5 * (1 + 2**-10); -0.5 ->
    floor(-1.998 + 0.5) = -2, code 0; 0.0 -> code 2. Codes 3, 0, 2, 2 (flat order) pack
    low bits first: 3 | 0 << 2 | 2 << 4 | 2 << 6 = 163."""
    x = torch.tensor([[1.0, -0.5], [0.25, 0.0]])
    cfg = QuantConfig(bits=2)
    packed, scales = reference.quantize_packed(x, cfg)
    s0, s1 = 1 + 2**-10, 0.5 * (1 + 2**-10)
    assert scales.dtype == torch.float16 and scales.tolist() == [s0, s1]
    assert reference.quantize(x, scales, cfg).reshape(-1).tolist() == [3, 0, 2, 2]
    assert packed.tolist() == [163]
    values = reference.dequantize_packed(packed, scales, x.shape, cfg)
    assert values.tolist() == [[1 * s0 / 2, -2 * s1 / 2], [0.0, 0.0]]


def test_reference_uniform_pinned_values():
    """u = top 24 bits of lowbias32(index ^ (seed * 0x9E3779B9 mod 2**32)): values worked
    out once with numpy uint32 arithmetic, straight from the contract."""
    assert (reference.uniform(12345, 4) * 2**24).tolist() == [15367667, 2999826, 15517735,
                                                              11483344]
    assert (reference.uniform(0, 4) * 2**24).tolist() == [0, 6850960, 13701921, 5501417]


@pytest.mark.parametrize("bits", range(1, 9))
def test_reference_pack_is_numpy_little_endian_packbits(bits):
    """An independent route to the stream layout: each code spread into its bits, low bit
    first, then numpy's little-endian packbits."""
    g = torch.Generator().manual_seed(bits)
    codes = torch.randint(0, 2**bits, (1001,), generator=g, dtype=torch.uint8)
    bit = (codes.numpy().astype(np.uint32)[:, None] >> np.arange(bits, dtype=np.uint32)) & 1
    want = np.packbits(bit.astype(np.uint8).reshape(-1), bitorder="little")
    np.testing.assert_array_equal(reference.pack(codes, bits).numpy(), want)


# ---------------------------------------------------------------------------
# Bit-exactness
# ---------------------------------------------------------------------------

GRID = list(itertools.product(range(1, 9), quant.GRANULARITIES, quant.GRIDS, quant.ROUNDINGS))


@pytest.mark.parametrize("bits,granularity,grid,rounding", GRID)
def test_codes_bit_exact_small(bits, granularity, grid, rounding):
    cfg = QuantConfig(bits=bits, granularity=granularity, group_size=GROUPS[SMALL], grid=grid,
                      rounding=rounding)
    check_against_reference(sample(SMALL, seed=bits), cfg)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fields", [
    dict(bits=4), dict(bits=3, granularity="token", scale_method="l2"),
    dict(bits=2, granularity="group", rounding="stochastic", grid="symmetric"),
    dict(bits=8, scale_method="l2", grid="symmetric"),
], ids=str)
def test_codes_bit_exact_dtypes_and_l2(dtype, fields):
    cfg = QuantConfig(group_size=GROUPS[SMALL], **fields)
    check_against_reference(sample(SMALL, dtype, seed=3), cfg)


@pytest.mark.parametrize("fields", [
    dict(bits=4), dict(bits=3, granularity="group", rounding="stochastic"),
    dict(bits=5, granularity="token", grid="symmetric"),
], ids=str)
def test_codes_bit_exact_paper_like_shape(fields):
    cfg = QuantConfig(group_size=GROUPS[PAPERISH], **fields)
    check_against_reference(sample(PAPERISH, torch.bfloat16, seed=5), cfg)


@pytest.mark.parametrize("fields", [
    dict(bits=3), dict(bits=5, granularity="token", rounding="stochastic"),
    dict(bits=2, granularity="group", grid="symmetric"), dict(bits=7, scale_method="l2"),
], ids=str)
def test_small_chunks_give_the_same_bytes(monkeypatch, fields):
    """The CPU path works in chunks of rows packed separately; with tiny chunks (37 rows
    of 37 or 50 elements, aligned to whole octets) every boundary case is exercised."""
    cfg = QuantConfig(group_size=GROUPS[SMALL], **fields)
    x = sample((2, 37, 37), seed=12) if cfg.granularity != "group" else sample(SMALL, seed=12)
    m0 = sample(x.shape, seed=13)
    gen = (lambda: torch.Generator().manual_seed(5)) if cfg.stochastic else (lambda: None)
    whole = quant.quantize_packed(x, cfg, generator=gen())
    m_whole = m0.clone()
    enc_whole = quant.aqsgd_encode(x, m_whole, cfg, generator=gen())
    monkeypatch.setattr(cpu, "CHUNK_ELEMENTS", 100)
    check_against_reference(x, cfg, gen_seed=5)
    chunked = quant.quantize_packed(x, cfg, generator=gen())
    m_chunked = m0.clone()
    enc_chunked = quant.aqsgd_encode(x, m_chunked, cfg, generator=gen())
    assert torch.equal(whole[0], chunked[0]) and torch.equal(enc_whole[0], enc_chunked[0])
    assert torch.equal(m_whole, m_chunked)
    r = m0.clone()
    quant.aqsgd_decode(*enc_chunked, r, cfg)
    assert torch.equal(r, m_chunked)


def test_extreme_values_scale_saturates_and_tiny_scales():
    x = sample(SMALL, seed=9)
    x[0, 0, 3] = 1e6  # max-abs above fp16 range: scale saturates at 65504, codes clip
    x[..., 4] *= 1e-9  # fp16-subnormal and zero scales
    for grid in quant.GRIDS:
        check_against_reference(x, QuantConfig(bits=3, grid=grid))
        values = quant.dequantize_packed(*quant.quantize_packed(x, QuantConfig(grid=grid)),
                                         SMALL, QuantConfig(grid=grid))
        assert torch.isfinite(values).all()


@pytest.mark.parametrize("bits", [1, 2, 4, 6, 7])
def test_integer_clamp_path_matches_reference_at_its_edges(bits):
    """Max-abs scales that bound the levels take the integer-clamp path; underflowed (zero)
    and fp16-subnormal scales keep it or fall back, and both sides agree with the reference,
    under both roundings (floor(t + u) may reach Q + 1 before the clamp)."""
    x = sample(SMALL, seed=20 + bits)
    x[..., 4] *= 1e-9  # scale underflows to 0: inv = 0
    x[..., 6] = x[..., 6].abs()  # max |v| positive: t reaches Q, clipped to Q - 1
    subnormal = x.clone()
    subnormal[..., 5] *= 1e-5  # fp16-subnormal scale, may round below max |v|: fallback
    calls = []
    store = cpu._store_int_codes
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu, "INT_CLAMP_MIN_ELEMENTS", 0)  # SMALL is below the size that uses it
        mp.setattr(cpu, "_store_int_codes", lambda *a: calls.append(1) or store(*a))
        for grid, rounding in itertools.product(quant.GRIDS, quant.ROUNDINGS):
            cfg = QuantConfig(bits=bits, grid=grid, rounding=rounding)
            check_against_reference(x, cfg)
            check_against_reference(subnormal, cfg)
    assert calls, "the integer-clamp path was never taken"


@pytest.mark.parametrize("bits", range(1, 9))
def test_chunk_packing_and_byte_tables_match_pack(bits):
    """bitpack.pack_into (the CPU path's per-chunk packer) and byte_table (its unpacker)
    against pack/unpack, including tails that end mid-byte."""
    g = torch.Generator().manual_seed(40 + bits)
    for n in (1, 7, 8, 9, 100, 4099):
        codes = torch.randint(0, 2**bits, (n,), generator=g, dtype=torch.uint8)
        buf = torch.zeros(bitpack.padded_bytes(n), dtype=torch.uint8)
        buf[:n] = codes
        out = torch.empty(bitpack.packed_nbytes(n, bits), dtype=torch.uint8)
        bitpack.pack_into(buf, n, bits, out)
        packed = bitpack.pack(codes, bits)
        assert torch.equal(out, packed)
        if bits in bitpack.BYTE_WIDTHS:
            for offset in (0, 2 ** (bits - 1)):
                table = bitpack.byte_table(bits, offset, "cpu")
                lanes = torch.index_select(table, 0, packed.int()).view(torch.uint8)[:n]
                assert torch.equal(lanes, codes - offset)  # uint8: mod 256


def test_zero_group_encodes_zero_code_and_decodes_to_zero():
    x = torch.zeros(4, 16)
    for grid, bits in itertools.product(quant.GRIDS, (1, 4, 8)):
        cfg = QuantConfig(bits=bits, grid=grid)
        packed, scales = quant.quantize_packed(x, cfg)
        assert (scales == 0).all()
        codes = bitpack.unpack(packed, bits, x.numel())
        assert (codes == 2 ** (bits - 1)).all()  # Q on both grids: floor(L/2 + 0.5) = Q
        assert (quant.dequantize_packed(packed, scales, x.shape, cfg) == 0).all()


def test_non_contiguous_input_uses_logical_order():
    x = sample((50, 37), seed=2).t()  # (37, 50) view, not contiguous
    cfg = QuantConfig(bits=5)
    got = quant.quantize_packed(x, cfg)
    want = quant.quantize_packed(x.contiguous(), cfg)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("out_dtype", DTYPES, ids=str)
def test_dequantize_dtype_is_one_rounding_of_fp32(out_dtype):
    x = sample(SMALL, seed=4)
    cfg = QuantConfig(bits=3, granularity="token", grid="symmetric")
    packed, scales = quant.quantize_packed(x, cfg)
    fp32 = quant.dequantize_packed(packed, scales, SMALL, cfg)
    got = quant.dequantize_packed(packed, scales, SMALL, cfg, dtype=out_dtype)
    assert got.dtype == out_dtype and torch.equal(got, fp32.to(out_dtype))
    codes = bitpack.unpack(packed, cfg.bits, x.numel()).view(SMALL)
    assert torch.equal(reference.dequantize(codes, scales, cfg, dtype=out_dtype), got)


# ---------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_matches_reference_and_round_trips(bits):
    g = torch.Generator().manual_seed(bits)
    for n in (1, 5, 8, 13, 64, 999, 4096 + 3):
        codes = torch.randint(0, 2**bits, (n,), generator=g, dtype=torch.uint8)
        packed = bitpack.pack(codes, bits)
        assert packed.dtype == torch.uint8 and packed.numel() == quant.packed_nbytes(n, bits)
        np.testing.assert_array_equal(packed.numpy(), reference.pack(codes, bits).numpy())
        assert torch.equal(bitpack.unpack(packed, bits, n), codes)
        assert torch.equal(reference.unpack(packed, bits, n), codes)
    all_ones = bitpack.pack(torch.full((3,), 2**bits - 1, dtype=torch.uint8), bits)
    assert int(all_ones[-1]) >> ((3 * bits - 1) % 8 + 1) == 0, "padding bits must be zero"


def test_pack_rejects_codes_too_wide():
    with pytest.raises(ValueError, match="codes must be < 2\\*\\*bits = 8, got max 8"):
        bitpack.pack(torch.tensor([1, 8], dtype=torch.uint8), 3)


# ---------------------------------------------------------------------------
# Error bounds and stochastic rounding
# ---------------------------------------------------------------------------


def steps_of(scales: torch.Tensor, shape, cfg) -> torch.Tensor:
    idx = reference.scale_index(shape, cfg)
    return (scales.float().reshape(-1)[idx] / cfg.center).view(shape)


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("granularity", quant.GRANULARITIES)
def test_round_trip_error_at_most_half_a_step(bits, granularity):
    """Symmetric grid: |x - deQ(Q(x))| <= step / 2 everywhere. Reference grid: the same,
    except values above the top level (Q - 1) * step, clipped there: <= one step."""
    x = sample(SMALL, seed=bits)
    for grid in quant.GRIDS:
        cfg = QuantConfig(bits=bits, granularity=granularity, group_size=GROUPS[SMALL], grid=grid)
        packed, scales = quant.quantize_packed(x, cfg)
        err = (quant.dequantize_packed(packed, scales, SMALL, cfg) - x).abs()
        step = steps_of(scales, SMALL, cfg)
        slack = 1e-6 * step + 1e-30
        if grid == "symmetric":
            assert (err <= step / 2 + slack).all()
        else:
            top = x > (2 ** (bits - 1) - 1) * step
            assert (err[~top] <= step[~top] / 2 + slack[~top]).all()
            assert (err[top] <= step[top] + slack[top]).all()


@pytest.mark.parametrize("grid", quant.GRIDS)
def test_stochastic_rounding_is_unbiased(grid):
    """Rows [1, v_1 .. v_k] with token scales: each v_j is coded 4096 times (rows x seeds).
    Stochastic rounding: |mean(deQ) - v| <= 5 sigma / sqrt(N) with sigma <= step / 2.
    Round-to-nearest on the same data must fail that bound (the test can fail)."""
    k, rows, seeds = 24, 512, 8
    v = torch.linspace(-0.93, 0.72, k)  # reference grid: below the top level 3 * 1.001 / 4
    x = torch.cat([torch.ones(rows, 1), v.expand(rows, k)], dim=1)
    cfg = QuantConfig(bits=3, granularity="token", rounding="stochastic", grid=grid)
    gen = torch.Generator().manual_seed(11)
    total = torch.zeros(k)
    for _ in range(seeds):
        packed, scales = quant.quantize_packed(x, cfg, generator=gen)
        total += quant.dequantize_packed(packed, scales, x.shape, cfg)[:, 1:].sum(0)
    n = rows * seeds
    step = float(scales[0]) / cfg.center
    bound = 5 * (step / 2) / n**0.5
    bias = (total / n - v).abs()
    assert bias.max() <= bound, f"max bias {bias.max():.2e} > {bound:.2e}"
    nearest = QuantConfig(bits=3, granularity="token", grid=grid)
    p, s = quant.quantize_packed(x, nearest)
    nearest_bias = (quant.dequantize_packed(p, s, x.shape, nearest)[0, 1:] - v).abs()
    assert nearest_bias.max() > bound


def test_same_generator_seed_same_codes_other_seed_other_codes():
    x = sample(SMALL, seed=6)
    cfg = QuantConfig(bits=2, rounding="stochastic")
    a = quant.quantize_packed(x, cfg, generator=torch.Generator().manual_seed(1))
    b = quant.quantize_packed(x, cfg, generator=torch.Generator().manual_seed(1))
    c = quant.quantize_packed(x, cfg, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    gen = torch.Generator().manual_seed(1)
    first, second = (quant.quantize_packed(x, cfg, generator=gen)[0] for _ in range(2))
    assert not torch.equal(first, second), "each call draws a fresh seed"


def test_nearest_does_not_consume_the_generator():
    gen = torch.Generator().manual_seed(3)
    state = gen.get_state()
    quant.quantize_packed(sample(SMALL), QuantConfig(), generator=gen)
    assert torch.equal(gen.get_state(), state)


# ---------------------------------------------------------------------------
# AQ-SGD encode / decode
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fields", [
    dict(bits=4), dict(bits=2, granularity="token", rounding="stochastic", grid="symmetric"),
    dict(bits=3, granularity="group", scale_method="l2"),
], ids=str)
def test_sender_and_receiver_caches_stay_identical(cache_dtype, x_dtype, fields):
    cfg = QuantConfig(group_size=GROUPS[SMALL], **fields)
    gen = torch.Generator().manual_seed(0)
    send = torch.zeros(SMALL, dtype=cache_dtype)
    recv = torch.zeros(SMALL, dtype=cache_dtype)
    base = sample(SMALL, seed=1)
    for step in range(12):  # x changes every step, as with dropout and moving weights
        x = (base + 0.1 * step * sample(SMALL, seed=100 + step)).to(x_dtype)
        before = send.clone()
        packed, scales = quant.aqsgd_encode(x, send, cfg, generator=gen)
        deq = quant.dequantize_packed(packed, scales, SMALL, cfg)
        assert torch.equal(send, (before.float() + deq).to(cache_dtype))
        out = quant.aqsgd_decode(packed, scales, recv, cfg)
        assert out is recv
        assert torch.equal(send.view(torch.uint8), recv.view(torch.uint8)), f"step {step}"


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16], ids=str)
def test_reconstruction_error_shrinks_to_cache_resolution(cache_dtype):
    """x fixed: every step quantizes the remaining error with a fresh, smaller scale, until
    the cache's own rounding stops it: the error ends within a few fp32 ulps (fp32 cache)
    or one fp16 ulp (fp16 cache) of the channel's largest |x|, the scale the channel's
    codes share."""
    x = sample(SMALL, seed=8)
    cfg = QuantConfig(bits=4)
    m = torch.zeros(SMALL, dtype=cache_dtype)
    r = torch.zeros(SMALL, dtype=cache_dtype)
    errors = []
    for _ in range(14):
        quant.aqsgd_decode(*quant.aqsgd_encode(x, m, cfg), r, cfg)
        errors.append(float((x - r.float()).abs().max()))
    assert errors[3] < errors[0] / 100
    err = (x - r.float()).abs()
    channel_max = x.abs().amax(dim=(0, 1))
    if cache_dtype == torch.float32:
        assert (err <= 4 * 2**-23 * channel_max).all()
    else:
        assert (err <= 2**-10 * channel_max + 2**-24).all()
        assert (err > 4 * 2**-23 * channel_max).any(), "fp16 rounding should be visible"
