// AVX2/FMA GemmPanels: each 32-column panel is computed as two 6x16 register
// tiles (12 ymm accumulators), one or two rows as one 1x32 or 2x32 tile (see
// PanelTile), one MXFP4 row by Mxfp4GemvAvx2. Built with -mavx2 -mfma -mf16c
// (pshufb, for MXFP4, is SSSE3).
#include <immintrin.h>

#include "kernels/cpu/gemm_isa.h"
#include "kernels/cpu/tile_helpers.h"
#include "kernels/cpu/tile_store.h"

namespace moe::kernels::cpu::internal {
namespace {

constexpr int kTileRows = 6;
// Depth of a K block: 256 x 32 fp32 weights = 32 KiB, inside L1d.
constexpr int64_t kKBlock = 256;

inline void LoadW(const float* p, __m256* lo, __m256* hi) {
  *lo = _mm256_loadu_ps(p);
  *hi = _mm256_loadu_ps(p + 8);
}

inline __m256 WidenBf16(__m128i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

inline void LoadW(const uint16_t* p, __m256* lo, __m256* hi) {
  *lo = WidenBf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  *hi = WidenBf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
}

// 16 e4m3 codes -> fp32 values / 2^8 through fp16 bit patterns; see
// WidenFp8 in gemm_avx512.cc for why this is exact (and NaN-free).
inline void LoadW(const uint8_t* p, __m256* lo, __m256* hi) {
  const __m256i x = _mm256_cvtepi8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i f16 = _mm256_and_si256(
      _mm256_slli_epi16(x, 7), _mm256_set1_epi16(static_cast<short>(0xbf80)));
  *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(f16));
  *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(f16, 1));
}

// Half `half` (columns 16 half .. + 16) of one K step of a panel.
template <typename W>
inline void LoadHalf(const W* step, int half, __m256* lo, __m256* hi) {
  LoadW(step + half * kHalfPanel, lo, hi);
}

// MXFP4: the 16 bytes of a step hold columns 0-15 in their low nibbles and
// 16-31 in their high ones. pshufb looks the nibbles up in a 16-byte table
// of twice the E2M1 values (all integers: 0, 1, 2, 3, 4, 6, 8, 12 and their
// negatives), widened to int32 and converted; the scales carry the 1/2
// (MxHalfScales). Exact.
inline void LoadHalf(const Mxfp4Byte* step, int half, __m256* lo, __m256* hi) {
  __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(step));
  if (half != 0) x = _mm_srli_epi16(x, 4);
  x = _mm_and_si128(x, _mm_set1_epi8(0x0f));
  const __m128i v = _mm_shuffle_epi8(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12),
      x);
  *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
  *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
}

inline void LoadHalf(const Nvfp4Byte* step, int half, __m256* lo, __m256* hi) {
  LoadHalf(reinterpret_cast<const Mxfp4Byte*>(step), half, lo, hi);
}

// The 16 fp32 scales of half `half` of one K block's 32: FP8's as stored;
// MXFP4's E8M0 bytes as 2^(s - 128) (half of 2^(s - 127): LoadHalf gives
// twice the code values), exact for every s in [0, 254], written to `buf`.
inline const float* HalfScales(const float* s, int half, float* /*buf*/) {
  return s + half * kHalfPanel;
}
inline const float* HalfScales(const uint8_t* s, int half, float* buf) {
  for (int i = 0; i < 2; ++i) {
    const __m256 f = WidenE8M0x8(s + half * kHalfPanel + 8 * i);
    _mm256_storeu_ps(buf + 8 * i, _mm256_mul_ps(f, _mm256_set1_ps(0.5f)));
  }
  return buf;
}
// NVFP4's E4M3 bytes as their values times 2^-8 (the column scales carry
// the 2^8) and 1/2 (LoadHalf's doubling), exact.
inline const float* HalfScales(const E4M3Byte* s, int half, float* buf) {
  for (int i = 0; i < 2; ++i) {
    const __m256 f = WidenE4M3x8(s + half * kHalfPanel + 8 * i);
    _mm256_storeu_ps(buf + 8 * i, _mm256_mul_ps(f, _mm256_set1_ps(0.5f)));
  }
  return buf;
}

