"""TAH-Quant as published (aqsgd.quant.tahpub, tahpub_config): each step on hand-computed
cases (token entropy and widths, the transform test, pivot swap and Hadamard, the
asymmetric grid with its ties to even), one whole message worked by hand, the wire sized
for the worst case, exact round trips on irregular shapes, error bounds, argument checks."""

from __future__ import annotations

import math

import pytest
import torch

from aqsgd.quant import tahpub
from aqsgd.quant.bitpack import packed_nbytes, unpack
from aqsgd.quant.tahpub_config import TahPubConfig, TahPubPacked, layout, wire_nbytes, wire_spec

# irregular: odd sequence counts and lengths, widths not a multiple of the tile, 2-D rows
SHAPES = [(3, 10, 100), (2, 7, 5, 72), (5, 40), (1, 1, 8), (4, 13, 128), (2, 33, 24)]
CONFIGS = [TahPubConfig(), TahPubConfig(high_bits=2, low_bits=1),
           TahPubConfig(high_bits=8, low_bits=5, tile_size=8, high_share=0.5),
           TahPubConfig(high_bits=3, low_bits=3, tile_size=16, high_share=1.0)]


def _config_for(shape, cfg: TahPubConfig) -> TahPubConfig:
    """cfg with the tile no wider than the next power of two of the row (as the mode)."""
    tile = min(cfg.tile_size, max(8, 1 << (shape[-1] - 1).bit_length()))
    return TahPubConfig(cfg.high_bits, cfg.low_bits, tile, cfg.high_share)


# --- per-token widths -------------------------------------------------------------------
def test_token_entropy_of_a_one_hot_token_is_zero_and_of_a_flat_one_log_d():
    x = torch.tensor([[[0.0, -3.0, 0.0, 0.0], [1.0, -1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0]]])
    got = tahpub.token_entropy(x)
    assert got.shape == (1, 3)
    assert torch.allclose(got, torch.tensor([[0.0, math.log(4), 0.0]]), atol=1e-6)


def test_the_lowest_entropy_tokens_of_each_sequence_get_the_low_width_ties_to_the_earlier():
    entropy = torch.tensor([[3.0, 1.0, 2.0, 0.5, 5.0], [1.0, 1.0, 1.0, 0.0, 1.0]])
    low = tahpub.token_map(entropy, 2)
    assert low.tolist() == [[False, True, False, True, False],
                            [True, False, False, True, False]]
    order = tahpub.token_order(low)  # low tokens first, each group in its own order
    assert order.tolist() == [[1, 3, 0, 2, 4], [0, 3, 1, 2, 4]]


@pytest.mark.parametrize("tokens,share,low", [(10, 0.8, 2), (128, 0.8, 25), (64, 0.8, 12),
                                              (5, 0.8, 1), (7, 1.0, 0), (7, 0.0, 7)])
def test_the_low_token_count_is_the_floor_of_the_share_read_as_written(tokens, share, low):
    # (10, 0.8): the published int(10 * (1 - 0.8)) is 1, a float artefact; floor(10 x 1/5) = 2
    assert layout((3, tokens, 64), TahPubConfig(high_share=share)).low_tokens == low


# --- which tiles are transformed, and how ------------------------------------------------
def test_a_tile_is_transformed_when_its_largest_magnitude_is_at_least_twice_the_second():
    tiles = torch.tensor([[8.0, -4.0, 1, 0, 0, 0, 0, 0],    # 8 >= 2 x 4
                          [7.0, -4.0, 1, 0, 0, 0, 0, 0],    # 7 < 8
                          [0.0] * 8,                         # 0 >= 2 x 0, as published
                          [5.0, 0, 0, -5.0, 0, 0, 0, 0],    # a tie is the second largest
                          [0.0, 0, 0, 0, 0, 0, -9.0, 4.5]])  # sign does not matter
    assert tahpub.transform_map(tiles).tolist() == [True, False, True, False, True]


def test_the_pivot_goes_to_the_front_then_hadamard_and_back_exactly():
    tiles = torch.tensor([[0.0, 0, 0, 8.0, 0, 0, 0, 0], [1.0, 2, 3, 4, 5, 6, 7, 8]])
    mask = torch.tensor([True, False])
    out, pivots = tahpub.transform(tiles, mask)
    assert pivots.tolist() == [3]
    # the pivot at position 0 meets Hadamard's constant column: 8 / sqrt(8) everywhere
    assert torch.allclose(out[0], torch.full((8,), 8 / math.sqrt(8)))
    assert torch.equal(out[1], tiles[1])  # untouched
    back = tahpub.untransform(out, mask, pivots)
    assert torch.allclose(back, tiles, atol=1e-6)


