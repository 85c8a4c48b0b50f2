"""TAH-Quant (aqsgd.quant.tah): its torch path (aqsgd.quant.tah_torch) against the
plain-torch reference (aqsgd.quant.tah_reference) bit for bit on irregular shapes; the
Hadamard transform; the bit budget and the exact wire size; the allocation (outlier tiles
get more bits); error bounds and error against budget; zero tiles; argument checking.
The Triton kernels are in test_tah_triton_kernels.py. Budget: about 20 s on a loaded
2-core machine."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
import torch

from aqsgd import quant
from aqsgd.quant import tah_reference as reference
from aqsgd.quant import tah_torch
from aqsgd.quant.tah import TahConfig, TahPacked, tah_dequantize, tah_quantize
from aqsgd.quant.tah_config import code_bits, tah_wire_nbytes, tile_count

# irregular shapes: odd leading dims, last dims not powers of two, rows that need padding
SHAPES = [((3, 37, 64), 64), ((5, 7, 192), 64), ((2, 9, 24), 8), ((4, 96), 32),
          ((1, 3, 256), 256), ((2, 11, 48), 16), ((3, 5, 100), 64), ((7, 12), 8)]
PAPERISH = (2, 129, 1600)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CONFIGS = [
    dict(),
    dict(pivot_swap=False),
    dict(hadamard=False, pivot_swap=False),
    dict(rounding="stochastic"),
    dict(bits=2.6, min_bits=1, max_bits=8),
    dict(bits=4, min_bits=4, max_bits=4),
]


def sample(shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    """Activation-like: channel magnitudes over 3 decades, token scales, outliers, ties
    (repeated values) and a few all-zero tiles."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-1.5, 1.5, shape[-1])
    x = x * torch.rand(shape[:-1] + (1,), generator=g).mul(4).exp()
    x.view(-1)[:: max(1, x.numel() // 13)] *= 40.0
    x.view(-1)[5:9] = 3.0  # equal magnitudes: the first one is the pivot
    x.view(-1)[-8:] = 0.0
    if x.shape[-1] >= 16:
        x.view(-1, x.shape[-1])[1, :16] = 0.0
    return x.to(dtype)


def generator(cfg: TahConfig, seed: int = 5):
    return torch.Generator().manual_seed(seed) if cfg.stochastic else None


def seed_of(cfg: TahConfig, seed: int = 5) -> int:
    return quant.draw_seed(generator(cfg, seed), cfg)


def bits_of(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a tensor, for bit-for-bit comparison (also of -0.0 and nan)."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def assert_same_packed(got: TahPacked, want: TahPacked) -> None:
    for name, a, b in zip(TahPacked._fields, got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.shape, b.shape)
        diff = torch.nonzero(bits_of(a) != bits_of(b)).view(-1)
        assert diff.numel() == 0, f"{name}: {diff.numel()} differ, first at {diff[:5].tolist()}"


def check_against_reference(x: torch.Tensor, cfg: TahConfig) -> TahPacked:
    packed = tah_quantize(x, cfg, generator(cfg), backend="torch")
    assert_same_packed(packed, reference.quantize_packed(x, cfg, seed_of(cfg)))
    for dtype in (x.dtype, torch.float32):
        got = tah_dequantize(packed, x.shape, cfg, dtype, backend="torch")
        want = reference.dequantize_packed(packed, x.shape, cfg, dtype)
        assert torch.equal(bits_of(got), bits_of(want)), f"values differ ({dtype})"
    return packed


def rel_error(x: torch.Tensor, cfg: TahConfig) -> float:
    y = tah_dequantize(tah_quantize(x, cfg, generator(cfg)), x.shape, cfg)
    return float((y - x.float()).norm() / x.float().norm())


# ---------------------------------------------------------------------------
# Bit-exactness: torch path == reference
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape,tile", SHAPES, ids=str)
@pytest.mark.parametrize("fields", CONFIGS, ids=str)
def test_torch_path_bit_exact_irregular_shapes(shape, tile, fields):
    check_against_reference(sample(shape), TahConfig(tile_size=tile, **fields))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fields", CONFIGS[:4], ids=str)
def test_torch_path_bit_exact_dtypes(dtype, fields):
    check_against_reference(sample((3, 37, 64), dtype, seed=2), TahConfig(**fields))


@pytest.mark.parametrize("fields", [dict(), dict(rounding="stochastic", bits=3.3)], ids=str)
def test_torch_path_bit_exact_paper_like_shape(fields):
    check_against_reference(sample(PAPERISH, seed=3), TahConfig(**fields))


@pytest.mark.parametrize("fields", CONFIGS[:4], ids=str)
def test_small_chunks_give_the_same_bytes(monkeypatch, fields):
    """Chunks of 3 tiles (the last one partial) give the bytes of one chunk."""
    x, cfg = sample((5, 7, 192), seed=4), TahConfig(**fields)
    whole = tah_quantize(x, cfg, generator(cfg), backend="torch")
    monkeypatch.setattr(tah_torch, "CHUNK_ELEMENTS", 3 * cfg.tile_size)
    assert_same_packed(tah_quantize(x, cfg, generator(cfg), backend="torch"), whole)
    got = tah_dequantize(whole, x.shape, cfg, backend="torch")
    assert torch.equal(bits_of(got), bits_of(reference.dequantize_packed(whole, x.shape, cfg)))


def test_reference_pack_layout_worked_example():
    """Two tiles of 8 codes, 1 and 2 bits: little-endian streams, tile after tile."""
    codes = torch.tensor([[1, 0, 1, 1, 0, 0, 0, 1], [3, 2, 1, 0, 0, 1, 2, 3]], dtype=torch.uint8)
    bits = torch.tensor([1, 2], dtype=torch.uint8)
    want = torch.tensor([0x8D, 0x1B, 0xE4], dtype=torch.uint8)
    assert torch.equal(reference.pack(codes, bits), want)
    assert torch.equal(reference.unpack(want, bits, 8), codes)
    cfg = TahConfig(bits=1.5, tile_size=8, min_bits=1, max_bits=2)
    assert torch.equal(tah_torch._pack(codes, bits, cfg, 3), want)
    assert torch.equal(tah_torch._unpack(want, bits, cfg), codes)


def test_unaligned_packed_codes_decode_the_same():
    x, cfg = sample((3, 37, 64)), TahConfig()
    packed = tah_quantize(x, cfg)
    shifted = torch.cat([torch.zeros(1, dtype=torch.uint8), packed.codes])[1:]
    assert shifted.storage_offset() == 1
    got = tah_dequantize(packed._replace(codes=shifted), x.shape, cfg)
    assert torch.equal(got, tah_dequantize(packed, x.shape, cfg))


# ---------------------------------------------------------------------------
# Hadamard transform and pivots
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [8, 16, 32, 64, 128, 256])
def test_hadamard_is_orthonormal_and_its_own_inverse(size):
    eye = torch.eye(size)
    h = reference.hadamard(eye)  # rows: H e_i
    assert torch.allclose(h @ h.T, eye, atol=1e-6)
    assert torch.equal(h.abs(), torch.full_like(h, h[0, 0].item()))  # entries +-1/sqrt(G)
    x = torch.randn(50, size, generator=torch.Generator().manual_seed(size))
    y = reference.hadamard(x)
    assert torch.allclose(y.norm(dim=1), x.norm(dim=1), rtol=1e-5)
    assert torch.allclose(reference.hadamard(y), x, atol=1e-5)


def test_hadamard_exact_on_integers_for_powers_of_four():
    """For G = 4**k the normalisation is a power of two: integers come back exactly."""
    x = torch.randint(-1000, 1000, (20, 64), generator=torch.Generator().manual_seed(0)).float()
    assert torch.equal(reference.hadamard(reference.hadamard(x)), x)


def test_element_in_front_becomes_a_shift():
    """Column 0 of H is all ones: a value at position 0 adds one constant to every
    coefficient. That is what the pivot swap exploits."""
    spike = torch.zeros(1, 64)
    spike[0, 0] = 40.0
    assert torch.equal(reference.hadamard(spike), torch.full((1, 64), 5.0))
    spike = torch.zeros(1, 64)
    spike[0, 9] = 40.0
    assert set(reference.hadamard(spike).view(-1).tolist()) == {5.0, -5.0}


def test_pivots_are_first_largest_and_swap_is_its_own_inverse():
    v = torch.tensor([[1.0, -3.0, 3.0, 2.0], [0.0, 0.0, 0.0, 0.0], [5.0, 1.0, -2.0, 4.0]])
    where = reference.find_pivots(v)
    assert where.tolist() == [1, 0, 0]
    swapped = reference.swap_pivots(v, where)
    assert swapped[0].tolist() == [-3.0, 1.0, 3.0, 2.0]
    assert torch.equal(reference.swap_pivots(swapped, where), v)
    cols = v.t().contiguous()
    first = torch.arange(4, 0, -1, dtype=torch.int16)[:, None]
    assert torch.equal(tah_torch._pivots(cols, first, torch.empty_like(cols)), where)


def test_pivot_swap_makes_a_one_outlier_tile_nearly_exact():
    """A tile of small values and one outlier: with the swap the outlier is a shift the
    centre absorbs; without it the grid must span +-outlier/sqrt(G) around every value."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 64, generator=g) * 0.1
    x[torch.arange(64), torch.randint(0, 64, (64,), generator=g)] = 50.0
    with_swap = rel_error(x, TahConfig(bits=3, min_bits=3, max_bits=3))
    without = rel_error(x, TahConfig(bits=3, min_bits=3, max_bits=3, pivot_swap=False))
    plain = rel_error(x, TahConfig(bits=3, min_bits=3, max_bits=3, hadamard=False,
                                   pivot_swap=False))
    assert with_swap < without / 5, (with_swap, without)
    assert with_swap < plain / 5, (with_swap, plain)


# ---------------------------------------------------------------------------
# Budget, allocation and wire size
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("budget,low,high", [(2.3, 1, 4), (3, 2, 4), (3.7, 3, 8), (7.9, 1, 8),
                                             (1, 1, 3), (5, 2, 5)])
def test_bits_per_element_never_exceed_the_budget(budget, low, high):
    cfg = TahConfig(bits=budget, min_bits=low, max_bits=high)
    shape = (5, 7, 192)
    for x in (sample(shape), torch.zeros(shape), sample(shape) * 1e4):
        packed = tah_quantize(x, cfg)
        widths = packed.bits.long()
        assert low <= int(widths.min()) and int(widths.max()) <= high
        used = int(widths.sum()) * cfg.tile_size
        assert used == code_bits(shape, cfg) == cfg.tile_size * math.floor(budget * 105 + 1e-9)
        assert used <= budget * x.numel()
        assert packed.codes.numel() * 8 == used
        nbytes = sum(t.numel() * t.element_size() for t in packed)
        assert nbytes == tah_wire_nbytes(shape, cfg)  # the same for any data


def test_rows_are_padded_to_whole_tiles():
    """Width 100 with tiles of 64: two tiles a row, the second one 28 zeros longer; the
    padding travels (its coefficients) and is dropped on decode."""
    cfg = TahConfig(bits=4, min_bits=4, max_bits=4)
    x = sample((3, 100), seed=12)
    assert tile_count(x.shape, cfg) == 6
    assert tah_wire_nbytes(x.shape, cfg) == 6 * 64 * 4 // 8 + 6 * 6
    y = tah_dequantize(tah_quantize(x, cfg), x.shape, cfg)
    assert y.shape == x.shape and y.is_contiguous()
    padded = torch.nn.functional.pad(x, (0, 28))
    want = tah_dequantize(tah_quantize(padded, cfg), padded.shape, cfg)[:, :100]
    assert torch.equal(y, want)


def test_wire_nbytes_worked_example():
    shape = (16, 64, 128)  # 2048 tiles of 64
    assert tah_wire_nbytes(shape, TahConfig()) == 49152 + 2048 * 6
    assert tah_wire_nbytes(shape, TahConfig(pivot_swap=False)) == 49152 + 2048 * 5
    assert tah_wire_nbytes(shape, TahConfig(bits=2.5, min_bits=2)) == 40960 + 2048 * 6
    assert quant.tah_wire_spec(shape, TahConfig())[0] == ((49152,), torch.uint8)


def test_allocation_follows_gain_and_breaks_ties_to_the_lower_tile():
    """Keys in units of 2**-16 bit times G: a tile 8 bits of entropy richer than the
    others takes the extra bits first; equal tiles share in index order."""
    cfg = TahConfig(bits=2.5, tile_size=8, min_bits=2, max_bits=4)
    shape = (4, 8)  # 4 tiles, budget floor(2.5 * 4) = 10 tile-bits: 2 extra
    rich = 8 * 8 * 2**16
    keys = torch.tensor([0, rich, 0, 0])
    assert reference.allocate_bits(keys, shape, cfg).tolist() == [2, 4, 2, 2]
    assert reference.allocate_bits(torch.zeros(4, dtype=torch.int64), shape,
                                   cfg).tolist() == [3, 3, 2, 2]
    # a tile only a little richer gets one extra bit, not both: the second is worth less
    keys = torch.tensor([0, 2**16, 0, 0])
    assert reference.allocate_bits(keys, shape, cfg).tolist() == [3, 3, 2, 2]


def test_outlier_tiles_get_more_bits():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(32, 128, generator=g)  # 64 tiles
    loud = [3, 17, 40, 41]
    tiles = x.view(64, 64)
    tiles[loud] *= 50.0
    cfg = TahConfig(bits=3, min_bits=2, max_bits=5, hadamard=False, pivot_swap=False)
    bits = tah_quantize(x, cfg).bits.long()
    quiet = [t for t in range(64) if t not in loud]
    assert bits[loud].min() > bits[quiet].max(), bits.tolist()
    # with the transform, one outlier is absorbed by the pivot swap; several are not
    x = torch.randn(32, 128, generator=g)
    tiles = x.view(64, 64)
    for t in loud:
        tiles[t, 3:40:5] = 60.0
    bits = tah_quantize(x, TahConfig(bits=3, min_bits=2, max_bits=5)).bits.long()
    assert bits[loud].min() > bits[quiet].max(), bits.tolist()


def test_error_decreases_with_budget():
    x = sample((8, 16, 128), seed=6)
    budgets = [1.5, 2, 2.5, 3, 4, 5, 6]
    errors = [rel_error(x, TahConfig(bits=b, min_bits=1, max_bits=8)) for b in budgets]
    assert all(a > b for a, b in zip(errors, errors[1:], strict=False)), errors
    assert errors[-1] < 0.05 * errors[0]


def test_adaptive_allocation_beats_fixed_width_on_uneven_tokens():
    x = sample((8, 16, 128), seed=7)  # token scales over e**4
    for b in (2, 3, 4):
        adaptive = rel_error(x, TahConfig(bits=b, min_bits=1, max_bits=8))
        fixed = rel_error(x, TahConfig(bits=b, min_bits=b, max_bits=b))
        assert adaptive < 0.8 * fixed, (b, adaptive, fixed)


# ---------------------------------------------------------------------------
# Error bounds, zero tiles, rounding
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fields", [dict(), dict(hadamard=False, pivot_swap=False),
                                    dict(rounding="stochastic")], ids=str)
def test_round_trip_error_bound_per_tile(fields):
    """Each coefficient is within half a step (a whole step when stochastic) of its code's
    value, step = 2 s / (2**b - 1); the transform is orthonormal, so a tile's L2 error is
    at most sqrt(G) times that (plus fp32 rounding)."""
    cfg = TahConfig(bits=3, min_bits=1, max_bits=6, **fields)
    x = sample((6, 9, 128), seed=8)
    packed = tah_quantize(x, cfg, generator(cfg))
    y = tah_dequantize(packed, x.shape, cfg)
    step = 2 * packed.scales.float() / ((1 << packed.bits.long()) - 1).float()
    per_coeff = step * (1.0 if cfg.stochastic else 0.5)
    err = (y - x).view(-1, cfg.tile_size)
    tol = 1e-5 * x.view(-1, cfg.tile_size).abs().amax(1) + 1e-7
    if cfg.hadamard:
        bound = per_coeff * math.sqrt(cfg.tile_size)
        assert (err.norm(dim=1) <= bound * 1.0001 + tol).all()
    else:
        assert (err.abs().amax(dim=1) <= per_coeff * 1.0001 + tol).all()


def test_zero_tensor_and_zero_tiles_come_back_exactly_zero():
    cfg = TahConfig()
    zeros = torch.zeros(4, 9, 64)
    packed = tah_quantize(zeros, cfg)
    y = tah_dequantize(packed, zeros.shape, cfg)
    assert torch.equal(bits_of(y), bits_of(zeros))  # +0.0, not -0.0
    assert torch.equal(packed.scales, torch.zeros_like(packed.scales))
    x = sample((4, 9, 128), seed=9)
    x.view(-1, 64)[[0, 5, 11]] = 0.0
    packed = tah_quantize(x, cfg)
    y = tah_dequantize(packed, x.shape, cfg).view(-1, 64)
    assert torch.equal(y[[0, 5, 11]], torch.zeros(3, 64))
    assert packed.bits[[0, 5, 11]].tolist() == [cfg.min_bits] * 3


def test_stochastic_rounding_is_reproducible_and_unbiased():
    cfg = TahConfig(bits=2, min_bits=2, max_bits=2, rounding="stochastic")
    x = sample((2, 8, 64), seed=10)
    one = tah_quantize(x, cfg, torch.Generator().manual_seed(3))
    assert_same_packed(tah_quantize(x, cfg, torch.Generator().manual_seed(3)), one)
    assert not torch.equal(tah_quantize(x, cfg, torch.Generator().manual_seed(4)).codes,
                           one.codes)
    g = torch.Generator().manual_seed(0)
    mean = sum(tah_dequantize(tah_quantize(x, cfg, g), x.shape, cfg) for _ in range(200)) / 200
    single = tah_dequantize(one, x.shape, cfg)
    assert (mean - x).norm() < 0.2 * (single - x).norm()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dequantize_dtype_is_one_rounding_of_fp32(dtype):
    x, cfg = sample((3, 5, 64), seed=11), TahConfig()
    packed = tah_quantize(x, cfg)
    want = tah_dequantize(packed, x.shape, cfg).to(dtype)
    assert torch.equal(bits_of(tah_dequantize(packed, x.shape, cfg, dtype)), bits_of(want))


# ---------------------------------------------------------------------------
# Config and argument errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("fields,error,words", [
    (dict(bits=5), ValueError, ["bits", "5", "max_bits=4"]),
    (dict(bits=1.5), ValueError, ["bits", "1.5", "min_bits=2"]),
    (dict(bits=float("nan")), ValueError, ["bits", "nan"]),
    (dict(bits="3"), TypeError, ["bits", "'3'"]),
    (dict(bits=True), TypeError, ["bits", "True"]),
    (dict(min_bits=0), ValueError, ["min_bits", "0"]),
    (dict(max_bits=9), ValueError, ["max_bits", "9"]),
    (dict(min_bits=4, max_bits=3, bits=3), ValueError, ["min_bits", "4", "max_bits=3"]),
    (dict(min_bits=2.0), TypeError, ["min_bits", "2.0"]),
    (dict(tile_size=48), ValueError, ["tile_size", "power of two", "48"]),
    (dict(tile_size=4), ValueError, ["tile_size", "8..256", "4"]),
    (dict(tile_size=512), ValueError, ["tile_size", "512"]),
    (dict(hadamard=1), TypeError, ["hadamard", "1"]),
    (dict(pivot_swap="yes"), TypeError, ["pivot_swap", "'yes'"]),
    (dict(hadamard=False), ValueError, ["pivot_swap", "hadamard=False"]),
    (dict(rounding="up"), ValueError, ["rounding", "'up'"]),
], ids=str)
def test_bad_config_names_field_and_value(fields, error, words):
    with pytest.raises(error) as info:
        TahConfig(**fields)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_bad_call_arguments_name_argument_and_value():
    x, cfg = sample((3, 37, 64)), TahConfig()

    def raises(error, words, fn, *args, **kw):
        with pytest.raises(error) as info:
            fn(*args, **kw)
        for word in words:
            assert word in str(info.value), (word, str(info.value))

    raises(ValueError, ["shape", "()"], tile_count, (), cfg)
    raises(TypeError, ["x", "torch.int32"], tah_quantize, x.int(), cfg)
    raises(TypeError, ["x", "list"], tah_quantize, [1.0], cfg)
    raises(TypeError, ["cfg", "QuantConfig"], tah_quantize, x, quant.QuantConfig())
    raises(ValueError, ["generator", "None"], tah_quantize, x, TahConfig(rounding="stochastic"))
    raises(ValueError, ["backend", "'cuda'"], tah_quantize, x, cfg, backend="cuda")
    packed = tah_quantize(x, cfg)
    raises(ValueError, ["packed.codes", str(packed.codes.numel() - 1)], tah_dequantize,
           packed._replace(codes=packed.codes[:-1]), x.shape, cfg)
    raises(TypeError, ["packed.scales", "torch.float16", "torch.float32"], tah_dequantize,
           packed._replace(scales=packed.scales.float()), x.shape, cfg)
    raises(ValueError, ["packed.bits", "2..4", "5"], tah_dequantize,
           packed._replace(bits=torch.full_like(packed.bits, 5)), x.shape, cfg)
    wrong = packed.bits.clone()
    wrong[0] = 4 if int(wrong[0]) != 4 else 3
    raises(ValueError, ["packed.bits", "sum"], tah_dequantize, packed._replace(bits=wrong),
           x.shape, cfg)
    raises(ValueError, ["packed.pivots", "64"], tah_dequantize,
           packed._replace(pivots=torch.full_like(packed.pivots, 64)), x.shape, cfg)
    raises(TypeError, ["packed", "TahPacked", "list"], tah_dequantize, list(packed[:2]),
           x.shape, cfg)
    raises(TypeError, ["dtype", "torch.int32"], tah_dequantize, packed, x.shape, cfg,
           torch.int32)


def test_import_and_run_without_triton():
    """`auto` on CPU never touches the Triton path; forcing it fails with ImportError."""
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # any `import triton` now raises ImportError
        import torch
        from aqsgd import quant
        x = torch.randn(4, 8, 64)
        cfg = quant.TahConfig()
        for backend in ("auto", "torch"):
            quant.tah_dequantize(quant.tah_quantize(x, cfg, backend=backend), x.shape, cfg)
        assert "aqsgd.quant.tah_triton_launch" not in sys.modules
        try:
            quant.tah_quantize(x, cfg, backend="triton")
        except ImportError:
            print("OK")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK"


def test_reference_backend_gives_the_torch_paths_bytes():
    x, cfg = sample((3, 37, 64)), TahConfig(rounding="stochastic")
    got = tah_quantize(x, cfg, torch.Generator().manual_seed(3), backend="reference")
    want = tah_quantize(x, cfg, torch.Generator().manual_seed(3), backend="torch")
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
