"""aqsgd.quant.fused (the fused C++ kernels that backend="auto" runs on CPU) against
aqsgd.quant.reference, bit for bit: scales (l2: within one fp16 ulp), packed codes,
dequantized values in every output dtype, the AQ-SGD caches after encode and decode; on
irregular shapes, rows longer than a packing tile, several blocks of rows, zero groups
and saturated or fp16-subnormal scales. Then the build and its stated fallback. The
kernels are built once per machine (a few seconds of CPU) into .cache/quant-fused/.
Budget: about 30 s on a loaded 2-core machine, once built."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest
import torch
from quant_helpers import DTYPES, GROUPS, PAPERISH, SMALL, sample, seed_of

from aqsgd import quant
from aqsgd.filecache import default_cache_dir
from aqsgd.quant import QuantConfig, bitpack, cpu, fused, reference


@pytest.fixture(scope="module", autouse=True)
def built():
    """The kernels, built (or loaded) once; without a compiler every test here skips (and
    fails in CI, which installs one)."""
    if not fused.available():
        pytest.skip(fused.status())


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    g = got.contiguous().view(torch.uint8).numpy()
    w = want.contiguous().view(torch.uint8).numpy()
    diff = np.flatnonzero(g != w)
    assert diff.size == 0, f"{what}: {diff.size} bytes differ, first at {diff[:5]}"


def assert_scales(got: torch.Tensor, want: torch.Tensor, cfg: QuantConfig) -> None:
    if cfg.scale_method == "maxabs":
        assert_same_bits(got, want, "scales")
        return
    # l2: the summation order is free, one fp16 ulp (docs/architecture/quant.md, "Quantizer")
    ulps = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs()
    assert ulps.max() <= 1, f"l2 scales differ by {int(ulps.max())} fp16 ulps"


def generator(cfg: QuantConfig, gen_seed: int):
    return torch.Generator().manual_seed(gen_seed) if cfg.stochastic else None


def check_quantize(x: torch.Tensor, cfg: QuantConfig, gen_seed: int = 7) -> None:
    """quantize_packed and dequantize_packed (fp32, fp16, bf16 out) on the default CPU
    path against the reference under the path's own scales."""
    assert quant.backend_for(cfg, "auto", x.device) is fused
    seed = seed_of(gen_seed) if cfg.stochastic else 0
    packed, scales = quant.quantize_packed(x, cfg, generator=generator(cfg, gen_seed))
    assert_scales(scales, reference.compute_scales(x, cfg), cfg)
    codes = reference.quantize(x, scales, cfg, seed)
    assert_same_bits(packed, reference.pack(codes, cfg.bits), "packed codes")
    for dtype in DTYPES:
        got = quant.dequantize_packed(packed, scales, x.shape, cfg, dtype=dtype)
        assert_same_bits(got, reference.dequantize(codes, scales, cfg, dtype), f"values {dtype}")


def check_encode_decode(x: torch.Tensor, m0: torch.Tensor, cfg: QuantConfig,
                        gen_seed: int = 7, place=torch.clone) -> None:
    """aqsgd_encode (codes, scales, the sender's cache) and aqsgd_decode (the receiver's
    cache) against the reference's steps under the path's own scales; `place` makes the
    two caches from m0."""
    seed = seed_of(gen_seed) if cfg.stochastic else 0
    m = place(m0)
    packed, scales = quant.aqsgd_encode(x, m, cfg, generator=generator(cfg, gen_seed))
    delta = x.float() - m0.float()
    assert_scales(scales, reference.compute_scales(delta, cfg), cfg)
    codes = reference.quantize(delta, scales, cfg, seed)
    assert_same_bits(packed, reference.pack(codes, cfg.bits), "packed codes")
    want_m = (m0.float() + reference.dequantize(codes, scales, cfg)).to(m0.dtype)
    assert_same_bits(m, want_m, "sender cache")
    r = place(m0)
    assert quant.aqsgd_decode(packed, scales, r, cfg) is r
    assert_same_bits(r, reference.aqsgd_decode(packed, scales, m0.clone(), cfg), "receiver cache")


# ---------------------------------------------------------------------------
# Bit-exactness
# ---------------------------------------------------------------------------

GRID = list(itertools.product(range(1, 9), quant.GRANULARITIES, quant.GRIDS, quant.ROUNDINGS))


@pytest.mark.parametrize("bits,granularity,grid,rounding", GRID)
def test_every_config_bit_exact_small(bits, granularity, grid, rounding):
    cfg = QuantConfig(bits=bits, granularity=granularity, group_size=GROUPS[SMALL], grid=grid,
                      rounding=rounding)
    check_quantize(sample(SMALL, seed=bits), cfg)
    check_encode_decode(sample(SMALL, seed=bits), sample(SMALL, seed=50 + bits), cfg)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fields", [
    dict(bits=4), dict(bits=3, granularity="token", scale_method="l2"),
    dict(bits=2, granularity="group", rounding="stochastic", grid="symmetric"),
    dict(bits=8, scale_method="l2", grid="symmetric"), dict(bits=5, scale_method="l2",
                                                            rounding="stochastic"),
], ids=str)
def test_input_dtypes_and_l2_scales(dtype, fields):
    cfg = QuantConfig(group_size=GROUPS[SMALL], **fields)
    check_quantize(sample(SMALL, dtype, seed=3), cfg)


