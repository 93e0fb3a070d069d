// AVX-512 GemmPanels: 12x32 register tile (24 zmm accumulators), weights
// widened from bf16, FP8 or MXFP4 in registers. Built with -mavx512f/bw/dq/vl.
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

// The 16 E2M1 values by code, as fp32: vpermps looks them up.
inline __m512 E2M1Table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                        -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
}

// One MXFP4 step, 16 bytes = 32 codes -> fp32 code values (unscaled): the
// bytes zero-extended to 16 dwords index the table with their low nibbles
// (vpermps reads only bits 0-3 of an index: columns 0-15), then shifted
// right by 4 (columns 16-31). Exact: E2M1 values are fp32 values.
inline void LoadW(const Mxfp4Byte* p, __m512* lo, __m512* hi) {
  const __m512i x = _mm512_cvtepu8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  *lo = _mm512_permutexvar_ps(x, E2M1Table());
  *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), E2M1Table());
}

// NVFP4 steps hold the same code bytes.
inline void LoadW(const Nvfp4Byte* p, __m512* lo, __m512* hi) {
  LoadW(reinterpret_cast<const Mxfp4Byte*>(p), lo, hi);
}

// 16 E8M0 bytes -> 2^(s - 127) exactly: the byte as an fp32 exponent field,
// and the subnormal 2^-127 for s = 0. (255, NaN, never reaches a panel.)
inline __m512 WidenE8M0(const uint8_t* s) {
  const __m512i b = _mm512_cvtepu8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  const __m512i f =
      _mm512_mask_mov_epi32(_mm512_slli_epi32(b, 23),
                            _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                            _mm512_set1_epi32(0x00400000));
  return _mm512_castsi512_ps(f);
}

// The 32 block scales of one K block: fp32 (FP8) or E8M0 (MXFP4).
inline void LoadScales(const float* s, __m512* s0, __m512* s1) {
  *s0 = _mm512_loadu_ps(s);
  *s1 = _mm512_loadu_ps(s + 16);
}
inline void LoadScales(const uint8_t* s, __m512* s0, __m512* s1) {
  *s0 = WidenE8M0(s);
  *s1 = WidenE8M0(s + 16);
}
// NVFP4: 32 E4M3 bytes -> their values times 2^-8 (the column scales carry
// the 2^8), exact; NaN bytes are refused at load.
inline void LoadScales(const E4M3Byte* s, __m512* s0, __m512* s1) {
  WidenFp8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)), s0, s1);
}