// The half tiles' prefetch of step kk of the next block: an fp32 step is
// two cache lines, and each half prefetches its own, so the next block's
// requests spread over both passes instead of bursting in the first (a burst
// of 32 KiB in one pass left DRAM idle in the other, and in the second row
// tile's passes at m = 7..12: 9.4 GB/s at m = 8 against 14 at m = 2 on Zen
// 3). bf16 and FP8 steps are one line: the first half takes it. PanelTile
// (one pass) calls both halves' for each step.
template <int kHalf, typename W>
inline void PrefetchHalfStep(const W* prefetch, int64_t kk) {
  if constexpr (sizeof(W) == 4) {
    _mm_prefetch(reinterpret_cast<const char*>(prefetch + kk * kPanelWidth +
                                               kHalf * kHalfPanel),
                 _MM_HINT_T0);
  } else if constexpr (kHalf == 0) {
    PrefetchStep(prefetch, kk);
  }
}

// tile[r][half*16 .. +16) (+)= sum_kk ap[kk*MR + r] * w[kk][half*16 .. +16);
// from zero when `first`. The accumulators are named variables, not an
// array: with only 16 ymm registers GCC keeps an array of them on the stack
// and stores it back on every step (seen in the disassembly, half speed).
// FP8 and MXFP4 weights are scaled in registers by their K block's scales.
// `w` and `scale` point at the whole panel's step and scales; `tile` at the
// half's columns.
template <int MR, typename W, int kHalf>
void HalfTile(const float* ap, int64_t k, const W* w, float* tile, bool first,
              const W* prefetch, const ScaleOf<W>* scale) {
  static_assert(MR >= 1 && MR <= 6);
  constexpr bool kQuant = kBlockScaled<W>;
  __m256 l0, h0, l1, h1, l2, h2, l3, h3, l4, h4, l5, h5;
  l0 = h0 = l1 = h1 = l2 = h2 = l3 = h3 = l4 = h4 = l5 = h5 =
      _mm256_setzero_ps();
  if (!first) {
#define MOE_LOAD(r)                                     \
  if constexpr (MR > r) {                               \
    l##r = _mm256_loadu_ps(tile + r * kPanelWidth);     \
    h##r = _mm256_loadu_ps(tile + r * kPanelWidth + 8); \
  }
    MOE_LOAD(0) MOE_LOAD(1) MOE_LOAD(2) MOE_LOAD(3) MOE_LOAD(4) MOE_LOAD(5)
#undef MOE_LOAD
  }
#define MOE_STEP(r)                              \
  if constexpr (MR > r) {                        \
    const __m256 b = _mm256_broadcast_ss(a + r); \
    l##r = _mm256_fmadd_ps(b, w0, l##r);         \
    h##r = _mm256_fmadd_ps(b, w1, h##r);         \
  }
  if constexpr (kQuant) {
    constexpr int64_t kBlockK = kScaleBlockK<W>;
    alignas(32) float buf[kHalfPanel];
    for (int64_t q = 0; q < k; q += kBlockK) {
      const int64_t q_end = k - q < kBlockK ? k : q + kBlockK;
      const float* s =
          HalfScales(scale + q / kBlockK * kPanelWidth, kHalf, buf);
      for (int64_t kk = q; kk < q_end; ++kk) {
        PrefetchHalfStep<kHalf>(prefetch, kk);
        __m256 w0, w1;
        LoadHalf(w + kk * kStepElems<W>, kHalf, &w0, &w1);
        // Scales read from L1 each step: no ymm register is left for them.
        w0 = _mm256_mul_ps(w0, _mm256_loadu_ps(s));
        w1 = _mm256_mul_ps(w1, _mm256_loadu_ps(s + 8));
        const float* a = ap + kk * MR;
        MOE_STEP(0) MOE_STEP(1) MOE_STEP(2) MOE_STEP(3) MOE_STEP(4) MOE_STEP(5)
      }
    }
  } else {
    // The plain loop, apart from the block loop (see gemm_avx512.cc).
    for (int64_t kk = 0; kk < k; ++kk) {
      PrefetchHalfStep<kHalf>(prefetch, kk);
      __m256 w0, w1;
      LoadHalf(w + kk * kPanelWidth, kHalf, &w0, &w1);
      const float* a = ap + kk * MR;
      MOE_STEP(0) MOE_STEP(1) MOE_STEP(2) MOE_STEP(3) MOE_STEP(4) MOE_STEP(5)
    }
  }
#undef MOE_STEP
#define MOE_STORE(r)                                    \
  if constexpr (MR > r) {                               \
    _mm256_storeu_ps(tile + r * kPanelWidth, l##r);     \
    _mm256_storeu_ps(tile + r * kPanelWidth + 8, h##r); \
  }
  MOE_STORE(0) MOE_STORE(1) MOE_STORE(2) MOE_STORE(3) MOE_STORE(4) MOE_STORE(5)
#undef MOE_STORE
}

// tile[r][0..32) (+)= sum_kk ap[kk*MR + r] * w[kk][0..32) for one or two
// rows, both halves of the panel in one pass: the half tiles' two or four
// accumulators a pass would wait on the FMA latency (4 cycles on Zen 3, 2
// FMAs a cycle need 8 chains), so one and two rows ran at a quarter to a
// half of the FMA rate from cache (7 and 8 rows: 6 + 1 and 6 + 2). Not for
// MXFP4 (one row: Mxfp4GemvAvx2; two: Mxfp4TwoRows); NVFP4 comes here, its
// 16-step blocks scaled like FP8's.
// fp32 and bf16: each column's sum is the same chain of FMAs as in the half
// tiles, the same bits. FP8: each 128-step block's sums are scaled once,
// as AVX-512's decode tiles do (two multiplies fewer per 16 weights, where
// the e4m3 widening already bounds one row; within fp32 rounding of the
// per-step scaling, not bit-equal).
template <int MR, typename W>
void PanelTile(const float* ap, int64_t k, const W* w, float* tile, bool first,
               const W* prefetch, const ScaleOf<W>* scale) {
  static_assert((MR == 1 || MR == 2) && !kIsMxfp4<W>);
  [[maybe_unused]] alignas(32) float buf[kPanelWidth];
  constexpr bool kQuant = kBlockScaled<W>;
  __m256 c00, c01, c02, c03, c10, c11, c12, c13;
  const auto zero = [&] {
    c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = _mm256_setzero_ps();
  };
  // The tile's rows to and from the accumulators.
  const auto load = [&](const float* t) {
    c00 = _mm256_loadu_ps(t);
    c01 = _mm256_loadu_ps(t + 8);
    c02 = _mm256_loadu_ps(t + 16);
    c03 = _mm256_loadu_ps(t + 24);
    if constexpr (MR == 2) {
      c10 = _mm256_loadu_ps(t + kPanelWidth);
      c11 = _mm256_loadu_ps(t + kPanelWidth + 8);
      c12 = _mm256_loadu_ps(t + kPanelWidth + 16);
      c13 = _mm256_loadu_ps(t + kPanelWidth + 24);
    }
  };
  const auto store = [&](float* t) {
    _mm256_storeu_ps(t, c00);
    _mm256_storeu_ps(t + 8, c01);
    _mm256_storeu_ps(t + 16, c02);
    _mm256_storeu_ps(t + 24, c03);
    if constexpr (MR == 2) {
      _mm256_storeu_ps(t + kPanelWidth, c10);
      _mm256_storeu_ps(t + kPanelWidth + 8, c11);
      _mm256_storeu_ps(t + kPanelWidth + 16, c12);
      _mm256_storeu_ps(t + kPanelWidth + 24, c13);
    }
  };
  const auto step = [&](int64_t kk) {
    PrefetchHalfStep<0>(prefetch, kk);
    PrefetchHalfStep<1>(prefetch, kk);
    __m256 w0, w1, w2, w3;
    LoadHalf(w + kk * kStepElems<W>, 0, &w0, &w1);
    LoadHalf(w + kk * kStepElems<W>, 1, &w2, &w3);
    const __m256 b0 = _mm256_broadcast_ss(ap + kk * MR);
    c00 = _mm256_fmadd_ps(b0, w0, c00);
    c01 = _mm256_fmadd_ps(b0, w1, c01);
    c02 = _mm256_fmadd_ps(b0, w2, c02);
    c03 = _mm256_fmadd_ps(b0, w3, c03);
    if constexpr (MR == 2) {
      const __m256 b1 = _mm256_broadcast_ss(ap + kk * MR + 1);
      c10 = _mm256_fmadd_ps(b1, w0, c10);
      c11 = _mm256_fmadd_ps(b1, w1, c11);
      c12 = _mm256_fmadd_ps(b1, w2, c12);
      c13 = _mm256_fmadd_ps(b1, w3, c13);
    }
  };
  if constexpr (kQuant) {
    // The running sums stay in `tile` (L1): 8 block sums and 4 weights fill
    // the registers.
    if (first) {
      zero();
      store(tile);
    }
    constexpr int64_t kBlockK = kScaleBlockK<W>;
    for (int64_t q = 0; q < k; q += kBlockK) {
      const int64_t q_end = k - q < kBlockK ? k : q + kBlockK;
      // The 32 fp32 scales of this block, in column order: FP8's as stored,
      // NVFP4's widened into `buf` (HalfScales). They sit after the panel's
      // codes, beyond the code prefetch: fetched now, used at the block's
      // end.
      const ScaleOf<W>* sq = scale + q / kBlockK * kPanelWidth;
      _mm_prefetch(reinterpret_cast<const char*>(sq), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(sq + kPanelWidth - 1),
                   _MM_HINT_T0);
      const float* s;
      if constexpr (kIsNvfp4<W>) {
        HalfScales(sq, 0, buf);
        HalfScales(sq, 1, buf + kHalfPanel);
        s = buf;
      } else {
        s = sq;
      }
      zero();
      for (int64_t kk = q; kk < q_end; ++kk) step(kk);
      for (int r = 0; r < MR; ++r) {
        float* t = tile + r * kPanelWidth;
        const __m256 b[4] = {r == 0 ? c00 : c10, r == 0 ? c01 : c11,
                             r == 0 ? c02 : c12, r == 0 ? c03 : c13};
        for (int i = 0; i < 4; ++i) {
          _mm256_storeu_ps(t + 8 * i,
                           _mm256_fmadd_ps(b[i], _mm256_loadu_ps(s + 8 * i),
                                           _mm256_loadu_ps(t + 8 * i)));
        }
      }
    }
  } else {
    if (first) {
      zero();
    } else {
      load(tile);
    }
    for (int64_t kk = 0; kk < k; ++kk) step(kk);
    store(tile);
  }
}

// The MXFP4 byte tables of the decode tiles: twice the E2M1 values (all
// integers: 0, 1, 2, 3, 4, 6, 8, 12 and their negatives), and, for j < 4,
// in-lane pshufb patterns moving bytes 4j..4j+3 of each lane into the top
// bytes of its dwords (the value times 2^24, sign included, ready for
// vcvtdq2ps); -128 makes a zero byte.
struct Mxfp4Tables {
  __m256i table, nibble, shift4, top[4];
  Mxfp4Tables() {
    table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8,
                             -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4,
                             -6, -8, -12);
    nibble = _mm256_set1_epi8(0x0f);
    // x * 2^12 >> 16 per 16-bit word: x >> 4, on the multiplier (Zen 3
    // runs vpmulhuw beside the shuffles; vpsrlw competes with them).
    shift4 = _mm256_set1_epi16(0x1000);
    constexpr char z = -128;
    for (int j = 0; j < 4; ++j) {
      const char b = static_cast<char>(4 * j);
      top[j] = _mm256_setr_epi8(z, z, z, b, z, z, z, b + 1, z, z, z, b + 2, z,
                                z, z, b + 3, z, z, z, b, z, z, z, b + 1, z, z,
                                z, b + 2, z, z, z, b + 3);
    }
  }
};

// 2^(s - 127) / 2 for the 32 E8M0 bytes of one block (columns in order):
// the half undoes the table's doubling. Exact.
inline void Mxfp4BlockScales(const uint8_t* s, float* out) {
  for (int i = 0; i < 4; ++i) {
    _mm256_store_ps(out + 8 * i, _mm256_mul_ps(WidenE8M0x8(s + 8 * i),
                                               _mm256_set1_ps(0.5f)));
  }
}

// The scales of the decode tiles' block sums (value * 2^25 each): 2^(s - 152)
// for the 32 E8M0 bytes of one block, written to `out`, when every s is at
// least 26 (a normal float, exact: then one FMA scales a sum); false, and
// nothing written, when some s is below (real checkpoints' scales are near
// 127; the caller scales by 2^-25 and 2^(s - 127) in two steps instead).
inline bool Mxfp4SumScales(const uint8_t* s, float* out) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i low = _mm256_min_epu8(v, _mm256_set1_epi8(25));
  if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(low, v)) != 0) return false;
  for (int i = 0; i < 4; ++i) {
    const __m256i b = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 8 * i)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8 * i),
                       _mm256_sub_epi32(_mm256_slli_epi32(b, 23),
                                        _mm256_set1_epi32(25 << 23)));
  }
  return true;
}