@pytest.mark.parametrize("x_dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("fields", [
    dict(bits=2, rounding="stochastic"), dict(bits=4, granularity="token", grid="symmetric"),
    dict(bits=3, granularity="group", scale_method="l2", rounding="stochastic"),
    dict(bits=8, granularity="token", scale_method="l2"),
], ids=str)
def test_aqsgd_caches_and_dtypes(x_dtype, cache_dtype, fields):
    cfg = QuantConfig(group_size=GROUPS[SMALL], **fields)
    check_encode_decode(sample(SMALL, x_dtype, seed=4), sample(SMALL, cache_dtype, seed=5), cfg)


# (shape, group size): one row; rows shorter than an octet; a row longer than a packing
# tile (2048 codes); channels wider than a tile; several blocks of rows (16384 elements)
# with widths that are no multiple of 8; the paper's width
IRREGULAR = [((1, 1, 5), 5), ((7, 3), 3), ((3, 5000), 1000), ((2, 4099), 4099),
             ((3, 301, 61), 129), ((2, 129, 1600), 128), ((1, 9, 1600), 1600)]


@pytest.mark.parametrize("shape,group", IRREGULAR, ids=str)
@pytest.mark.parametrize("fields", [
    dict(bits=3, rounding="stochastic"), dict(bits=2, granularity="token"),
    dict(bits=7, granularity="group", grid="symmetric", rounding="stochastic"),
    dict(bits=4, granularity="group", scale_method="l2"), dict(bits=1, granularity="token",
                                                               rounding="stochastic"),
], ids=str)
def test_irregular_shapes_and_tiles(shape, group, fields):
    cfg = QuantConfig(group_size=group, **fields)
    check_quantize(sample(shape, seed=6), cfg)
    check_encode_decode(sample(shape, torch.bfloat16, seed=8), sample(shape, seed=9), cfg)


def one_element_in(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of t that starts one element into its storage (not 64-byte aligned)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype)
    out = buf[1:].view(t.shape)
    out.copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 64
    return out


@pytest.mark.parametrize("x_dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16], ids=str)
def test_operands_off_vector_alignment(x_dtype, cache_dtype):
    x = one_element_in(sample(SMALL, x_dtype, seed=16))
    cfg = QuantConfig(bits=3, granularity="token", rounding="stochastic")
    check_quantize(x, cfg)
    check_encode_decode(x, sample(SMALL, cache_dtype, seed=17), cfg, place=one_element_in)


@pytest.mark.parametrize("fields", [
    dict(bits=4), dict(bits=3, granularity="group", rounding="stochastic"),
    dict(bits=5, granularity="token", grid="symmetric"), dict(bits=2, rounding="stochastic"),
], ids=str)
def test_paper_like_shape_bf16(fields):
    cfg = QuantConfig(group_size=GROUPS[PAPERISH], **fields)
    check_quantize(sample(PAPERISH, torch.bfloat16, seed=5), cfg)


@pytest.mark.parametrize("bits", [1, 2, 4, 7, 8])
def test_zero_groups_saturated_and_subnormal_scales(bits):
    x = sample(SMALL, seed=9)
    x[0, 0, 3] = 1e6  # max-abs above fp16 range: the scale saturates at 65504, codes clip
    x[..., 4] *= 1e-9  # scale underflows to 0: inv = 0
    x[..., 5] *= 1e-5  # fp16-subnormal scale, which may round below max |v|
    x[..., 6] = x[..., 6].abs()  # max |v| positive: t reaches Q, clipped to Q - 1
    x[1] = 0.0  # all-zero tokens and groups
    for granularity, grid, rounding in itertools.product(quant.GRANULARITIES, quant.GRIDS,
                                                         quant.ROUNDINGS):
        cfg = QuantConfig(bits=bits, granularity=granularity, group_size=GROUPS[SMALL],
                          grid=grid, rounding=rounding)
        check_quantize(x, cfg)
        check_encode_decode(x, torch.zeros(SMALL), cfg)
        check_encode_decode(x, -x.half(), cfg)


@pytest.mark.parametrize("grid", quant.GRIDS)
def test_nan_and_inf_reach_the_receiver_as_the_reference_says(grid):
    """A NaN element makes its group's scale NaN, so every value of the group decodes to
    NaN, as in the reference (the code of the NaN itself is outside the contract); an
    infinite one saturates the scale at 65504."""
    x = sample((4, 8, 16), seed=15)
    x[1, 2, 3], x[2, 3, 4], x[0, 0, 5] = float("nan"), float("inf"), -float("inf")
    for granularity in quant.GRANULARITIES:
        cfg = QuantConfig(bits=3, granularity=granularity, group_size=16, grid=grid)
        packed, scales = quant.quantize_packed(x, cfg)
        want_packed, want_scales = reference.quantize_packed(x, cfg)
        assert_same_bits(scales, want_scales, "scales")
        assert scales.isnan().sum() == 1 and (scales == 65504).sum() >= 1
        got = quant.dequantize_packed(packed, scales, x.shape, cfg)
        want = reference.dequantize_packed(want_packed, want_scales, x.shape, cfg)
        assert torch.equal(got.isnan(), want.isnan()) and got.isnan().any()
        assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))


