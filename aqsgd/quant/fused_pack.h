// Dense little-endian bit packing of the fused CPU kernels (fused_kernels.cpp, the one file
// that includes this): code k occupies stream bits [k*b, (k+1)*b), stream bit j is bit j % 8
// of byte j // 8, padding bits are zero (docs/ARCHITECTURE.md, "Packing"). Tiles of TILE
// codes start on whole octets of codes (8 codes = b bytes), so each owns its bytes.

#pragma once

#include <cstdint>
#include <cstring>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the packed words below are the stream's bytes on a little-endian host only");

namespace {

constexpr int64_t TILE = 2048;  // codes per packing tile (multiple of 8)

// ---------------------------------------------------------------------------------------
// Packing: 8 codes (one per byte of a 64-bit word) <-> `B` bytes, by three shift-and-merge
// steps on 16-, 32- and 64-bit fields (the stream is little-endian, as the host)
// ---------------------------------------------------------------------------------------

template <int B>
inline uint64_t pack8(uint64_t w) {
  if constexpr (B == 8) {
    return w;
  } else {
    constexpr uint64_t m1 = 0x00FF00FF00FF00FFull & (0x0101010101010101ull * ((1u << B) - 1));
    constexpr uint64_t f2 = (1ull << (2 * B)) - 1;
    constexpr uint64_t f4 = (1ull << (4 * B)) - 1;
    // pairs of codes: [c0 | c1 << B] in each 16-bit field
    w = (w & m1) | ((w >> (8 - B)) & (m1 << B));
    // quads: [pair0 | pair1 << 2B] in each 32-bit field
    w = (w & (0x0000FFFF0000FFFFull & (f2 * 0x0000000100000001ull))) |
        ((w >> (16 - 2 * B)) & ((f2 << (2 * B)) * 0x0000000100000001ull));
    // octets: [quad0 | quad1 << 4B], 8B bits
    return (w & f4) | ((w >> (32 - 4 * B)) & (f4 << (4 * B)));
  }
}

template <int B>
inline uint64_t unpack8(uint64_t w) {
  if constexpr (B == 8) {
    return w;
  } else {
    constexpr uint64_t f1 = (1ull << B) - 1;
    constexpr uint64_t f2 = (1ull << (2 * B)) - 1;
    constexpr uint64_t f4 = (1ull << (4 * B)) - 1;
    // octet -> quads at bit 0 and bit 32
    w = (w & f4) | ((w << (32 - 4 * B)) & (f4 << 32));
    // quads -> pairs at bit 0 and bit 16 of each 32-bit field
    w = (w & (f2 * 0x0000000100000001ull)) |
        ((w << (16 - 2 * B)) & ((f2 << 16) * 0x0000000100000001ull));
    // pairs -> codes at bit 0 and bit 8 of each 16-bit field
    return (w & (f1 * 0x0001000100010001ull)) |
           ((w << (8 - B)) & ((f1 << 8) * 0x0001000100010001ull));
  }
}

// The word that holds one packed octet for widths 1, 2 and 4 (B bytes: one word per octet,
// so the loops below vectorise); other widths store 8 bytes per octet, of which the next
// octet rewrites the 8 - B beyond its own.
template <int B>
struct OctetWord {
  using type = void;
};
template <>
struct OctetWord<1> {
  using type = uint8_t;
};
template <>
struct OctetWord<2> {
  using type = uint16_t;
};
template <>
struct OctetWord<4> {
  using type = uint32_t;
};

// the first `octets` whole octets of codes -> octets * B bytes at `out`
template <int B>
inline void pack_octets(const uint8_t* __restrict codes, int64_t octets,
                        uint8_t* __restrict out) {
  if constexpr (B == 8) {
    std::memcpy(out, codes, static_cast<size_t>(octets) * 8);
  } else if constexpr (B == 1 || B == 2 || B == 4) {
    using W = typename OctetWord<B>::type;
    for (int64_t k = 0; k < octets; ++k) {
      uint64_t w;
      std::memcpy(&w, codes + 8 * k, 8);
      const W packed_word = static_cast<W>(pack8<B>(w));
      std::memcpy(out + k * B, &packed_word, B);
    }
  } else {
    // 8-byte stores, while they stay inside the octets * B bytes
    const int64_t wide = octets > 0 ? octets - (8 + B - 1) / B + 1 : 0;
    int64_t k = 0;
    for (; k < wide; ++k) {
      uint64_t w;
      std::memcpy(&w, codes + 8 * k, 8);
      w = pack8<B>(w);
      std::memcpy(out + k * B, &w, 8);
    }
    for (; k < octets; ++k) {
      uint64_t w;
      std::memcpy(&w, codes + 8 * k, 8);
      w = pack8<B>(w);
      std::memcpy(out + k * B, &w, B);
    }
  }
}

// n codes (n <= TILE; the buffer holds zeros up to the next multiple of 8) -> the
// packed_nbytes(n, B) bytes at `out`
template <int B>
void pack_tile(uint8_t* codes, int64_t n, uint8_t* out) {
  const int64_t whole = n / 8;
  pack_octets<B>(codes, whole, out);
  if (n % 8) {  // the stream's last, partial octet: its padding codes are zero
    uint8_t last[8];
    pack_octets<B>(codes + 8 * whole, 1, last);
    std::memcpy(out + whole * B, last, static_cast<size_t>((n % 8 * B + 7) / 8));
  }
}

// octets * B bytes at `in` -> 8 * octets codes
template <int B>
inline void unpack_octets(const uint8_t* __restrict in, int64_t octets,
                          uint8_t* __restrict codes) {
  if constexpr (B == 8) {
    std::memcpy(codes, in, static_cast<size_t>(octets) * 8);
  } else if constexpr (B == 1 || B == 2 || B == 4) {
    using W = typename OctetWord<B>::type;
    for (int64_t k = 0; k < octets; ++k) {
      W packed_word;
      std::memcpy(&packed_word, in + k * B, B);
      const uint64_t w = unpack8<B>(packed_word);
      std::memcpy(codes + 8 * k, &w, 8);
    }
  } else {
    // 8-byte loads, while they stay inside the octets * B bytes
    constexpr uint64_t low = (1ull << (8 * B)) - 1;
    const int64_t wide = octets > 0 ? octets - (8 + B - 1) / B + 1 : 0;
    int64_t k = 0;
    for (; k < wide; ++k) {
      uint64_t w;
      std::memcpy(&w, in + k * B, 8);
      w = unpack8<B>(w & low);
      std::memcpy(codes + 8 * k, &w, 8);
    }
    for (; k < octets; ++k) {
      uint64_t w = 0;
      std::memcpy(&w, in + k * B, B);
      w = unpack8<B>(w);
      std::memcpy(codes + 8 * k, &w, 8);
    }
  }
}

// the n codes whose packed_nbytes(n, B) bytes start at `in` -> codes[0:n] (and up to the
// next multiple of 8)
template <int B>
void unpack_tile(const uint8_t* in, int64_t n, uint8_t* codes) {
  const int64_t whole = n / 8;
  unpack_octets<B>(in, whole, codes);
  if (n % 8) {  // the stream's last, partial octet
    uint8_t last[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(last, in + whole * B, static_cast<size_t>((n % 8 * B + 7) / 8));
    unpack_octets<B>(last, 1, codes + 8 * whole);
  }
}

using PackFn = void (*)(uint8_t*, int64_t, uint8_t*);
using UnpackFn = void (*)(const uint8_t*, int64_t, uint8_t*);
constexpr PackFn PACK[9] = {nullptr, pack_tile<1>, pack_tile<2>, pack_tile<3>, pack_tile<4>,
                            pack_tile<5>, pack_tile<6>, pack_tile<7>, pack_tile<8>};
constexpr UnpackFn UNPACK[9] = {nullptr, unpack_tile<1>, unpack_tile<2>, unpack_tile<3>,
                                unpack_tile<4>, unpack_tile<5>, unpack_tile<6>, unpack_tile<7>,
                                unpack_tile<8>};

}  // namespace
