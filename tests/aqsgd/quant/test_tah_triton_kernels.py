"""TAH-Quant's Triton kernels against its torch path and its reference, bit for bit, under
the Triton interpreter.

Run: .venv/bin/python -m pytest tests/aqsgd/quant/test_tah_triton_kernels.py -q

The kernels run on CPU tensors through the interpreter (TRITON_INTERPRET=1, set by
tests/conftest.py and again here before anything imports Triton; see
tests/aqsgd/quant/test_triton_kernels.py for why it must be set that early). The
interpreter costs milliseconds per program, so the launcher gives each program up to 64K
elements; the shapes below still span several programs with a partial last one. Nothing
here needs a GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytestmark = pytest.mark.triton

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import triton  # noqa: F401  (in CI a missing Triton is a failure, not a skip)
else:
    pytest.importorskip("triton")

from aqsgd import quant  # noqa: E402
from aqsgd.quant import tah_reference as reference  # noqa: E402
from aqsgd.quant import tah_triton_launch as launch  # noqa: E402
from aqsgd.quant.tah import TahConfig, TahPacked, tah_dequantize, tah_quantize  # noqa: E402

if not launch._interpreted():
    raise RuntimeError("aqsgd.quant.tah_triton_kernels was built compiled (triton imported "
                       "before this module set TRITON_INTERPRET=1): run this file in its own "
                       "pytest process, or set TRITON_INTERPRET=1")

SHAPES = [((3, 37, 64), 64), ((5, 7, 192), 64), ((2, 9, 24), 8), ((4, 96), 32),
          ((1, 3, 256), 256), ((3, 5, 100), 64)]
PAPERISH = (2, 129, 1600)  # 6450 tiles of 64: 7 programs, the last one partial
CONFIGS = [
    dict(),
    dict(pivot_swap=False),
    dict(hadamard=False, pivot_swap=False),
    dict(rounding="stochastic", bits=2.7, min_bits=1, max_bits=6),
]


def sample(shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    """Activation-like: channel and token scales, outliers, ties and zero tiles."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.logspace(-1.5, 1.5, shape[-1])
    x = x * torch.rand(shape[:-1] + (1,), generator=g).mul(4).exp()
    x.view(-1)[:: max(1, x.numel() // 13)] *= 40.0
    x.view(-1)[5:9] = 3.0
    x.view(-1)[-8:] = 0.0
    return x.to(dtype)


def bits_of(t: torch.Tensor) -> torch.Tensor:
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def assert_same_packed(got: TahPacked, want: TahPacked) -> None:
    for name, a, b in zip(TahPacked._fields, got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.shape, b.shape)
        diff = torch.nonzero(bits_of(a) != bits_of(b)).view(-1)
        assert diff.numel() == 0, f"{name}: {diff.numel()} differ, first at {diff[:5].tolist()}"


def check_kernels(x: torch.Tensor, cfg: TahConfig, with_reference: bool = True) -> None:
    """Kernels against the torch path (and the reference) through the public calls."""
    gen = (lambda: torch.Generator().manual_seed(3)) if cfg.stochastic else (lambda: None)
    got = tah_quantize(x, cfg, gen(), backend="triton")
    want = tah_quantize(x, cfg, gen(), backend="torch")
    assert_same_packed(got, want)
    if with_reference:
        assert_same_packed(got, reference.quantize_packed(x, cfg, quant.draw_seed(gen(), cfg)))
    for dtype in (x.dtype, torch.float32):
        values = tah_dequantize(want, x.shape, cfg, dtype, backend="triton")
        expect = tah_dequantize(want, x.shape, cfg, dtype, backend="torch")
        assert values.dtype == dtype and values.shape == x.shape
        assert torch.equal(bits_of(values), bits_of(expect)), f"values differ ({dtype})"


@pytest.mark.parametrize("size,n_tiles", [(8, 3000), (32, 1000), (64, 2500), (256, 300)])
def test_hadamard_kernel_matches_reference(size, n_tiles):
    v = torch.randn(n_tiles, size, generator=torch.Generator().manual_seed(size))
    assert torch.equal(launch.hadamard_tiles(v), reference.hadamard(v))


@pytest.mark.parametrize("shape,tile", SHAPES, ids=str)
@pytest.mark.parametrize("fields", CONFIGS, ids=str)
def test_kernels_bit_exact_irregular_shapes(shape, tile, fields):
    check_kernels(sample(shape), TahConfig(tile_size=tile, **fields))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fields", CONFIGS[::3], ids=str)
def test_kernels_bit_exact_dtypes(dtype, fields):
    check_kernels(sample((5, 7, 192), dtype, seed=1), TahConfig(**fields))


@pytest.mark.parametrize("fields", [dict(), dict(rounding="stochastic", bits=3.3)], ids=str)
def test_kernels_bit_exact_over_several_programs(fields):
    check_kernels(sample(PAPERISH, seed=2), TahConfig(**fields), with_reference=False)


def test_kernels_zero_tensor():
    cfg = TahConfig()
    zeros = torch.zeros(4, 9, 64)
    packed = tah_quantize(zeros, cfg, backend="triton")
    assert_same_packed(packed, tah_quantize(zeros, cfg, backend="torch"))
    values = tah_dequantize(packed, zeros.shape, cfg, backend="triton")
    assert torch.equal(bits_of(values), bits_of(zeros))


def test_kernels_pivot_ties_pick_the_first():
    """Equal magnitudes: the first position is the pivot, as torch.argmax picks it."""
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(4)) * 0.1
    x[:, 3], x[:, 10], x[1, 0] = 5.0, -5.0, -5.0
    packed = tah_quantize(x, TahConfig(), backend="triton")
    assert packed.pivots.tolist() == [3, 0, 3, 3]
    assert_same_packed(packed, tah_quantize(x, TahConfig(), backend="torch"))
