// The quantizer's fused CPU kernels (host side: aqsgd/quant/fused.py, which builds this file
// once per machine and calls it through ctypes). Bit for bit the contract of
// docs/ARCHITECTURE.md, "Quantizer", as written in aqsgd/quant/reference.py:
//
//   scale   s16 = fp16(min(stat * (1 + 2**-10), 65504)), s = float(s16)
//   code    inv = s == 0 ? 0 : center / s;  t = v * inv (+ h);  r = floor(t + u);
//           c = clamp(r, lo, hi) + off      (reference grid: [-Q, Q-1] + Q; symmetric: [0, L])
//   value   (c - center) * (s / center), rounded once to the output dtype
//   AQ-SGD  v = x - m in fp32; m <- (m + value).to(m.dtype)
//
// Every step is one IEEE fp32 operation in that order: the build passes -ffp-contract=off
// (no fused multiply-add) and no fast-math flag. Statistics: max |v| as an integer max of
// the bit patterns of |v| (the order of non-negative floats; an all-zero group gets +0, and
// a NaN, above everything, makes its group's scale NaN as in the reference); l2 sums the
// fp32 squares v * v in double, the contract leaving the order free (one fp16 ulp).
//
// Passes over memory: a per-token or per-group call works block by block (rows of about
// BLOCK_ELEMENTS elements): the statistics read the block, the codes read it again from
// L1/L2 and write codes and, for AQ-SGD, the cache. A per-channel call reads the tensor
// once for the statistics (scales span every row) and once more for the codes, the blocks
// backwards so that the first ones coded are still in cache. Within a block, TILE codes at
// a time are computed into a byte buffer on the stack and packed from there: each tile
// starts on a whole octet of codes (8 codes = `bits` bytes), so it owns its bytes of the
// stream. fp16 and bf16 operands are converted to fp32 tiles first (with AVX-512F or F16C
// where present), so every arithmetic loop is on fp32 and vectorises.
//
// Entry points (extern "C"; dtype codes 0 fp32, 1 fp16, 2 bf16, -1 none): aqf_encode
// (DirectQ quantize when m is null, AQ-SGD encode otherwise) and aqf_decode (dequantize into
// `out`, or add into the cache `out` when accumulate != 0). Both return 0, or 1 when a
// work buffer could not be allocated.

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t TILE = 2048;            // codes per packing tile (multiple of 8)
constexpr int64_t BLOCK_ELEMENTS = 16384;  // elements per block of rows (64 KiB of fp32)
constexpr float SCALE_MARGIN = 1.0f + 0x1p-10f;
constexpr float FP16_MAX = 65504.0f;

struct BF16 {
  uint16_t bits;
};
using F16 = _Float16;
struct NoCache {};  // the cache type of a DirectQ call: none

// ---------------------------------------------------------------------------------------
// Conversions between the operand dtypes and fp32 tiles
// ---------------------------------------------------------------------------------------

inline float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline uint16_t f32_to_bf16(float f) {  // round to nearest even, NaN -> 0x7FC0 (as torch)
  uint32_t b = f32_to_bits(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// `src` as fp32: the pointer itself for fp32, else converted into `buf` (n <= TILE)
inline const float* as_f32(const float* src, float*, int64_t) { return src; }

inline const float* as_f32(const F16* src, float* buf, int64_t n) {
  int64_t k = 0;
#if defined(__AVX512F__)
  for (; k + 16 <= n; k += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
    _mm512_storeu_ps(buf + k, _mm512_cvtph_ps(h));
  }
#endif
#if defined(__F16C__)
  for (; k + 8 <= n; k += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
    _mm256_storeu_ps(buf + k, _mm256_cvtph_ps(h));
  }
#endif
  for (; k < n; ++k) buf[k] = static_cast<float>(src[k]);
  return buf;
}

inline const float* as_f32(const BF16* src, float* buf, int64_t n) {
  for (int64_t k = 0; k < n; ++k) buf[k] = bits_to_f32(static_cast<uint32_t>(src[k].bits) << 16);
  return buf;
}

// fp32 `src` (n values) rounded once into `dst`; a no-op when dst is src (fp32)
inline void store_f32(const float* src, float* dst, int64_t n) {
  if (src != dst) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

inline void store_f32(const float* src, F16* dst, int64_t n) {
  int64_t k = 0;
#if defined(__AVX512F__)
  for (; k + 16 <= n; k += 16) {
    __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + k), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), h);
  }
#endif
#if defined(__F16C__)
  for (; k + 8 <= n; k += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + k), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k), h);
  }
