// AVX-512 GemmPanels: 12x32 register tile (24 zmm accumulators), weights
// widened from bf16 or FP8 in registers. Built with -mavx512f/bw/dq/vl.
#include <immintrin.h>

#include "kernels/cpu/gemm_isa.h"
#include "kernels/cpu/tile_helpers.h"
#include "kernels/cpu/tile_store.h"

namespace moe::kernels::cpu::internal {
namespace {

constexpr int kTileRows = 12;
// Depth of a K block: 256 x 32 fp32 weights = 32 KiB, inside L1d.
constexpr int64_t kKBlock = 256;

inline void LoadW(const float* p, __m512* lo, __m512* hi) {
  *lo = _mm512_loadu_ps(p);
  *hi = _mm512_loadu_ps(p + 16);
}

inline __m512 WidenBf16(__m256i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

inline void LoadW(const uint16_t* p, __m512* lo, __m512* hi) {
  *lo = WidenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  *hi = WidenBf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
}

// 32 e4m3 codes -> fp32 values / 2^8, exact for all non-NaN codes. An e4m3
// code with its sign moved to bit 15 and the rest shifted left by 7 is an
// fp16 bit pattern (exponent bias 15 instead of 7, subnormals included) whose
// value is the code's times 2^-8; the packed scales carry the 2^8 back, and
// are NaN where a NaN code is (PackRowsFP8), so NaN needs no test here.
inline void WidenFp8(__m256i codes, __m512* lo, __m512* hi) {
  const __m512i x = _mm512_cvtepi8_epi16(codes);  // sign-extended
  // Bits 15 and 14 now both hold the sign: keep 15, clear 14.
  const __m512i f16 = _mm512_and_si512(
      _mm512_slli_epi16(x, 7), _mm512_set1_epi16(static_cast<short>(0xbf80)));
  *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(f16));
  *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f16, 1));
}

inline void LoadW(const uint8_t* p, __m512* lo, __m512* hi) {
  WidenFp8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), lo, hi);
}