# --- the asymmetric grid ------------------------------------------------------------------
def test_a_tile_is_coded_from_its_minimum_in_steps_of_its_range_over_the_levels():
    tiles = torch.tensor([[-1.0, 0.4, 0.5, 1.5, 2.0, 2.0, -1.0, 0.0]])
    bits = torch.tensor([2], dtype=torch.uint8)
    zero, scale = tahpub.tile_affine(tiles, bits)
    assert zero.dtype == scale.dtype == torch.float16
    assert (float(zero[0]), float(scale[0])) == (-1.0, 1.0)  # (2 - -1) / (2**2 - 1)
    codes = tahpub.quantize_tiles(tiles, zero, scale, bits)
    # steps 0, 1.4, 1.5, 2.5, 3, 3, 0, 1: round to nearest, ties to even (1.5 -> 2, 2.5 -> 2)
    assert codes.tolist() == [[0, 1, 2, 2, 3, 3, 0, 1]]
    assert tahpub.dequantize_tiles(codes, zero, scale).tolist() == [
        [-1.0, 0.0, 1.0, 1.0, 2.0, 2.0, -1.0, 0.0]]


def test_a_constant_tile_codes_zero_and_comes_back_as_its_fp16_value():
    tiles = torch.full((1, 8), 0.1)
    bits = torch.tensor([4], dtype=torch.uint8)
    zero, scale = tahpub.tile_affine(tiles, bits)
    codes = tahpub.quantize_tiles(tiles, zero, scale, bits)
    assert float(scale[0]) == 0.0 and codes.tolist() == [[0] * 8]
    assert torch.equal(tahpub.dequantize_tiles(codes, zero, scale),
                       torch.full((1, 8), float(torch.tensor(0.1).half())))


def test_the_grid_error_is_at_most_half_a_step_plus_fp16_rounding():
    g = torch.Generator().manual_seed(3)
    tiles = torch.randn(50, 64, generator=g) * torch.logspace(-2, 2, 50)[:, None]
    for b in (1, 3, 4, 8):
        bits = torch.full((50,), b, dtype=torch.uint8)
        zero, scale = tahpub.tile_affine(tiles, bits)
        got = tahpub.dequantize_tiles(tahpub.quantize_tiles(tiles, zero, scale, bits), zero,
                                      scale)
        slack = 2**-10 * tiles.abs().amax(dim=1, keepdim=True) * (1 << b)
        assert ((got - tiles).abs() <= scale.float()[:, None] / 2 + slack).all()


# --- one whole message, worked by hand ----------------------------------------------------
def test_one_message_by_hand():
    # 1 sequence of 5 tokens of 8 channels, one tile each; floor(5 x 0.2) = 1 low token
    cfg = TahPubConfig(high_bits=4, low_bits=3, tile_size=8)
    x = torch.tensor([[[0.0, 1, 2, 3, 4, 5, 6, 7]] * 5])  # (1, 5, 8)
    x[0, 2] = torch.tensor([0.0, 0, 0, 9.0, 0, 0, 0, 0])  # one-hot: entropy 0, pivot 3
    packed = tahpub.quantize(x, cfg)
    assert packed.token_map.tolist() == [0b00100]  # token 2 travels at 3 bits
    assert packed.tile_map.tolist() == [0b00001]  # tokens as sent: 2, 0, 1, 3, 4
    assert packed.pivots.tolist() == [3, 0]  # 3 bits a tile, room for all 5 tiles
    assert packed.codes_low.tolist() == [0, 0, 0]  # 9/sqrt(8) in every place: scale 0
    assert float(packed.zeros[0]) == float(torch.tensor(9 / math.sqrt(8)).half())
    # the other tokens: 0..7 on 16 levels, scale fp16(7/15); codes round(v / scale)
    scale = float(torch.tensor(7 / 15).half())
    assert packed.scales[1:].tolist() == [scale] * 4
    codes = [0, 2, 4, 6, 9, 11, 13, 15]
    assert [round(v / scale) for v in range(8)] == codes
    want = bytes(lo | hi << 4 for lo, hi in zip(codes[::2], codes[1::2], strict=True)) * 4
    assert bytes(packed.codes_high.tolist()) == want
    y = tahpub.dequantize(packed, x.shape, cfg)
    assert torch.equal(y[0, [0, 1, 3, 4]], torch.tensor([[c * scale for c in codes]] * 4))
    assert torch.allclose(y[0, 2], x[0, 2], atol=0.01)