// The scale bytes of this call's blocks and of the next call's (the next K
// block of the panel): they sit after the panel's codes, where the code
// prefetch does not reach, and a miss on them at each block's end stalled
// the decode tiles. Prefetches past the panel are harmless.
inline void PrefetchMxScales(const uint8_t* scale, int64_t k) {
  const int64_t bytes = 2 * MxBlocks(k) * kPanelWidth;
  for (int64_t i = 0; i < bytes; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(scale + i), _MM_HINT_T0);
  }
}

// Zeroes n 8-float rows (a vector loop: `= {}` on the arrays became rep
// stos, slow to start, once per K block and panel).
inline void ZeroRows(float (*rows)[8], int n) {
  for (int i = 0; i < n; ++i) _mm256_store_ps(rows[i], _mm256_setzero_ps());
}

// sums[g] (both lanes of columns 4g..4g+3) += acc * the block scales s of
// those columns; `fused`: acc is already in Mxfp4SumScales' units, else it
// is scaled by 2^-24 first and s holds Mxfp4BlockScales.
inline void AddBlockSum(__m256 acc, int g, const float* s, bool fused,
                        float (*sums)[8]) {
  const __m256 sc =
      _mm256_broadcast_ps(reinterpret_cast<const __m128*>(s + 4 * g));
  const __m256 a =
      fused ? acc : _mm256_mul_ps(acc, _mm256_set1_ps(1.0f / 16777216.0f));
  _mm256_store_ps(sums[g], _mm256_fmadd_ps(a, sc, _mm256_load_ps(sums[g])));
}

