// Internal: the GEMM tile epilogue (store, or SiLU-mul of fused gate/up
// panels), written so that the compiler vectorises it with whatever
// instruction set the including translation unit is built for: exp by range
// reduction and a polynomial, no library call (a scalar std::exp per element
// cost ~20% of the expert GEMM time). Internal linkage on purpose (see
// tile_helpers.h): every ISA unit gets its own copy, and all compute the
// same function.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/packed_gemm.h"

namespace moe::kernels::cpu::internal {

// exp(x) within 2 ulp for x in [-87, 88] (Cephes' expf polynomial): x =
// n ln2 + r with |r| <= ln2 / 2, exp(r) by a degree-6 polynomial, 2^n put
// into the exponent. Inputs are clamped so 2^n stays a normal float: the
// tails saturate to ~1e-38 and ~2e38, which is all SiLU needs.
static inline float FastExp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round to nearest by the 1.5 * 2^23 trick: no floor() call to vectorise.
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

// out[c] = silu(g[c]) * u[c] for c < n.
static inline void SiluMulRow(const float* g, const float* u, float* out,
                              int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    out[c] = g[c] / (1.0f + FastExp(-g[c])) * u[c];
  }
}

// Writes a finished [rows][32] accumulator tile of panel `panel` for output
// rows out_rows[0..rows).
static inline void StoreTile(const float* tile, int rows, int64_t panel,
                             Epilogue epilogue, int64_t n_out,
                             float* const* out_rows) {
  if (epilogue == Epilogue::kSwiGLU) {
    const int64_t col0 = panel * kHalfPanel;
    for (int r = 0; r < rows; ++r) {
      const float* t = tile + r * kPanelWidth;
      SiluMulRow(t, t + kHalfPanel, out_rows[r] + col0, kHalfPanel);
    }
    return;
  }
  const int64_t col0 = panel * kPanelWidth;
  const int64_t width = n_out - col0 < kPanelWidth ? n_out - col0 : kPanelWidth;
  if (width == kPanelWidth) {
    // A constant size: inlined as vector moves. A call per 128-byte row was
    // most of a short-K GEMM's time (the down projection at small I).
    for (int r = 0; r < rows; ++r) {
      std::memcpy(out_rows[r] + col0, tile + r * kPanelWidth,
                  kPanelWidth * sizeof(float));
    }
    return;
  }
  for (int r = 0; r < rows; ++r) {
    std::memcpy(out_rows[r] + col0, tile + r * kPanelWidth,
                static_cast<size_t>(width) * sizeof(float));
  }
}

}  // namespace moe::kernels::cpu::internal