def test_same_bytes_as_the_torch_path():
    """The two CPU backends agree byte for byte where the contract is exact, and the
    torch path stays reachable as backend="torch"."""
    assert quant.backend_for(QuantConfig(), "torch", torch.device("cpu")) is cpu
    x, m0 = sample(SMALL, seed=10), sample(SMALL, torch.float16, seed=11)
    cfg = QuantConfig(bits=3, granularity="token", rounding="stochastic", grid="symmetric")
    runs = {}
    for backend in ("auto", "torch"):
        m = m0.clone()
        enc = quant.aqsgd_encode(x, m, cfg, torch.Generator().manual_seed(1), backend=backend)
        runs[backend] = (enc, m)
    (enc_a, m_a), (enc_t, m_t) = runs["auto"], runs["torch"]
    assert torch.equal(enc_a[0], enc_t[0]) and torch.equal(enc_a[1], enc_t[1])
    assert_same_bits(m_a, m_t, "sender caches")


def test_concurrent_calls_from_threads():
    """ctypes releases the GIL during a call: calls from two threads (a prefetch thread
    beside the main one) run at once and give the bytes of a lone call."""
    x = sample(PAPERISH, seed=12)
    cfg = QuantConfig(bits=2, rounding="stochastic")
    want = quant.quantize_packed(x, cfg, torch.Generator().manual_seed(3))[0]
    results = []

    def work():
        results.extend(quant.quantize_packed(x, cfg, torch.Generator().manual_seed(3))[0]
                       for _ in range(5))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 10 and all(torch.equal(r, want) for r in results)


def test_codes_unpack_with_bitpack():
    """An independent reading of the stream: aqsgd.quant.bitpack's unpacking."""
    x = sample((5, 7, 9), seed=13)
    for bits in range(1, 9):
        cfg = QuantConfig(bits=bits, rounding="stochastic")
        packed, scales = quant.quantize_packed(x, cfg, torch.Generator().manual_seed(bits))
        codes = bitpack.unpack(packed, bits, x.numel())
        want = reference.quantize(x, scales, cfg, seed_of(bits)).reshape(-1)
        assert torch.equal(codes, want)


# ---------------------------------------------------------------------------
# Build, cache and fallback
# ---------------------------------------------------------------------------


def test_library_is_cached_per_machine():
    library = fused.load_library(default_cache_dir())  # built by the fixture: only loaded
    assert library.lib is not None and "built now" not in library.note
    path = fused.library_path(default_cache_dir())
    assert path.exists() and path.name in library.note
    assert path == fused.library_path(default_cache_dir())  # a stable key


def test_no_compiler_is_a_stated_fallback(tmp_path, monkeypatch):
    """Without a compiler (and no library built before) load_library says why; the
    default CPU path is then the torch one, announced once by a RuntimeWarning, with
    the same bytes."""
    missing = fused.load_library(tmp_path, compilers=("aqsgd-no-such-compiler",))
    assert missing.lib is None
    assert "no C++ compiler" in missing.note and "aqsgd-no-such-compiler" in missing.note
    monkeypatch.setattr(fused, "_library", lambda: missing)
    fused._warn_unavailable.cache_clear()
    x, cfg = sample(SMALL, seed=14), QuantConfig(bits=3)
    try:
        with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
            packed, scales = quant.quantize_packed(x, cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once, not on every call
            assert quant.backend_for(cfg, "auto", x.device) is cpu
            quant.quantize_packed(x, cfg)
    finally:
        fused._warn_unavailable.cache_clear()
    want = reference.quantize_packed(x, cfg)
    assert torch.equal(packed, want[0]) and torch.equal(scales, want[1])


def test_failed_build_is_a_stated_fallback(tmp_path):
    """A compiler that fails (here `false`) leaves no library and a note naming it."""
    failed = fused.load_library(tmp_path, compilers=("false",))
    assert failed.lib is None and "failed" in failed.note and "false" in failed.note
    assert not any(tmp_path.rglob("*.so"))


@pytest.mark.slow
def test_concurrent_first_builds_share_one_library(tmp_path):
    """Two processes asking at once for a library not built yet: one compiles, the other
    waits for it (aqsgd.filecache.build_once), both load the same file."""
    code = textwrap.dedent(f"""
        from pathlib import Path
        from aqsgd.quant import fused
        library = fused.load_library(Path({str(tmp_path)!r}))
        assert library.lib is not None, library.note
        print("built" if "built now" in library.note else "loaded")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert sorted(out.strip() for out, _ in outs) == ["built", "loaded"]
    assert len(list(tmp_path.rglob("*.so"))) == 1
