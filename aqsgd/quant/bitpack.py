"""Dense little-endian bit packing of 1..8-bit codes (torch, CPU and CUDA).

The stream layout is part of the quantizer contract (docs/architecture/quant.md, "Packing"):
code k occupies stream bits [k*b, (k+1)*b), stream bit j is bit j % 8 of byte j // 8,
padding bits are zero.

    packed = pack(codes, bits)         # uint8 codes (< 2**bits) -> (packed_nbytes(n, bits),)
    codes = unpack(packed, bits, n)
"""

from __future__ import annotations

import functools
import sys

import torch

__all__ = ["BYTE_WIDTHS", "byte_table", "lane_views", "pack", "pack_codes", "pack_into",
           "pack_lanes", "pack_plan", "packed_nbytes", "padded_bytes", "unpack", "unpack_codes"]


def packed_nbytes(n: int, bits: int) -> int:
    """Bytes of the dense stream holding n codes of `bits` bits: ceil(n * bits / 8)."""
    return (n * bits + 7) // 8


def _check_bits(bits) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise TypeError(f"bits must be an int, got {bits!r} ({type(bits).__name__})")
    if not 1 <= bits <= 8:
        raise ValueError(f"bits must be in 1..8, got {bits}")


# Note on packing
# ----------------
# The stream is little-endian: code k occupies stream bits [k*b, (k+1)*b), stream bit j
# is bit j % 8 of byte j // 8. On a little-endian host, viewing bytes as a wider integer
# puts byte i at bits [8i, 8i+8) of the word, so "merge two neighbouring f-bit fields
# held in C-bit lanes into one 2f-bit field in a 2C-bit lane" is a shift and an or on
# the 2C-bit view, plus masks where a field's stray copy could overlap another (fields
# are kept clean: zero above their width). Repeating that turns 8 codes into 8b
# contiguous bits. While
# a merged field fits a byte (2f <= 8) the lanes are narrowed back to uint8, so b = 1, 2,
# 4 finish on whole bytes with every pass on fewer bytes; other widths end with lanes
# holding a whole number of bytes and copy out those bytes. Unpacking runs the steps
# backwards. Every pass is one vectorised integer op over at most n bytes.

_LANE_DTYPES = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}


def pack_plan(bits: int) -> tuple[list[tuple[int, int, bool]], int, int]:
    """Merge steps [(lane bits C, field bits f, narrow)]: C-bit lanes of f-bit fields ->
    2C-bit lanes of 2f-bit fields, narrowed back to bytes when `narrow`; then the final
    (lane bits, field bits). Every plan merges 8 codes (b whole bytes) per final lane,
    except b = 1, 2, 4 (a byte holds 8 / b codes) and b = 8 (nothing to do)."""
    plan, lane, field = [], 8, bits
    while field % 8:
        narrow = lane == 8 and 2 * field <= 8
        plan.append((lane, field, narrow))
        field *= 2
        lane = lane if narrow else 2 * lane
    return plan, lane, field


def _check_little_endian() -> None:
    if sys.byteorder != "little":
        raise RuntimeError(f"bit packing assumes a little-endian host, got {sys.byteorder}")