#endif
  for (; k < n; ++k) dst[k] = static_cast<F16>(src[k]);
}

inline void store_f32(const float* src, BF16* dst, int64_t n) {
  for (int64_t k = 0; k < n; ++k) dst[k].bits = f32_to_bf16(src[k]);
}

// a writable fp32 view of `dst`'s values: the pointer itself for fp32, else `buf`
inline float* work_f32(float* dst, float*) { return dst; }
template <class T>
inline float* work_f32(T*, float* buf) { return buf; }

// ---------------------------------------------------------------------------------------
// The grid of one call
// ---------------------------------------------------------------------------------------

struct Grid {
  float lo, hi;   // clamp bounds of the level r
  float off;      // c = r + off
  float center;   // value = (c - center) * step; inv = center / s
  float h;        // t = v * inv + h: L/2 on the symmetric grid, 0 on the reference grid
  uint32_t mix;   // seed * 0x9E3779B9 mod 2**32
  int bits;

  Grid() = default;
  Grid(int bits_, int symmetric, uint32_t mix_) : mix(mix_), bits(bits_) {
    const float q = static_cast<float>(1 << (bits - 1));
    const float top = static_cast<float>((1 << bits) - 1);
    lo = symmetric ? 0.0f : -q;
    hi = symmetric ? top : q - 1.0f;
    off = symmetric ? 0.0f : q;
    center = symmetric ? top / 2.0f : q;  // exact: a half-integer
    // + 0 on the reference grid only turns a -0 into +0, which floor(t + u), the clamp and
    // the code never see (-0 + u == +0 + u for every u >= 0)
    h = symmetric ? center : 0.0f;
  }
};

inline uint16_t scale_of(float stat) {
  float s = stat * SCALE_MARGIN;
  s = s > FP16_MAX ? FP16_MAX : s;  // NaN stays NaN
  F16 s16 = static_cast<F16>(s);
  uint16_t out;
  std::memcpy(&out, &s16, 2);
  return out;
}

inline float scale_value(uint16_t s16) {
  F16 h;
  std::memcpy(&h, &s16, 2);
  return static_cast<float>(h);
}

// inv = center / s (0 where s == 0) and step = s / center of one fp16 scale
inline void factors(uint16_t s16, const Grid& g, float* inv, float* step) {
  const float s = scale_value(s16);
  *inv = s == 0.0f ? 0.0f : g.center / s;
  *step = s / g.center;
}

// ---------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------

// The runs below take fp32 x and, with Cache (AQ-SGD), the fp32 cache m of the same
// elements, and work on v = x (DirectQ) or v = x - m (one fp32 subtraction).

// max |v| as bit patterns, accumulated into acc[k] (per channel) or into acc[0]
template <bool PerCol, bool Cache>
inline void maxabs_run(const float* __restrict x, const float* __restrict m, int64_t n,
                       uint32_t* __restrict acc) {
  uint32_t best = acc[0];
  for (int64_t k = 0; k < n; ++k) {
    const float v = Cache ? x[k] - m[k] : x[k];
    const uint32_t a = f32_to_bits(v) & 0x7FFFFFFFu;
    if constexpr (PerCol)
      acc[k] = a > acc[k] ? a : acc[k];
    else
      best = a > best ? a : best;
  }
  if constexpr (!PerCol) acc[0] = best;
}

