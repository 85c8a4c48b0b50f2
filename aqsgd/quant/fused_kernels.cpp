// The quantizer's fused CPU kernels (host side: aqsgd/quant/fused.py, which builds this file
// once per machine and calls it through ctypes; the arithmetic of a run of elements is in
// fused_arith.h, the bit packing in fused_pack.h). Bit for bit the contract of
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

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "fused_arith.h"
#include "fused_pack.h"

namespace {

constexpr int64_t BLOCK_ELEMENTS = 16384;  // elements per block of rows (64 KiB of fp32)

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