// Tile for FP8, MXFP4 and NVFP4 weights and decode-sized row counts (a row or
// three per expert): with so few rows the FMA chains, not the loads, set the
// pace, so even and odd K steps accumulate apart, unscaled, and each scale
// block's sum (128 deep for FP8, 32 for MXFP4, 16 for NVFP4) is scaled once
// onto the tile (two
// multiplies per step fewer). Sums, not products, are scaled: not bit-equal
// to the fp32 kernel on dequantised weights, but of the same fp32 accuracy.
template <int MR, typename W>
void FewRows(const float* ap, int64_t k, const W* w, float* tile, bool first,
             const W* prefetch, const ScaleOf<W>* scale) {
  constexpr int64_t kBlockK = kScaleBlockK<W>;
  constexpr int64_t kStep = kStepElems<W>;
  __m512 lo[MR], hi[MR];
  for (int r = 0; r < MR; ++r) {
    lo[r] =
        first ? _mm512_setzero_ps() : _mm512_loadu_ps(tile + r * kPanelWidth);
    hi[r] = first ? _mm512_setzero_ps()
                  : _mm512_loadu_ps(tile + r * kPanelWidth + 16);
  }
  for (int64_t q = 0; q < k; q += kBlockK) {
    const int64_t q_end = k - q < kBlockK ? k : q + kBlockK;
    __m512 el[MR], eh[MR], ol[MR], oh[MR];
    for (int r = 0; r < MR; ++r) {
      el[r] = eh[r] = ol[r] = oh[r] = _mm512_setzero_ps();
    }
    int64_t kk = q;
    for (; kk + 1 < q_end; kk += 2) {
      PrefetchStep(prefetch, kk);  // 64 bytes: both steps (FP8)
      __m512 w0, w1, w2, w3;
      LoadW(w + kk * kStep, &w0, &w1);
      LoadW(w + (kk + 1) * kStep, &w2, &w3);
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
      LoadW(w + kk * kStep, &w0, &w1);
      for (int r = 0; r < MR; ++r) {
        const __m512 b = _mm512_set1_ps(ap[kk * MR + r]);
        el[r] = _mm512_fmadd_ps(b, w0, el[r]);
        eh[r] = _mm512_fmadd_ps(b, w1, eh[r]);
      }
    }
    __m512 s0, s1;
    LoadScales(scale + q / kBlockK * kPanelWidth, &s0, &s1);
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
// zero when `first`, else accumulates onto the tile. FP8 and MXFP4 weights
// are scaled in registers by their K block's scales (`scale`, one row of 32
// per block), so each weight is the dequantised value, rounded once (for
// MXFP4 not at all: a code times a power of two), as in fp32.
template <int MR, typename W>
void Tile(const float* ap, int64_t k, const W* w, float* tile, bool first,
          const W* prefetch, const ScaleOf<W>* scale) {
  constexpr bool kQuant = kBlockScaled<W>;
  if constexpr (kQuant && MR <= 3) {
    FewRows<MR, W>(ap, k, w, tile, first, prefetch, scale);
    return;
  }
  __m512 lo[MR], hi[MR];
  for (int r = 0; r < MR; ++r) {
    lo[r] =
        first ? _mm512_setzero_ps() : _mm512_loadu_ps(tile + r * kPanelWidth);
    hi[r] = first ? _mm512_setzero_ps()
                  : _mm512_loadu_ps(tile + r * kPanelWidth + 16);
  }
  if constexpr (kQuant) {
    constexpr int64_t kBlockK = kScaleBlockK<W>;
    for (int64_t q = 0; q < k; q += kBlockK) {
      const int64_t q_end = k - q < kBlockK ? k : q + kBlockK;
      __m512 s0, s1;
      LoadScales(scale + q / kBlockK * kPanelWidth, &s0, &s1);
      for (int64_t kk = q; kk < q_end; ++kk) {
        PrefetchStep(prefetch, kk);
        __m512 w0, w1;
        LoadW(w + kk * kStepElems<W>, &w0, &w1);
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
                        const ScaleOf<W>*);

// Plain array (no std::array): see ThreadScratch for why.
template <typename W>
constexpr TileFn<W> kTiles[12] = {&Tile<1, W>,  &Tile<2, W>,  &Tile<3, W>,
                                  &Tile<4, W>,  &Tile<5, W>,  &Tile<6, W>,
                                  &Tile<7, W>,  &Tile<8, W>,  &Tile<9, W>,
                                  &Tile<10, W>, &Tile<11, W>, &Tile<12, W>};

// out[kk][0..32) = the dequantised FP8 or MXFP4 weights of kc steps (scales
// change every kScaleBlockK steps), prefetching the block the tiles read
// next.
template <typename W>
void Decode(const W* w, int64_t kc, const ScaleOf<W>* scale, const W* prefetch,
            float* out) {
  constexpr int64_t kBlockK = kScaleBlockK<W>;
  for (int64_t q = 0; q < kc; q += kBlockK) {
    const int64_t q_end = kc - q < kBlockK ? kc : q + kBlockK;
    __m512 s0, s1;
    LoadScales(scale + q / kBlockK * kPanelWidth, &s0, &s1);
    for (int64_t kk = q; kk < q_end; ++kk) {
      PrefetchStep(prefetch, kk);
      __m512 w0, w1;
      LoadW(w + kk * kStepElems<W>, &w0, &w1);
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
  } else if (format == WeightFormat::kMXFP4) {
    Run(a_rows, m, k, static_cast<const Mxfp4Byte*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else if (format == WeightFormat::kNVFP4) {
    Run(a_rows, m, k, static_cast<const Nvfp4Byte*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  } else {
    Run(a_rows, m, k, static_cast<const uint16_t*>(packed), panel_begin,
        panel_end, epilogue, n_out, out_rows);
  }
}

}  // namespace moe::kernels::cpu::internal