// MXFP4 tile for two rows: two K steps a ymm, one per lane (a 32-byte load
// holds steps kk and kk + 1; one pshufb looks up twice the code values of
// a nibble half, four move four of a lane's bytes to the tops of dwords,
// converted to fp32, value * 2^25), in two passes over each 32-step block,
// low nibbles (columns 0-15) then high (16-31): 4 column groups x 2 rows =
// eight accumulators a pass (both halves at once would need sixteen, more than
// AVX2 has registers for); the second pass reads the block's 512 bytes from L1.
// Per 64 weights of each row: 1-2 logic ops, 5 shuffles and 2 permutes of
// the activation pairs, 4 converts and 8 FMAs. Each 32-step block's sums
// are scaled once (by 2^(s - 152), or 2^-25 then 2^(s - 127) for the
// smallest s): within fp32 rounding of the fp32 kernel on dequantised
// weights, not bit-equal. (One row goes to the integer GEMV instead.)
void Mxfp4TwoRows(const float* ap, int64_t k, const Mxfp4Byte* w, float* tile,
                  bool first, const Mxfp4Byte* prefetch, const uint8_t* scale) {
  const Mxfp4Tables t;
  // apack holds a[kk][0], a[kk][1], a[kk+1][0], a[kk+1][1]: row r's pair.
  const __m256i sel0 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  const __m256i sel1 = _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3);
  PrefetchMxScales(scale, k);
  alignas(32) float sums[2][8][8];
  ZeroRows(sums[0], 16);
  alignas(32) float s[kPanelWidth];
  for (int64_t q = 0; q < k; q += kMxBlock) {
    const int64_t q_end = k - q < kMxBlock ? k : q + kMxBlock;
    const uint8_t* sq = scale + q / kMxBlock * kPanelWidth;
    const bool fused = Mxfp4SumScales(sq, s);
    if (!fused) Mxfp4BlockScales(sq, s);
    for (int half = 0; half < 2; ++half) {
      __m256 a0, a1, a2, a3, b0, b1, b2, b3;
      a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = _mm256_setzero_ps();
      auto steps = [&](__m256i x, __m256 pair) __attribute__((always_inline)) {
        if (half != 0) x = _mm256_mulhi_epu16(x, t.shift4);
        const __m256i v =
            _mm256_shuffle_epi8(t.table, _mm256_and_si256(x, t.nibble));
        const __m256 r0 = _mm256_permutevar_ps(pair, sel0);
        const __m256 r1 = _mm256_permutevar_ps(pair, sel1);
#define MOE_PLACE(j) _mm256_cvtepi32_ps(_mm256_shuffle_epi8(v, t.top[j]))
        const __m256 w0 = MOE_PLACE(0), w1 = MOE_PLACE(1), w2 = MOE_PLACE(2),
                     w3 = MOE_PLACE(3);
#undef MOE_PLACE
        a0 = _mm256_fmadd_ps(r0, w0, a0);
        a1 = _mm256_fmadd_ps(r0, w1, a1);
        a2 = _mm256_fmadd_ps(r0, w2, a2);
        a3 = _mm256_fmadd_ps(r0, w3, a3);
        b0 = _mm256_fmadd_ps(r1, w0, b0);
        b1 = _mm256_fmadd_ps(r1, w1, b1);
        b2 = _mm256_fmadd_ps(r1, w2, b2);
        b3 = _mm256_fmadd_ps(r1, w3, b3);
      };
      int64_t kk = q;
      for (; kk + 1 < q_end; kk += 2) {
        if (half == 0) PrefetchStep(prefetch, kk);
        steps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                w + kk * kStepElems<Mxfp4Byte>)),
            _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ap + kk * 2)));
      }
      if (kk < q_end) {
        // An odd last step: zero codes and activations in lane 1.
        if (half == 0) PrefetchStep(prefetch, kk);
        steps(_mm256_zextsi128_si256(
                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(
                      w + kk * kStepElems<Mxfp4Byte>))),
              _mm256_zextps128_ps256(_mm_castpd_ps(
                  _mm_load_sd(reinterpret_cast<const double*>(ap + kk * 2)))));
      }
      const int g0 = 4 * half;
      AddBlockSum(a0, g0, s, fused, sums[0]);
      AddBlockSum(a1, g0 + 1, s, fused, sums[0]);
      AddBlockSum(a2, g0 + 2, s, fused, sums[0]);
      AddBlockSum(a3, g0 + 3, s, fused, sums[0]);
      AddBlockSum(b0, g0, s, fused, sums[1]);
      AddBlockSum(b1, g0 + 1, s, fused, sums[1]);
      AddBlockSum(b2, g0 + 2, s, fused, sums[1]);
      AddBlockSum(b3, g0 + 3, s, fused, sums[1]);
    }
  }
  for (int r = 0; r < 2; ++r) {
    float* tr = tile + r * kPanelWidth;
    for (int g = 0; g < 8; ++g) {
      __m128 v =
          _mm_add_ps(_mm_load_ps(sums[r][g]), _mm_load_ps(sums[r][g] + 4));
      if (!first) v = _mm_add_ps(v, _mm_loadu_ps(tr + 4 * g));
      _mm_storeu_ps(tr + 4 * g, v);
    }
  }
}

