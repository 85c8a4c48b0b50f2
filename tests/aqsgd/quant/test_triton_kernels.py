"""Triton kernels against the torch path, bit for bit, under the Triton interpreter.

Run: .venv/bin/python -m pytest tests/aqsgd/quant/test_triton_kernels.py -q

The kernels run on CPU tensors through the Triton interpreter. Interpreted or
compiled is a per-process choice that Triton makes when it is imported (its own
library is @jit code, some of it imported lazily at the first launch), so this
module sets TRITON_INTERPRET=1 before anything imports triton, and it stays set
for the pytest process (and the processes it starts). GPU checks of the compiled
kernels run in their own process: `python -m bench.micro.gpu_check`. Two references:
`aqsgd.quant.reference`, the contract of docs/architecture/quant.md in plain torch
(unpacked codes, one bit at a time), and `aqsgd.quant` with backend="torch". The
kernels must match both to the bit, except l2 scales, which may differ by one fp16
ulp (the fp32 sum order differs), as documented.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = pytest.mark.triton

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import triton  # noqa: F401  (in CI a missing Triton is a failure, not a skip)
else:
    pytest.importorskip("triton")

from aqsgd import quant  # noqa: E402
from aqsgd.quant import reference  # noqa: E402
from aqsgd.quant import triton_launch as kernels  # noqa: E402

if not kernels._interpreted():
    raise RuntimeError("aqsgd.quant.triton_kernels was built compiled (triton imported before "
                       "this module set TRITON_INTERPRET=1): run "
                       "tests/aqsgd/quant/test_triton_kernels.py in its own pytest process, or set "
                       "TRITON_INTERPRET=1")  # fmt: skip


def make_cfg(**kw):
    return quant.QuantConfig(**kw)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

SHAPES = [(3, 37, 50), (2, 129, 1600)]


def sample(shape, dtype, seed, spread=True):
    """Activation-like data: per-channel magnitudes over 4 decades, a few outliers."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if spread:
        x = x * torch.logspace(-2, 2, shape[-1])
    x.view(-1)[:: max(1, x.numel() // 7)] *= 30.0
    return x.to(dtype)


def fp16_ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    ia = a.view(torch.int16).to(torch.int32)
    ib = b.view(torch.int16).to(torch.int32)
    return int((ia - ib).abs().max()) if a.numel() else 0


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.shape, want.shape)
    same = got.view(torch.uint8) == want.view(torch.uint8) if got.dtype.is_floating_point \
        else got == want
    if not bool(same.all()):
        bad = (~same).nonzero()[:5].tolist()
        pytest.fail(f"{what}: {int((~same).sum())} mismatches, first at {bad}")


# ---------------------------------------------------------------------------
# quantize + pack, unpack + dequantize
# ---------------------------------------------------------------------------

# (shape, dtype, cfg fields) chosen to cover every bit width, grid, rounding,
# granularity, both scale methods, one-pass and two-pass paths, in few launches.
QUANT_CASES = [
    ((3, 37, 50), torch.float32, dict(bits=4)),
    ((3, 37, 50), torch.float16, dict(bits=3, granularity="token")),  # 150 bits: two-pass
    ((3, 37, 50), torch.bfloat16, dict(bits=2, grid="symmetric", rounding="stochastic")),
    ((3, 37, 50), torch.float32, dict(bits=1, granularity="group", group_size=111,
                                      grid="symmetric")),
    ((3, 37, 50), torch.float32, dict(bits=5, granularity="token", rounding="stochastic")),
    ((3, 37, 50), torch.float16, dict(bits=8, granularity="token")),  # one-pass, D % 8 != 0
    ((2, 129, 1600), torch.float32, dict(bits=4, granularity="token")),  # one-pass
    ((2, 129, 1600), torch.bfloat16, dict(bits=3, rounding="stochastic")),
    ((2, 129, 1600), torch.float16, dict(bits=8, granularity="group", group_size=128,
                                         grid="symmetric", rounding="stochastic")),
    ((2, 129, 1600), torch.float32, dict(bits=2, granularity="group", group_size=64)),
    ((2, 129, 1600), torch.float32, dict(bits=6, grid="symmetric")),
    ((2, 129, 1600), torch.float16, dict(bits=7, granularity="token", grid="symmetric")),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape,dtype,fields", QUANT_CASES,
                         ids=[f"{s}-{str(d)[6:]}-{f}" for s, d, f in QUANT_CASES])
def test_quantize_dequantize_match_reference(shape, dtype, fields):
    cfg = make_cfg(**fields)
    x = sample(shape, dtype, seed=sum(shape) + cfg.bits)
    seed = 1234567 + cfg.bits
    packed, scales = kernels.quantize_packed(x, cfg, seed)
    want_packed, want_scales = reference.quantize_packed(x, cfg, seed)
    assert_same_bits(scales, want_scales, "scales")
    assert packed.numel() == math.ceil(x.numel() * cfg.bits / 8)
    assert_same_bits(packed, want_packed, "packed codes")

    out_dtype = torch.float32 if dtype == torch.float32 else dtype
    got = kernels.dequantize_packed(packed, scales, x.shape, cfg, out_dtype)
    codes = reference.quantize(x, want_scales, cfg, seed)
    want = reference.dequantize(codes, want_scales, cfg, out_dtype)
    assert_same_bits(got, want, "dequantized values")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("granularity", ["channel", "token", "group"])
def test_l2_scales_within_one_ulp(granularity):
    # l2 = 2 * RMS: sum order differs between kernel and torch -> at most 1 fp16 ulp;
    # codes must then be exactly the reference's codes for the kernel's own scales.
    cfg = make_cfg(bits=4, granularity=granularity, group_size=100, scale_method="l2")
    x = sample((2, 129, 1600), torch.float32, seed=7)
    packed, scales = kernels.quantize_packed(x, cfg)
    want_scales = reference.compute_scales(x, cfg)
    assert fp16_ulps(scales, want_scales) <= 1
    codes = reference.quantize(x, scales, cfg, 0)
    assert_same_bits(packed, reference.pack(codes, cfg.bits), "codes under the kernel's scales")


@pytest.mark.timeout(60)
def test_edge_values():
    # zero rows and columns, an fp16-overflowing magnitude, subnormal-sized values
    cfg = make_cfg(bits=4)
    x = sample((3, 37, 50), torch.float32, seed=3)
    x[:, :, 5] = 0.0
    x[:, :, 7] = 1e-30
    x[0, 0, 9] = 1e6
    for fields in (dict(bits=4), dict(bits=3, grid="symmetric", granularity="token")):
        cfg = make_cfg(**fields)
        y = x.clone()
        if cfg.granularity == "token":
            y[1, 2, :] = 0.0
        packed, scales = kernels.quantize_packed(y, cfg)
        want_packed, want_scales = reference.quantize_packed(y, cfg)
        assert_same_bits(scales, want_scales, f"scales {fields}")
        assert_same_bits(packed, want_packed, f"packed {fields}")
        out = kernels.dequantize_packed(packed, scales, y.shape, cfg)
        assert bool(torch.isfinite(out).all())


@pytest.mark.timeout(60)
def test_two_pass_paths_match_one_pass():
    # Tiles too small for a whole row force the two-pass kernels (row statistics, then
    # flat packing) and several row blocks in the channel statistics.
    # idx64_from=0 also runs the int64-index variants that tensors over 2**31 need.
    small = replace(kernels._TILES["interpreter"], max_row_elems=1024, stat_cols=256,
                    stat_elems=1024, flat_octets=64, target_programs=64, idx64_from=0)
    x = sample((2, 3, 1600), torch.float16, seed=11)
    m0 = sample((2, 3, 1600), torch.bfloat16, seed=12)
    for granularity in ("token", "channel"):
        cfg = make_cfg(bits=4, granularity=granularity, rounding="stochastic")
        m_one, m_two, m_wide = m0.clone(), m0.clone(), m0.clone()
        one = kernels._encode(x, m_one, cfg, 99)
        two = kernels._encode(x, m_two, cfg, 99, tiles=small)
        wide = kernels._encode(x, m_wide, cfg, 99, tiles=replace(small, max_row_elems=65536))
        for got, m_got, what in ((two, m_two, "two-pass"), (wide, m_wide, "int64 one-pass")):
            assert_same_bits(got[0], one[0], f"{granularity} {what} packed")
            assert_same_bits(got[1], one[1], f"{granularity} {what} scales")
            assert_same_bits(m_got, m_one, f"{granularity} {what} cache")
        m_ref = m0.clone()
        want = reference.aqsgd_encode(x, m_ref, cfg, 99)
        assert_same_bits(two[0], want[0], f"{granularity} packed vs reference")
        assert_same_bits(m_two, m_ref, f"{granularity} cache vs reference")
        recv = m0.clone()
        kernels._decode_into(two[0], two[1], recv, cfg, accumulate=True, tiles=small)
        assert_same_bits(recv, m_ref, f"{granularity} receiver cache, flat decode")


# ---------------------------------------------------------------------------
# Fused AQ-SGD encode / decode
# ---------------------------------------------------------------------------


ENCODE_CASES = [
    ((3, 37, 50), torch.float32, torch.float32, dict(bits=4)),
    ((3, 37, 50), torch.bfloat16, torch.float16, dict(bits=3, granularity="token",
                                                      rounding="stochastic")),
    ((2, 129, 1600), torch.float16, torch.float16, dict(bits=2, granularity="token",
                                                        grid="symmetric")),
    ((2, 129, 1600), torch.float32, torch.bfloat16, dict(bits=8, granularity="group",
                                                         group_size=160, rounding="stochastic")),
]


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("shape,x_dtype,m_dtype,fields", ENCODE_CASES,
                         ids=[f"{s}-{str(a)[6:]}-{str(b)[6:]}-{f}" for s, a, b, f in ENCODE_CASES])
def test_fused_steps_keep_caches_identical(shape, x_dtype, m_dtype, fields):
    cfg = make_cfg(**fields)
    m_send = torch.zeros(shape, dtype=m_dtype)
    m_recv = torch.zeros(shape, dtype=m_dtype)
    m_ref = torch.zeros(shape, dtype=m_dtype)
    base = sample(shape, torch.float32, seed=5)
    g = torch.Generator().manual_seed(0)
    for step in range(3):
        x = (base + 0.05 * step * torch.randn(shape, generator=g)).to(x_dtype)
        seed = 1000 + step
        packed, scales = kernels.aqsgd_encode(x, m_send, cfg, seed)
        want_packed, want_scales = reference.aqsgd_encode(x, m_ref, cfg, seed)
        assert_same_bits(scales, want_scales, f"step {step} scales")
        assert_same_bits(packed, want_packed, f"step {step} packed")
        assert_same_bits(m_send, m_ref, f"step {step} sender cache")
        out = kernels.aqsgd_decode(packed, scales, m_recv, cfg)
        assert out is m_recv
        assert_same_bits(m_recv, m_send, f"step {step} receiver cache")


@pytest.mark.timeout(60)
def test_encode_error_shrinks_when_x_stops_changing():
    cfg = make_cfg(bits=2)
    x = sample((3, 37, 50), torch.float32, seed=8)
    m = torch.zeros_like(x)
    errors = []
    for _ in range(40):  # the 2-bit reference grid halves the worst error per visit
        kernels.aqsgd_encode(x, m, cfg)
        errors.append(float((x - m).abs().max()))
    assert all(b <= a for a, b in zip(errors[:-1], errors[1:], strict=True)), errors
    assert errors[-1] <= 1e-6 * errors[0], errors


@pytest.mark.timeout(60)
def test_non_contiguous_cache_is_updated_in_place():
    cfg = make_cfg(bits=4, granularity="token")
    x = sample((3, 37, 48), torch.float32, seed=9)
    m_t = torch.zeros(48, 37, 3).permute(2, 1, 0)  # (3, 37, 48), not contiguous
    m_ref = torch.zeros(3, 37, 48)
    packed, scales = kernels.aqsgd_encode(x, m_t, cfg)
    want = reference.aqsgd_encode(x, m_ref, cfg, 0)
    assert_same_bits(packed, want[0], "packed")
    assert_same_bits(m_t.contiguous(), m_ref, "non-contiguous sender cache")
    r_t = torch.zeros(48, 37, 3).permute(2, 1, 0)
    kernels.aqsgd_decode(packed, scales, r_t, cfg)
    assert_same_bits(r_t.contiguous(), m_ref, "non-contiguous receiver cache")


# ---------------------------------------------------------------------------
# Interpreter budget
# ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_interpreter_launches_stay_few():
    # The whole (2, 129, 1600) quantize must stay a handful of interpreter programs.
    cfg = make_cfg(bits=4)
    x = sample((2, 129, 1600), torch.float32, seed=1, spread=False)
    t0 = time.perf_counter()
    kernels.quantize_packed(x, cfg)
    elapsed_s = time.perf_counter() - t0
    assert elapsed_s < 20.0, f"interpreted quantize of 412800 elements took {elapsed_s:.1f} s"
