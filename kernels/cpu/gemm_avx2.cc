// AVX2/FMA GemmPanels: each 32-column panel is computed as two 6x16 register
// tiles (12 ymm accumulators). Built with -mavx2 -mfma -mf16c.
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

// tile[r][half*16 .. +16) (+)= sum_kk ap[kk*MR + r] * w[kk][half*16 .. +16);
// from zero when `first`. The accumulators are named variables, not an
// array: with only 16 ymm registers GCC keeps an array of them on the stack
// and stores it back on every step (seen in the disassembly, half speed).
// FP8 weights are scaled in registers by their K block's scales.
template <int MR, typename W>
void HalfTile(const float* ap, int64_t k, const W* w, float* tile, bool first,
              const W* prefetch, const float* scale) {
  static_assert(MR >= 1 && MR <= 6);
  constexpr bool kFp8 = sizeof(W) == 1;
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
  if constexpr (kFp8) {
    for (int64_t q = 0; q < k; q += kFp8BlockK) {
      const int64_t q_end = k - q < kFp8BlockK ? k : q + kFp8BlockK;
      const float* s = scale + q / kFp8BlockK * kPanelWidth;
      for (int64_t kk = q; kk < q_end; ++kk) {
        PrefetchStep(prefetch, kk);
        __m256 w0, w1;
        LoadW(w + kk * kPanelWidth, &w0, &w1);
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
      PrefetchStep(prefetch, kk);
      __m256 w0, w1;
      LoadW(w + kk * kPanelWidth, &w0, &w1);
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

template <int MR, typename W>
void Tile(const float* ap, int64_t k, const W* w, float* tile, bool first,
          const W* prefetch, const float* scale) {
  HalfTile<MR>(ap, k, w, tile, first, prefetch, scale);
  HalfTile<MR, W>(ap, k, w + kHalfPanel, tile + kHalfPanel, first,
                  w + kHalfPanel,
                  scale == nullptr ? nullptr : scale + kHalfPanel);
}

template <typename W>
using TileFn = void (*)(const float*, int64_t, const W*, float*, bool, const W*,
                        const float*);

// Plain array (no std::array): see ThreadScratch for why.
template <typename W>
constexpr TileFn<W> kTiles[6] = {&Tile<1, W>, &Tile<2, W>, &Tile<3, W>,
                                 &Tile<4, W>, &Tile<5, W>, &Tile<6, W>};

// out[kk][0..32) = the dequantised FP8 weights of kc steps (scales change
// every kFp8BlockK steps), prefetching the block the tiles read next.
void DecodeFp8(const uint8_t* w, int64_t kc, const float* scale,
               const uint8_t* prefetch, float* out) {
  for (int64_t kk = 0; kk < kc; ++kk) {
    PrefetchStep(prefetch, kk);
    const float* s = scale + kk / kFp8BlockK * kPanelWidth;
    for (int half = 0; half < 2; ++half) {
      __m256 w0, w1;
      LoadW(w + kk * kPanelWidth + half * kHalfPanel, &w0, &w1);
      float* o = out + kk * kPanelWidth + half * kHalfPanel;
      _mm256_storeu_ps(o, _mm256_mul_ps(w0, _mm256_loadu_ps(s + half * 16)));
      _mm256_storeu_ps(o + 8,
                       _mm256_mul_ps(w1, _mm256_loadu_ps(s + half * 16 + 8)));
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
  } else {
    Run(a_rows, m, k, static_cast<const uint16_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  }
}

}  // namespace moe::kernels::cpu::internal