template <int MR, typename W>
void Tile(const float* ap, int64_t k, const W* w, float* tile, bool first,
          const W* prefetch, const ScaleOf<W>* scale) {
  // One MXFP4 row never comes here: GemmPanelsAvx2 sends it to
  // Mxfp4GemvAvx2.
  if constexpr (kIsMxfp4<W> && MR == 2) {
    Mxfp4TwoRows(ap, k, w, tile, first, prefetch, scale);
    return;
  }
  if constexpr (!kIsMxfp4<W> && MR <= 2) {
    PanelTile<MR, W>(ap, k, w, tile, first, prefetch, scale);
    return;
  }
  HalfTile<MR, W, 0>(ap, k, w, tile, first, prefetch, scale);
  HalfTile<MR, W, 1>(ap, k, w, tile + kHalfPanel, first, prefetch, scale);
}

template <typename W>
using TileFn = void (*)(const float*, int64_t, const W*, float*, bool, const W*,
                        const ScaleOf<W>*);

// Plain array (no std::array): see ThreadScratch for why.
template <typename W>
constexpr TileFn<W> kTiles[6] = {&Tile<1, W>, &Tile<2, W>, &Tile<3, W>,
                                 &Tile<4, W>, &Tile<5, W>, &Tile<6, W>};

// out[kk][0..32) = the dequantised FP8 or MXFP4 weights of kc steps (scales
// change every kScaleBlockK steps), prefetching the block the tiles read
// next.
template <typename W>
void Decode(const W* w, int64_t kc, const ScaleOf<W>* scale, const W* prefetch,
            float* out) {
  constexpr int64_t kBlockK = kScaleBlockK<W>;
  alignas(32) float buf[2][kHalfPanel];
  for (int64_t q = 0; q < kc; q += kBlockK) {
    const int64_t q_end = kc - q < kBlockK ? kc : q + kBlockK;
    const ScaleOf<W>* sq = scale + q / kBlockK * kPanelWidth;
    const float* s[2] = {HalfScales(sq, 0, buf[0]), HalfScales(sq, 1, buf[1])};
    for (int64_t kk = q; kk < q_end; ++kk) {
      PrefetchStep(prefetch, kk);
      for (int half = 0; half < 2; ++half) {
        __m256 w0, w1;
        LoadHalf(w + kk * kStepElems<W>, half, &w0, &w1);
        float* o = out + kk * kPanelWidth + half * kHalfPanel;
        _mm256_storeu_ps(o, _mm256_mul_ps(w0, _mm256_loadu_ps(s[half])));
        _mm256_storeu_ps(o + 8,
                         _mm256_mul_ps(w1, _mm256_loadu_ps(s[half] + 8)));
      }
    }
  }
}

