"""Chunked unpacking of a packed code stream for the CPU path's decode (aqsgd.quant.cpu).

Each generator walks the row chunks of a (rows, width) view and yields, per chunk, the
levels c - Q (int8, reference grid) or c (uint8, symmetric grid), or for 4-bit codes the
fp32 values c - center directly. Chunks start on whole bytes of the stream (the chunk
geometry of aqsgd.quant.cpu), so each one is decoded on its own.
"""

from __future__ import annotations

import functools

import torch

from aqsgd.quant.bitpack import byte_table, packed_nbytes, padded_bytes, unpack_codes
from aqsgd.quant.config import QuantConfig

__all__ = ["chunk_levels", "levels_of", "pair_values", "signed_levels"]


def signed_levels(codes: torch.Tensor, cfg: QuantConfig) -> torch.Tensor:
    """Reference grid: codes -> c - Q as int8 (uint8 subtraction wraps mod 256); in place."""
    if cfg.symmetric:
        return codes
    return codes.sub_(1 << (cfg.bits - 1)).view(torch.int8)


def levels_of(packed: torch.Tensor, n: int, cfg: QuantConfig) -> torch.Tensor:
    """(n,) int8 c - Q (reference) or uint8 c (symmetric) of a packed stream."""
    return signed_levels(unpack_codes(packed, cfg.bits, n), cfg)[:n]


def chunk_levels(packed: torch.Tensor, n: int, cfg: QuantConfig, chunk_rows: int, width: int):
    """(r0, r1, levels of rows r0:r1 as (r1 - r0, width) int8 c - Q (reference) or uint8 c
    (symmetric)) over the row chunks, for widths whose chunks start on whole bytes of
    the stream (1, 2, 4: one table lookup per byte; 8: the bytes are the codes)."""
    bits, device = cfg.bits, packed.device
    offset = 0 if cfg.symmetric else 1 << (bits - 1)
    level_dtype = torch.uint8 if cfg.symmetric else torch.int8
    cap = padded_bytes(chunk_rows * width)
    if bits == 8:
        shifted = torch.empty(cap, dtype=torch.uint8, device=device) if offset else None
    else:
        table = byte_table(bits, offset, device)
        index = torch.empty(cap * bits // 8, dtype=torch.int32, device=device)
        lanes = torch.empty(cap * bits // 8, dtype=table.dtype, device=device)
    rows = n // width
    for r0 in range(0, rows, chunk_rows):
        r1 = min(r0 + chunk_rows, rows)
        start, count = r0 * width, (r1 - r0) * width
        src = packed[start * bits // 8: start * bits // 8 + packed_nbytes(count, bits)]
        if bits == 8:
            codes = src if shifted is None else torch.sub(src, offset, out=shifted[:count])
        else:
            k = src.numel()
            index[:k].copy_(src)
            codes = torch.index_select(table, 0, index[:k], out=lanes[:k]).view(torch.uint8)
        yield r0, r1, codes[:count].view(level_dtype).view(r1 - r0, width)


@functools.lru_cache(maxsize=16)
def _pair_table(symmetric: bool, device: str) -> torch.Tensor:
    """(256,) int64 whose bytes are the two fp32 values c - center of a 4-bit byte's codes
    (low nibble first): one 8-byte gather per byte writes both values, no conversion."""
    cfg = QuantConfig(bits=4, grid="symmetric" if symmetric else "reference")
    v = torch.arange(256, device=device)
    codes = torch.stack([v & 15, v >> 4], 1)
    return (codes.float() - cfg.center).view(torch.int64).view(256)  # exact: small numbers


def pair_values(packed: torch.Tensor, n: int, cfg: QuantConfig, chunk_rows: int, width: int,
                 dest: torch.Tensor | None):
    """(r0, r1, fp32 (r1 - r0, width) c - center) over the row chunks of a 4-bit stream,
    gathered straight into rows r0:r1 of `dest`, or into a work chunk."""
    table = _pair_table(cfg.symmetric, str(packed.device))
    cap = padded_bytes(chunk_rows * width)
    index = torch.empty(cap // 2, dtype=torch.int32, device=packed.device)
    work = torch.empty(cap, device=packed.device)
    rows = n // width
    for r0 in range(0, rows, chunk_rows):
        r1 = min(r0 + chunk_rows, rows)
        start, count = r0 * width, (r1 - r0) * width
        src = packed[start // 2: start // 2 + packed_nbytes(count, 4)]
        k = src.numel()
        index[:k].copy_(src)
        out = work[:count] if dest is None else dest[r0:r1].view(-1)
        if count % 2 == 0:  # out starts on a multiple of 8 elements
            torch.index_select(table, 0, index[:k], out=out.view(torch.int64))
        else:  # the last chunk of an odd count: its final byte holds one code
            pairs = torch.index_select(table, 0, index[:k]).view(torch.float32)
            out.copy_(pairs[:count])
        yield r0, r1, out.view(r1 - r0, width)