// Tile for FP8 weights and decode-sized row counts (a row or three per
// expert): with so few rows the FMA chains, not the loads, set the pace, so
// even and odd K steps accumulate apart, unscaled, and each 128-deep block's
// sum is scaled once onto the tile (two multiplies per step fewer). Sums,
// not products, are scaled: not bit-equal to the fp32 kernel on dequantised
// weights, but of the same fp32 accuracy.
template <int MR>
void Fp8FewRows(const float* ap, int64_t k, const uint8_t* w, float* tile,
                bool first, const uint8_t* prefetch, const float* scale) {
  __m512 lo[MR], hi[MR];
  for (int r = 0; r < MR; ++r) {
    lo[r] =
        first ? _mm512_setzero_ps() : _mm512_loadu_ps(tile + r * kPanelWidth);
    hi[r] = first ? _mm512_setzero_ps()
                  : _mm512_loadu_ps(tile + r * kPanelWidth + 16);
  }
  for (int64_t q = 0; q < k; q += kFp8BlockK) {
    const int64_t q_end = k - q < kFp8BlockK ? k : q + kFp8BlockK;
    __m512 el[MR], eh[MR], ol[MR], oh[MR];
    for (int r = 0; r < MR; ++r) {
      el[r] = eh[r] = ol[r] = oh[r] = _mm512_setzero_ps();
    }
    int64_t kk = q;
    for (; kk + 1 < q_end; kk += 2) {
      PrefetchStep(prefetch, kk);  // 64 bytes: both steps
      __m512 w0, w1, w2, w3;
      LoadW(w + kk * kPanelWidth, &w0, &w1);
      LoadW(w + (kk + 1) * kPanelWidth, &w2, &w3);
      const float* a = ap + kk * MR;
      for (int r = 0; r < MR; ++r) {
        const __m512 b0 = _mm512_set1_ps(a[r]);
        const __m512 b1 = _mm512_set1_ps(a[MR + r]);
        el[r] = _mm512_fmadd_ps(b0, w0, el[r]);
        eh[r] = _mm512_fmadd_ps(b0, w1, eh[r]);
        ol[r] = _mm512_fmadd_ps(b1, w2, ol[r]);
        oh[r] = _mm512_fmadd_ps(b1, w3, oh[r]);
      }
    }
    if (kk < q_end) {
      __m512 w0, w1;
      LoadW(w + kk * kPanelWidth, &w0, &w1);
      for (int r = 0; r < MR; ++r) {
        const __m512 b = _mm512_set1_ps(ap[kk * MR + r]);
        el[r] = _mm512_fmadd_ps(b, w0, el[r]);
        eh[r] = _mm512_fmadd_ps(b, w1, eh[r]);
      }
    }
    const __m512 s0 = _mm512_loadu_ps(scale + q / kFp8BlockK * kPanelWidth);
    const __m512 s1 =
        _mm512_loadu_ps(scale + q / kFp8BlockK * kPanelWidth + 16);
    for (int r = 0; r < MR; ++r) {
      lo[r] = _mm512_fmadd_ps(_mm512_add_ps(el[r], ol[r]), s0, lo[r]);
      hi[r] = _mm512_fmadd_ps(_mm512_add_ps(eh[r], oh[r]), s1, hi[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(tile + r * kPanelWidth, lo[r]);
    _mm512_storeu_ps(tile + r * kPanelWidth + 16, hi[r]);
  }
}

// tile[r][0..32) (+)= sum_kk ap[kk*MR + r] * w[kk][0..32); starts from
// zero when `first`, else accumulates onto the tile. FP8 weights are scaled
// in registers by their K block's scales (`scale`, one row of 32 per block),
// so each weight is the dequantised value, rounded once, as in fp32.
template <int MR, typename W>
void Tile(const float* ap, int64_t k, const W* w, float* tile, bool first,
          const W* prefetch, const float* scale) {
  constexpr bool kFp8 = sizeof(W) == 1;
  if constexpr (kFp8 && MR <= 3) {
    Fp8FewRows<MR>(ap, k, w, tile, first, prefetch, scale);
    return;
  }
  __m512 lo[MR], hi[MR];
  for (int r = 0; r < MR; ++r) {
    lo[r] =
        first ? _mm512_setzero_ps() : _mm512_loadu_ps(tile + r * kPanelWidth);
    hi[r] = first ? _mm512_setzero_ps()
                  : _mm512_loadu_ps(tile + r * kPanelWidth + 16);
  }
  if constexpr (kFp8) {
    for (int64_t q = 0; q < k; q += kFp8BlockK) {
      const int64_t q_end = k - q < kFp8BlockK ? k : q + kFp8BlockK;
      const __m512 s0 = _mm512_loadu_ps(scale + q / kFp8BlockK * kPanelWidth);
      const __m512 s1 =
          _mm512_loadu_ps(scale + q / kFp8BlockK * kPanelWidth + 16);
      for (int64_t kk = q; kk < q_end; ++kk) {
        PrefetchStep(prefetch, kk);
        __m512 w0, w1;
        LoadW(w + kk * kPanelWidth, &w0, &w1);
        w0 = _mm512_mul_ps(w0, s0);
        w1 = _mm512_mul_ps(w1, s1);
        const float* a = ap + kk * MR;
        for (int r = 0; r < MR; ++r) {
          const __m512 b = _mm512_set1_ps(a[r]);
          lo[r] = _mm512_fmadd_ps(b, w0, lo[r]);
          hi[r] = _mm512_fmadd_ps(b, w1, hi[r]);
        }
      }
    }
  } else {
    // The plain loop, apart: inside the block loop above GCC compiled the
    // fp32 tile ~1.5x slower (m = 6, single thread).
    for (int64_t kk = 0; kk < k; ++kk) {
      PrefetchStep(prefetch, kk);
      __m512 w0, w1;
      LoadW(w + kk * kPanelWidth, &w0, &w1);
      const float* a = ap + kk * MR;
      for (int r = 0; r < MR; ++r) {
        const __m512 b = _mm512_set1_ps(a[r]);
        lo[r] = _mm512_fmadd_ps(b, w0, lo[r]);
        hi[r] = _mm512_fmadd_ps(b, w1, hi[r]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(tile + r * kPanelWidth, lo[r]);
    _mm512_storeu_ps(tile + r * kPanelWidth + 16, hi[r]);
  }
}

template <typename W>
using TileFn = void (*)(const float*, int64_t, const W*, float*, bool, const W*,
                        const float*);

// Plain array (no std::array): see ThreadScratch for why.
template <typename W>
constexpr TileFn<W> kTiles[12] = {&Tile<1, W>,  &Tile<2, W>,  &Tile<3, W>,
                                  &Tile<4, W>,  &Tile<5, W>,  &Tile<6, W>,
                                  &Tile<7, W>,  &Tile<8, W>,  &Tile<9, W>,
                                  &Tile<10, W>, &Tile<11, W>, &Tile<12, W>};

// out[kk][0..32) = the dequantised FP8 weights of kc steps (scales change
// every kFp8BlockK steps), prefetching the block the tiles read next.
void DecodeFp8(const uint8_t* w, int64_t kc, const float* scale,
               const uint8_t* prefetch, float* out) {
  for (int64_t q = 0; q < kc; q += kFp8BlockK) {
    const int64_t q_end = kc - q < kFp8BlockK ? kc : q + kFp8BlockK;
    const __m512 s0 = _mm512_loadu_ps(scale + q / kFp8BlockK * kPanelWidth);
    const __m512 s1 =
        _mm512_loadu_ps(scale + q / kFp8BlockK * kPanelWidth + 16);
    for (int64_t kk = q; kk < q_end; ++kk) {
      PrefetchStep(prefetch, kk);
      __m512 w0, w1;
      LoadW(w + kk * kPanelWidth, &w0, &w1);
      _mm512_storeu_ps(out + kk * kPanelWidth, _mm512_mul_ps(w0, s0));
      _mm512_storeu_ps(out + kk * kPanelWidth + 16, _mm512_mul_ps(w1, s1));
    }
  }
}

#include "kernels/cpu/gemm_driver.h"  // NOLINT: inside the namespace

}  // namespace

void GemmPanelsAvx512(const float* const* a_rows, int64_t m, int64_t k,
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