#include "kernels/cpu/gemm_driver.h"  // NOLINT: inside the namespace

}  // namespace

void GemmPanelsAvx2(const float* const* a_rows, int64_t m, int64_t k,
                    const void* packed, WeightFormat format,
                    int64_t panel_begin, int64_t panel_end, Epilogue epilogue,
                    int64_t n_out, float* const* out_rows) {
  if (format == WeightFormat::kF32) {
    Run(a_rows, m, k, static_cast<const float*>(packed), panel_begin, panel_end,
        epilogue, n_out, out_rows);
  } else if (format == WeightFormat::kFP8) {
    Run(a_rows, m, k, static_cast<const uint8_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else if (format == WeightFormat::kMXFP4 && m == 1) {
    Mxfp4GemvAvx2(a_rows[0], k, packed, panel_begin, panel_end, epilogue, n_out,
                  out_rows[0]);
  } else if (format == WeightFormat::kMXFP4) {
    Run(a_rows, m, k, static_cast<const Mxfp4Byte*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else if (format == WeightFormat::kNVFP4 && m == 1) {
    Nvfp4GemvAvx2(a_rows[0], k, packed, panel_begin, panel_end, epilogue, n_out,
                  out_rows[0]);
  } else if (format == WeightFormat::kNVFP4) {
    Run(a_rows, m, k, static_cast<const Nvfp4Byte*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else {
    Run(a_rows, m, k, static_cast<const uint16_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  }
}

}  // namespace moe::kernels::cpu::internal
