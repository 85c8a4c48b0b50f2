// Arithmetic of the fused CPU kernels (fused_kernels.cpp, the one file that includes this):
// conversions between the operand dtypes and fp32 tiles, the grid and scales of a call, the
// statistics and the codes of a run of elements, and the values of a run of codes. Every
// step is the contract's IEEE fp32 operation, in its order (docs/ARCHITECTURE.md,
// "Quantizer").

#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

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

// `src` as fp32: the pointer itself for fp32, else converted into `buf` (n floats)
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
// Values: dequantize a run of codes
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

}  // namespace
