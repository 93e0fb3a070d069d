// Internal: helpers of the per-ISA micro-kernels. Included by each ISA's
// translation unit, so everything here has internal linkage: a shared inline
// copy could be resolved by the linker to the AVX-512 build of it on an AVX2
// machine.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/packed_gemm.h"

namespace moe::kernels::cpu::internal {

// The element type of MXFP4 panels (a byte of two E2M1 codes), distinct
// from FP8's uint8_t so that the driver and the tiles can tell them apart.
struct Mxfp4Byte {
  uint8_t bits;
};
template <typename W>
inline constexpr bool kIsMxfp4 = std::is_same_v<W, Mxfp4Byte>;
// The element type of NVFP4 panels: the same code bytes as MXFP4, a type of
// its own so that the tiles pick NVFP4's scales (E4M3Byte, one per 16 steps).
struct Nvfp4Byte {
  uint8_t bits;
};
struct E4M3Byte {
  uint8_t bits;
};
template <typename W>
inline constexpr bool kIsNvfp4 = std::is_same_v<W, Nvfp4Byte>;
// Both 4-bit formats: two codes a byte, 16 bytes a K step.
template <typename W>
inline constexpr bool kIsFp4 = kIsMxfp4<W> || kIsNvfp4<W>;
// FP8, MXFP4 and NVFP4 panels carry block scales after their codes.
template <typename W>
inline constexpr bool kBlockScaled = std::is_same_v<W, uint8_t> || kIsFp4<W>;
// W elements of one K step of a panel (32 columns).
template <typename W>
inline constexpr int64_t kStepElems = kIsFp4<W> ? kPanelWidth / 2 : kPanelWidth;
// K steps per block scale.
template <typename W>
inline constexpr int64_t kScaleBlockK = kIsMxfp4<W>   ? kMxBlock
                                        : kIsNvfp4<W> ? kNvBlock
                                                      : kFp8BlockK;
// The stored block scales: fp32 for FP8, E8M0 bytes for MXFP4, E4M3 bytes
// for NVFP4 (unused for fp32 and bf16 panels).
template <typename W>
using ScaleOf =
    std::conditional_t<kIsMxfp4<W>, uint8_t,
                       std::conditional_t<kIsNvfp4<W>, E4M3Byte, float>>;

// dst[kk * rows + r] = a_rows[r][kk] for r < rows, kk < k: the scalar form,
// for the tail and for ISAs without the vector one below.
static inline void PackATileScalar(const float* const* a_rows, int rows,
                                   int64_t k_begin, int64_t k, float* dst) {
  for (int r = 0; r < rows; ++r) {
    const float* src = a_rows[r];
    float* d = dst + r;
    for (int64_t kk = k_begin; kk < k; ++kk) d[kk * rows] = src[kk];
  }
}

#if defined(__AVX512F__)
// v[j] <- column j of the 16 x 16 matrix whose row i is v[i].
static inline void Transpose16x16(__m512 v[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  // v[4q + c] = rows 4q..4q+3 of columns c, c + 4, c + 8, c + 12.
  for (int q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]),
                  b = _mm512_castps_pd(t[4 * q + 1]),
                  c = _mm512_castps_pd(t[4 * q + 2]),
                  d = _mm512_castps_pd(t[4 * q + 3]);
    v[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    v[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    v[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    v[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // t[c] (c < 4) = rows 0..7 of columns c, c + 8; t[c + 4]: of c + 4,
  // c + 12; t[8 + ...] the same for rows 8..15.
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < 4; ++c) {
      t[8 * h + c] = _mm512_shuffle_f32x4(v[8 * h + c], v[8 * h + 4 + c], 0x88);
      t[8 * h + 4 + c] =
          _mm512_shuffle_f32x4(v[8 * h + c], v[8 * h + 4 + c], 0xdd);
    }
  }
  for (int c = 0; c < 8; ++c) {
    v[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    v[c + 8] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}
#endif

// dst[kk * rows + r] = a_rows[r][kk] for r < rows <= 16, kk < k. With
// AVX-512, 16 steps of K at a time through a register transpose: the scalar
// form's strided stores made packing A as slow as the GEMM itself for
// GEMMs of one or two panels (the gate, experts with small I). Moves values
// only: the packed tile is bit for bit the scalar form's.
static inline void PackATile(const float* const* a_rows, int rows, int64_t k,
                             float* dst) {
  int64_t kk = 0;
#if defined(__AVX512F__)
  const __mmask16 lanes = static_cast<__mmask16>((1u << rows) - 1);
  for (; kk + 16 <= k; kk += 16) {
    __m512 v[16];
    for (int r = 0; r < 16; ++r) {
      v[r] = r < rows ? _mm512_loadu_ps(a_rows[r] + kk) : _mm512_setzero_ps();
    }
    Transpose16x16(v);
    for (int j = 0; j < 16; ++j) {
      _mm512_mask_storeu_ps(dst + (kk + j) * rows, lanes, v[j]);
    }
  }
#endif
  PackATileScalar(a_rows, rows, kk, k, dst);
}

#if defined(__AVX2__)
// 8 E4M3 bytes -> their values times 2^-8, exact, through fp16 patterns
// (see WidenFp8 in gemm_avx512.cc; NaN bytes never reach a panel).
static inline __m256 WidenE4M3x8(const E4M3Byte* s) {
  const __m128i x =
      _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
  const __m128i f16 = _mm_and_si128(_mm_slli_epi16(x, 7),
                                    _mm_set1_epi16(static_cast<short>(0xbf80)));
  return _mm256_cvtph_ps(f16);
}

// WidenE4M3x8 for 16 bytes at once (one sign extension, shift and mask for
// both eights): out[0] holds bytes 0-7, out[1] bytes 8-15.
static inline void WidenE4M3x16(const E4M3Byte* s, __m256 out[2]) {
  const __m256i x = _mm256_cvtepi8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  const __m256i f16 = _mm256_and_si256(
      _mm256_slli_epi16(x, 7), _mm256_set1_epi16(static_cast<short>(0xbf80)));
  out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(f16));
  out[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(f16, 1));
}

// 2^(s - 127) for 8 E8M0 bytes: each byte shifted into the exponent field;
// s = 0 gives the field 0, raised to 2^-127 by the max (every other s is
// above it). Exact.
static inline __m256 WidenE8M0x8(const uint8_t* s) {
  const __m256i b = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
  return _mm256_max_ps(_mm256_castsi256_ps(_mm256_slli_epi32(b, 23)),
                       _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
}
#endif

// Prefetches the cache lines of weight step `kk` of a panel block (32
// values: one line of bf16, two of fp32, part of one for FP8 and MXFP4).
// Never null: a branch here makes GCC keep the accumulators in memory.
template <typename W>
static inline void PrefetchStep(const W* prefetch, int64_t kk) {
  const char* p = reinterpret_cast<const char*>(prefetch + kk * kStepElems<W>);
  _mm_prefetch(p, _MM_HINT_T0);
  if constexpr (sizeof(W) == 4) _mm_prefetch(p + 64, _MM_HINT_T0);
}

// NVFP4: multiplies each of the `rows` x 32 sums of a panel's tile by its
// column scale (the global scale times 2^8, stored after the panel's block
// scales), once the whole K sum is in; a no-op for the other formats.
template <typename W>
static inline void ApplyColumnScales(const W* panel, int64_t k, float* tile,
                                     int rows) {
  if constexpr (kIsNvfp4<W>) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(panel) +
                        kPanelWidth / 2 * k + NvBlocks(k) * kPanelWidth;
    float col[kPanelWidth];
    __builtin_memcpy(col, bytes, sizeof(col));
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < kPanelWidth; ++c) tile[r * kPanelWidth + c] *= col[c];
    }
  }
}

}  // namespace moe::kernels::cpu::internal