// sum of the fp32 squares v * v in double, into acc[k] (per channel) or acc[0]
template <bool PerCol, bool Cache>
inline void squares_run(const float* __restrict x, const float* __restrict m, int64_t n,
                        double* __restrict acc) {
  if constexpr (PerCol) {
    for (int64_t k = 0; k < n; ++k) {
      const float v = Cache ? x[k] - m[k] : x[k];
      const float p = v * v;
      acc[k] += static_cast<double>(p);
    }
  } else {
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight sums: a vectorisable order
    for (int64_t k = 0; k < n; ++k) {
      const float v = Cache ? x[k] - m[k] : x[k];
      const float p = v * v;
      part[k % 8] += static_cast<double>(p);
    }
    acc[0] += ((part[0] + part[1]) + (part[2] + part[3])) +
              ((part[4] + part[5]) + (part[6] + part[7]));
  }
}

// the statistic of a group from its accumulator: max |v|, or 2 * sqrt(mean(v * v))
inline float stat_of(uint32_t maxbits) { return bits_to_f32(maxbits); }
inline float stat_of(double sum, int64_t count) {
  const float mean = static_cast<float>(sum) / static_cast<float>(count);
  return std::sqrt(mean) * 2.0f;
}

// ---------------------------------------------------------------------------------------
// Codes: quantize a run of v, and for AQ-SGD add deQ to the cache
// ---------------------------------------------------------------------------------------

inline float uniform(uint32_t index, uint32_t mix) {  // lowbias32, top 24 bits
  uint32_t h = index ^ mix;
  h ^= h >> 16;
  h *= 0x7FEB352Du;
  h ^= h >> 15;
  h *= 0x846CA68Bu;
  h ^= h >> 16;
  return static_cast<float>(static_cast<int32_t>(h >> 8)) * 0x1p-24f;
}

// codes of n values v (flat index of the first: `base`, mod 2**32); PerCol: inv[k],
// step[k] per element, else inv[0], step[0]; with Cache, m[k] += (c - center) * step
template <bool PerCol, bool Stoch, bool Cache>
inline void code_run(const float* __restrict x, float* __restrict m, int64_t n, uint32_t base,
                     const float* __restrict inv, const float* __restrict step, const Grid& g,
                     uint8_t* __restrict codes) {
  const float lo = g.lo, hi = g.hi, off = g.off, h = g.h, center = g.center;
  const uint32_t mix = g.mix;
  for (int64_t k = 0; k < n; ++k) {
    const float v = Cache ? x[k] - m[k] : x[k];
    const float t = v * (PerCol ? inv[k] : inv[0]) + h;
    const float u = Stoch ? uniform(base + static_cast<uint32_t>(k), mix) : 0.5f;
    float r = std::floor(t + u);
    r = r < lo ? lo : r;
    r = r > hi ? hi : r;
    const float c = r + off;  // exact: a small integer (and +0, never -0)
    codes[k] = static_cast<uint8_t>(static_cast<int32_t>(c));
    if constexpr (Cache) m[k] = m[k] + (c - center) * (PerCol ? step[k] : step[0]);
  }
}

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

// ---------------------------------------------------------------------------------------
// Geometry: a (rows, cols) view whose scale groups are columns (per channel) or rows
// ---------------------------------------------------------------------------------------

struct Shape {
  int64_t rows, cols;
  bool per_col;
};

// rows per block: about BLOCK_ELEMENTS elements, a multiple of 8 / gcd(cols, 8), so that
// every block starts on a whole octet of codes
int64_t block_rows(const Shape& s) {
  int64_t g = s.cols % 8 == 0 ? 8 : s.cols % 4 == 0 ? 4 : s.cols % 2 == 0 ? 2 : 1;
  const int64_t align = 8 / g;
  int64_t per = BLOCK_ELEMENTS / (s.cols > 0 ? s.cols : 1);
  per -= per % align;
  return per < align ? align : per;
}