def padded_bytes(n: int) -> int:
    return -(-n // 8) * 8


def pack_codes(codes: torch.Tensor, n: int, bits: int) -> torch.Tensor:
    """Dense stream of the first n codes of `codes`: an owned, storage-aligned uint8 buffer
    of padded_bytes(n) codes < 2**bits whose tail beyond n is 0 (padding codes); it is
    overwritten. Fields stay clean (zero above their width) from merge to merge."""
    _check_little_endian()
    nbytes = packed_nbytes(n, bits)
    plan, lane, field = pack_plan(bits)
    w = codes
    for c, f, narrow in plan:
        wide = w.view(_LANE_DTYPES[2 * c])  # lanes [field0 | field1 << C]
        hi = wide >> (c - f)  # field1 -> bits [f, 2f)
        if narrow:
            # field0 fell off the bottom (f <= C - f); the copy of field1 left at bit C
            # by the or is above the byte and dropped by the (modular) narrowing
            w = hi.bitwise_or_(wide).to(torch.uint8)
            continue
        if 2 * f > c:  # the top bits of field0 are still in hi
            hi.bitwise_and_(((1 << f) - 1) << f)
        w = wide.bitwise_and_((1 << f) - 1).bitwise_or_(hi)
    stream = w.view(torch.uint8)
    if field != lane:  # lanes hold field/8 stream bytes each: copy them out
        stream = stream.view(-1, lane // 8)[:, : field // 8].reshape(-1)
    return stream[:nbytes]


# Widths whose codes never straddle a byte: a byte holds 8 / b codes, so 8 / b codes in
# one (8 / b)-byte lane pack into one byte by log2(8 / b) shift-or steps, and a byte
# unpacks into such a lane by one table lookup.
BYTE_WIDTHS = {1: torch.int64, 2: torch.int32, 4: torch.int16}


def pack_into(codes: torch.Tensor, n: int, bits: int, out: torch.Tensor,
              scratch: torch.Tensor | None = None) -> None:
    """out (uint8, packed_nbytes(n, bits)) <- the stream of the first n codes of `codes`,
    an owned uint8 buffer of padded_bytes(n) codes < 2**bits whose tail beyond n is 0; it
    is overwritten. `scratch`: optional uint8 buffer of at least padded_bytes(n) bytes."""
    if bits == 8:
        out.copy_(codes[:n])
        return
    if bits not in BYTE_WIDTHS:
        out.copy_(pack_codes(codes, n, bits))
        return
    nbytes = padded_bytes(n)
    if scratch is None:
        scratch = torch.empty(nbytes, dtype=torch.uint8, device=codes.device)
    a, b = lane_views(codes, scratch, n, bits)
    pack_lanes(a, b, bits, out)


def lane_views(codes: torch.Tensor, scratch: torch.Tensor, n: int,
               bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (8 / b)-byte lane views of the first padded_bytes(n) bytes of an owned code
    buffer and of a scratch buffer, for pack_lanes (b in BYTE_WIDTHS)."""
    _check_little_endian()
    nbytes = padded_bytes(n)
    lane_dtype = BYTE_WIDTHS[bits]
    return codes[:nbytes].view(lane_dtype), scratch[:nbytes].view(lane_dtype)


def pack_lanes(a: torch.Tensor, b: torch.Tensor, bits: int, out: torch.Tensor) -> None:
    """out (uint8) <- byte 0 of every lane of `a` after merging its 8 / b codes there;
    `a` (clean codes, one per byte) and `b` are overwritten.

    Lane j (8 / b bytes, code k in byte k): step s ors in the lane shifted right by
    (8 - b) * 2**s, moving the field of 2**s codes at byte 2**s down next to the one at
    byte 0. Fields never overlap (codes are clean), nothing useful is shifted out of a
    lane, and lanes' top bytes are < 128, so the arithmetic shift brings in zeros; the
    final narrowing keeps byte 0 (mod 256)."""
    shift = 8 - bits
    steps = (8 // bits).bit_length() - 1  # log2 of codes per lane
    for step in range(steps):
        torch.bitwise_right_shift(a, shift, out=b)
        if step == steps - 1 and b.numel() == out.numel():
            torch.bitwise_or(b, a, out=out)  # narrowed to bytes on the way out
            return
        b.bitwise_or_(a)
        a, b = b, a
        shift *= 2
    out.copy_(a[: out.numel()])


def byte_table(bits: int, offset: int, device: torch.device | str) -> torch.Tensor:
    """(256,) lanes of BYTE_WIDTHS[bits]: lane v's byte k is ((v >> k*b) & mask) - offset
    (mod 256), i.e. the codes of byte v minus `offset`, as uint8 (offset 0) or as the int8
    two's complement of c - offset."""
    return _byte_table(bits, offset, str(device))


@functools.lru_cache(maxsize=32)
def _byte_table(bits: int, offset: int, device: str) -> torch.Tensor:
    per, mask = 8 // bits, (1 << bits) - 1
    lanes = []
    for v in range(256):
        word = 0
        for k in range(per):
            word |= ((((v >> (k * bits)) & mask) - offset) % 256) << (8 * k)
        if word >> (8 * per - 1):  # two's complement of the lane dtype
            word -= 1 << (8 * per)
        lanes.append(word)
    return torch.tensor(lanes, dtype=BYTE_WIDTHS[bits], device=device)


def unpack_codes(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Codes of a dense stream: uint8 (padded_bytes(n),), values < 2**bits, owned."""
    _check_little_endian()
    plan, lane, field = pack_plan(bits)
    n_pad = padded_bytes(n)
    full = n_pad * bits // 8  # bytes of whole final lanes
    if field == lane:
        if packed.numel() == full and (plan and plan[-1][2]):
            buf = packed  # widened (copied) below before anything is written
        else:
            buf = torch.zeros(full, dtype=torch.uint8, device=packed.device)
            buf[: packed.numel()] = packed
    else:
        buf = torch.zeros((full * 8 // field, lane // 8), dtype=torch.uint8,
                          device=packed.device)
        src = torch.zeros(full, dtype=torch.uint8, device=packed.device)
        src[: packed.numel()] = packed
        buf[:, : field // 8].copy_(src.view(-1, field // 8))
    w = buf.view(_LANE_DTYPES[lane]).view(-1)
    for c, f, narrow in reversed(plan):
        wide = w.to(torch.int16) if narrow else w  # 2C-bit lanes of 2f-bit fields
        hi = wide << (c - f)  # bits [f, 2f) -> [C, C + f)
        hi.bitwise_and_(((1 << f) - 1) << c)
        wide.bitwise_and_((1 << f) - 1).bitwise_or_(hi)
        w = wide.view(_LANE_DTYPES[c])
    return w.view(torch.uint8)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Dense little-endian stream of uint8 codes (any shape, flat order), each < 2**bits:
    uint8 (packed_nbytes(codes.numel(), bits),)."""
    _check_bits(bits)
    if not isinstance(codes, torch.Tensor) or codes.dtype != torch.uint8:
        raise TypeError(f"codes must be a uint8 tensor, got {getattr(codes, 'dtype', codes)}")
    n = codes.numel()
    if n and int(codes.max()) >> bits:
        raise ValueError(f"codes must be < 2**bits = {1 << bits}, got max {int(codes.max())}")
    buf = torch.zeros(padded_bytes(n), dtype=torch.uint8, device=codes.device)
    buf[:n] = codes.reshape(-1)
    return pack_codes(buf, n, bits)


def unpack(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """The n codes of a dense stream made by `pack`: uint8 (n,)."""
    _check_bits(bits)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise TypeError(f"packed must be a uint8 tensor, got {getattr(packed, 'dtype', packed)}")
    if packed.dim() != 1 or packed.numel() != packed_nbytes(n, bits):
        raise ValueError(f"packed must be 1-D with packed_nbytes({n}, {bits})="
                         f"{packed_nbytes(n, bits)} bytes, got shape {tuple(packed.shape)}")
    return unpack_codes(packed, bits, n)[:n]