def test_the_wire_has_room_for_every_pivot_and_its_size_by_formula():
    cfg = TahPubConfig()
    shape = (8, 64, 128)  # 12 low tokens a sequence; 1024 tiles
    n_tiles, low, high = 1024, 8 * 12 * 128, 8 * 52 * 128
    assert wire_nbytes(shape, cfg) == (low * 3 // 8 + high * 4 // 8 + 4 * n_tiles
                                       + 8 * 64 // 8 + n_tiles // 8 + n_tiles * 6 // 8)
    assert wire_nbytes(shape, cfg) == 36288  # 4.43 bits an element
    x = torch.randn(shape).clamp(-3, 3)
    x[..., 5::64] = 100.0  # every tile has an outlier at 5: every pivot is used
    packed = tahpub.quantize(x, cfg)
    assert int(unpack(packed.tile_map, 1, n_tiles).sum()) == n_tiles
    assert packed.pivots.numel() == packed_nbytes(n_tiles, 6)
    five = torch.full((n_tiles,), 5, dtype=torch.uint8)
    assert torch.equal(unpack(packed.pivots, 6, n_tiles), five)


# --- irregular shapes ---------------------------------------------------------------------
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.high_bits}-{c.low_bits}-"
                                                      f"{c.tile_size}-{c.high_share}")
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_shape_sends_its_spec_and_comes_back_within_half_a_step(shape, cfg):
    cfg = _config_for(shape, cfg)
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g) * torch.logspace(-1, 1, shape[-1])
    x.view(-1)[::7] *= 30.0  # outliers: some tiles transformed, some not
    packed = tahpub.quantize(x, cfg)
    assert [(tuple(t.shape), t.dtype) for t in packed] == [(tuple(s), d) for s, d in
                                                           wire_spec(shape, cfg)]
    y = tahpub.dequantize(packed, shape, cfg)
    assert y.shape == x.shape and y.dtype == torch.float32
    # the Hadamard transform keeps a tile's L2 error: a row's is at most a half-step (of
    # the widest step) an element, plus fp16's rounding of zero point and scale
    step = float(packed.scales.float().max())
    lay = layout(shape, cfg)
    fp16 = 2**-9 * math.sqrt(cfg.tile_size) * float(x.abs().max())
    bound = math.sqrt(lay.tiles_per_token * cfg.tile_size) * (step / 2 + fp16)
    assert float((y - x).reshape(-1, shape[-1]).norm(dim=-1).max()) <= bound
    assert torch.equal(tahpub.dequantize(tahpub.quantize(x, cfg), shape, cfg), y)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_on_each_tiles_grid_come_back_exactly(shape):
    # integer tiles spanning 0..7 at 3 bits (no tile transformed: 7 and 7 tie): exact
    cfg = _config_for(shape, TahPubConfig(high_bits=3, low_bits=3))
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 8, shape, generator=g).float()
    tiles = x.reshape(-1, shape[-1])
    for start in range(0, shape[-1], cfg.tile_size):
        end = min(start + cfg.tile_size, shape[-1])
        if end - start >= 2:
            tiles[:, start], tiles[:, start + 1] = 0.0, 7.0
    if shape[-1] % cfg.tile_size:  # zero padding: 7 still ties
        tiles[:, -1] = 7.0
    assert torch.equal(tahpub.dequantize(tahpub.quantize(x, cfg), shape, cfg), x)


# --- argument checks -----------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    (dict(low_bits=5), r"low_bits must be <= high_bits=4, got 5"),
    (dict(tile_size=48), r"tile_size must be a power of two .*got 48"),
    (dict(tile_size=4), r"TahPubConfig.tile_size must be in 8\.\.256, got 4"),
    (dict(high_share=1.5), r"TahPubConfig.high_share must be in \[0, 1\], got 1.5"),
    (dict(high_bits=9), r"high_bits must be in 1\.\.8, got 9"),
])
def test_a_bad_config_names_the_field_and_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TahPubConfig(**kwargs)


def test_a_part_of_the_wrong_size_is_named():
    cfg = TahPubConfig()
    packed = tahpub.quantize(torch.randn(2, 10, 64), cfg)
    bad = TahPubPacked(*packed)._replace(pivots=packed.pivots[:-1])
    with pytest.raises(ValueError, match=r"pivots must have shape \(15,\) for shape "
                                         r"\(2, 10, 64\), got \(14,\)"):
        tahpub.dequantize(bad, (2, 10, 64), cfg)
    with pytest.raises(ValueError, match=r"x must be \(N, \.\.\., D\)"):
        layout((5,), cfg)