// calls fn(row, col0, count, flat) for the runs of one row each that cover flat elements
// [start, start + n)
template <class Fn>
inline void for_runs(const Shape& s, int64_t start, int64_t n, Fn&& fn) {
  int64_t r = start / s.cols, c = start % s.cols, done = 0;
  while (done < n) {
    const int64_t count = (s.cols - c) < (n - done) ? (s.cols - c) : (n - done);
    fn(r, c, count, start + done);
    done += count;
    ++r;
    c = 0;
  }
}

// ---------------------------------------------------------------------------------------
// Encode: DirectQ quantize (M = NoCache) and the AQ-SGD sender step
// ---------------------------------------------------------------------------------------

// fp32 tiles of fp16/bf16 operands; the padding keeps the two off the same 4 KiB offsets
struct Tiles {
  float x[TILE + 16], m[TILE + 16];
};

template <class X, class M>
struct Encoder {
  static constexpr bool cache = !std::is_same_v<M, NoCache>;
  const X* x;
  M* m;
  Shape s;
  Grid g;
  bool stochastic, l2;
  uint16_t* scales;
  uint8_t* packed;
  float* inv;   // per column, or per row of the current block
  float* step;
  Tiles tiles;

  // x and m of flat elements [flat, flat + n) (n <= TILE) as fp32: the operands
  // themselves when fp32, else converted tiles; mv is null without a cache
  void operands(int64_t flat, int64_t n, const float** xv, float** mv) {
    *xv = as_f32(x + flat, tiles.x, n);
    *mv = nullptr;
    if constexpr (cache) {
      as_f32(m + flat, tiles.m, n);
      *mv = work_f32(m + flat, tiles.m);
    }
  }

  // codes of flat elements [start, start + n) (n <= TILE, start % 8 == 0), packed; with
  // a cache, the cache updated; `row0` is the first row of the block (inv/step index)
  template <bool Stoch>
  void code_tile(int64_t start, int64_t n, int64_t row0) {
    alignas(64) uint8_t codes[TILE + 8];
    for_runs(s, start, n, [&](int64_t r, int64_t c, int64_t count, int64_t flat) {
      const float* xv;
      float* mv;
      operands(flat, count, &xv, &mv);
      uint8_t* out = codes + (flat - start);
      const uint32_t base = static_cast<uint32_t>(flat);
      if (s.per_col)
        code_run<true, Stoch, cache>(xv, mv, count, base, inv + c, step + c, g, out);
      else
        code_run<false, Stoch, cache>(xv, mv, count, base, inv + (r - row0), step + (r - row0),
                                      g, out);
      if constexpr (cache) store_f32(mv, m + flat, count);  // one rounding to m's dtype
    });
    std::memset(codes + n, 0, 8);
    PACK[g.bits](codes, n, packed + start / 8 * g.bits);
  }

  void code_block(int64_t r0, int64_t r1) {
    const int64_t end = r1 * s.cols;
    for (int64_t start = r0 * s.cols; start < end; start += TILE) {
      const int64_t n = end - start < TILE ? end - start : TILE;
      if (stochastic)
        code_tile<true>(start, n, r0);
      else
        code_tile<false>(start, n, r0);
    }
  }

  // the statistic of every column over all rows -> scales, inv, step; false when out of
  // memory
  bool column_scales() {
    const int64_t cols = s.cols;
    uint32_t* amax = nullptr;
    double* sums = nullptr;
    if (l2) {
      sums = static_cast<double*>(std::calloc(static_cast<size_t>(cols), sizeof(double)));
    } else {
      amax = static_cast<uint32_t*>(std::calloc(static_cast<size_t>(cols), sizeof(uint32_t)));
    }
    if (sums == nullptr && amax == nullptr) return false;
    const int64_t n = s.rows * cols;
    for (int64_t start = 0; start < n; start += TILE) {
      const int64_t count = n - start < TILE ? n - start : TILE;
      for_runs(s, start, count, [&](int64_t, int64_t c, int64_t len, int64_t flat) {
        const float* xv;
        float* mv;
        operands(flat, len, &xv, &mv);
        if (l2)
          squares_run<true, cache>(xv, mv, len, sums + c);
        else
          maxabs_run<true, cache>(xv, mv, len, amax + c);
      });
    }
    for (int64_t c = 0; c < cols; ++c) {
      const float stat = l2 ? stat_of(sums[c], s.rows) : stat_of(amax[c]);
      scales[c] = scale_of(stat);
      factors(scales[c], g, inv + c, step + c);
    }
    std::free(amax);
    std::free(sums);
    return true;
  }

  // the statistic of rows r0:r1 (one group each) -> their scales, inv, step
  void row_scales(int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint32_t amax = 0;
      double sum = 0.0;
      for (int64_t c = 0; c < s.cols; c += TILE) {
        const int64_t len = s.cols - c < TILE ? s.cols - c : TILE;
        const int64_t flat = r * s.cols + c;
        const float* xv;
        float* mv;
        operands(flat, len, &xv, &mv);
        if (l2)
          squares_run<false, cache>(xv, mv, len, &sum);
        else
          maxabs_run<false, cache>(xv, mv, len, &amax);
      }
      const float stat = l2 ? stat_of(sum, s.cols) : stat_of(amax);
      scales[r] = scale_of(stat);
      factors(scales[r], g, inv + (r - r0), step + (r - r0));
    }
  }

  int run() {
    const int64_t per = block_rows(s);
    const int64_t slots = s.per_col ? s.cols : per;
    inv = static_cast<float*>(std::malloc(static_cast<size_t>(2 * slots) * sizeof(float)));
    if (inv == nullptr) return 1;
    step = inv + slots;
    if (s.per_col) {
      if (!column_scales()) {
        std::free(inv);
        return 1;
      }
      const int64_t blocks = (s.rows + per - 1) / per;
      for (int64_t b = blocks - 1; b >= 0; --b)  // backwards: the last rows are in cache
        code_block(b * per, (b + 1) * per < s.rows ? (b + 1) * per : s.rows);
    } else {
      for (int64_t r0 = 0; r0 < s.rows; r0 += per) {
        const int64_t r1 = r0 + per < s.rows ? r0 + per : s.rows;
        row_scales(r0, r1);
        code_block(r0, r1);
      }
    }
    std::free(inv);
    return 0;
  }
};

template <class X, class M>
int encode(const void* x, void* m, Shape s, Grid g, int stochastic, int l2, uint16_t* scales,
           uint8_t* packed) {
  // on the heap (its tiles are 16 KiB), default-initialised: the tiles are scratch
  void* place = std::malloc(sizeof(Encoder<X, M>));
  if (place == nullptr) return 1;
  auto* e = new (place) Encoder<X, M>;
  e->x = static_cast<const X*>(x);
  e->m = static_cast<M*>(m);
  e->s = s;
  e->g = g;
  e->stochastic = stochastic != 0;
  e->l2 = l2 != 0;
  e->scales = scales;
  e->packed = packed;
  const int rc = e->run();
  std::free(place);
  return rc;
}

// ---------------------------------------------------------------------------------------
// Decode: dequantize, or add deQ to the AQ-SGD cache
// ---------------------------------------------------------------------------------------

// out[k] = (c - center) * step (PerCol: step[k]), or out[k] += that when Acc
template <bool PerCol, bool Acc>
inline void value_run(const uint8_t* codes, int64_t n, const float* step, float center,
                      float* out) {
  for (int64_t k = 0; k < n; ++k) {
    const float v = (static_cast<float>(codes[k]) - center) * (PerCol ? step[k] : step[0]);
    out[k] = Acc ? out[k] + v : v;
  }
}

template <class O>
int decode(const uint8_t* packed, const uint16_t* scales, void* out_, Shape s, Grid g,
           int accumulate) {
  O* out = static_cast<O*>(out_);
  const int64_t slots = s.per_col ? s.cols : 1;
  float* step = static_cast<float*>(std::malloc(static_cast<size_t>(slots) * sizeof(float)));
  auto* work = static_cast<float*>(std::malloc(TILE * sizeof(float)));
  if (step == nullptr || work == nullptr) {
    std::free(step);
    std::free(work);
    return 1;
  }
  float unused;
  if (s.per_col)
    for (int64_t c = 0; c < s.cols; ++c) factors(scales[c], g, &unused, step + c);
  alignas(64) uint8_t codes[TILE + 8];
  const int64_t n = s.rows * s.cols;
  for (int64_t start = 0; start < n; start += TILE) {
    const int64_t count = n - start < TILE ? n - start : TILE;
    UNPACK[g.bits](packed + start / 8 * g.bits, count, codes);
    for_runs(s, start, count, [&](int64_t r, int64_t c, int64_t len, int64_t flat) {
      O* o = out + flat;
      const uint8_t* cr = codes + (flat - start);
      float* w = work_f32(o, work);
      if (accumulate && w == work) as_f32(o, work, len);  // fp16 cache: its values as fp32
      if (s.per_col) {
        if (accumulate)
          value_run<true, true>(cr, len, step + c, g.center, w);
        else
          value_run<true, false>(cr, len, step + c, g.center, w);
      } else {
        float row_step;
        factors(scales[r], g, &unused, &row_step);
        if (accumulate)
          value_run<false, true>(cr, len, &row_step, g.center, w);
        else
          value_run<false, false>(cr, len, &row_step, g.center, w);
      }
      store_f32(w, o, len);
    });
  }
  std::free(step);
  std::free(work);
  return 0;
}

}  // namespace

extern "C" {

// x (rows * cols, dtype x_dtype), m (same count, dtype m_dtype, or null with m_dtype -1):
// scales (fp16 bits: cols per channel, rows otherwise) and the packed stream; m += deQ
int aqf_encode(const void* x, int x_dtype, void* m, int m_dtype, int64_t rows, int64_t cols,
               int per_col, int bits, int symmetric, int stochastic, int l2, uint32_t mix,
               uint16_t* scales, uint8_t* packed) {
  const Shape s{rows, cols, per_col != 0};
  const Grid g(bits, symmetric, mix);
#define AQF_ENCODE(X)                                                                     \
  switch (m_dtype) {                                                                      \
    case -1: return encode<X, NoCache>(x, m, s, g, stochastic, l2, scales, packed);        \
    case 0: return encode<X, float>(x, m, s, g, stochastic, l2, scales, packed);           \
    case 1: return encode<X, F16>(x, m, s, g, stochastic, l2, scales, packed);             \
    default: return 2;                                                                    \
  }
  switch (x_dtype) {
    case 0: AQF_ENCODE(float)
    case 1: AQF_ENCODE(F16)
    case 2: AQF_ENCODE(BF16)
    default: return 2;
  }
#undef AQF_ENCODE
}

// out (rows * cols, dtype out_dtype) <- deQ(packed, scales), or += deQ when accumulate
int aqf_decode(const uint8_t* packed, const uint16_t* scales, void* out, int out_dtype,
               int accumulate, int64_t rows, int64_t cols, int per_col, int bits,
               int symmetric) {
  const Shape s{rows, cols, per_col != 0};
  const Grid g(bits, symmetric, 0);
  switch (out_dtype) {
    case 0: return decode<float>(packed, scales, out, s, g, accumulate);
    case 1: return decode<F16>(packed, scales, out, s, g, accumulate);
    case 2: return decode<BF16>(packed, scales, out, s, g, accumulate);
    default: return 2;
  }
}

}  // extern "C"
