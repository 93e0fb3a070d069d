#include "core/fp8_rows.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cstring>

#include "core/dtype.h"
#include "core/vector_clones.h"

namespace moe {
namespace {

constexpr float kE4M3Max = 448.0f;

// Largest |value| of a group, compared as bit patterns: for non-negative
// floats their order is the integers' order, and an integer max reduction
// vectorises where a float one (NaN rules) does not. A NaN gives a NaN amax.
// Built for AVX-512, AVX2 and the baseline, picked at load, as
// core/dtype's bulk e4m3 loops (SSE2 has no unsigned 32-bit max).
MOE_VECTOR_CLONES float GroupAmax(const float* v, int64_t count) {
  uint32_t amax = 0;
  for (int64_t i = 0; i < count; ++i) {
    amax = std::max(amax, std::bit_cast<uint32_t>(v[i]) & 0x7fffffffu);
  }
  return std::bit_cast<float>(amax);
}

float GroupScale(float amax) {
  if (amax == 0.0f) return 1.0f;  // all zeros: their codes are zeros anyway
  // Rows of subnormal values would get a subnormal (or zero) scale, and
  // value / scale would lose digits or be 0/0: the smallest normal scale
  // keeps every code finite (those values are then coded exactly or as 0).
  return std::max(amax / kE4M3Max, FLT_MIN);
}

}  // namespace

void QuantizeFp8Rows(const float* rows, int64_t n, int64_t H, uint8_t* packed) {
  const int64_t groups = Fp8RowGroups(H), row_bytes = Fp8RowBytes(H);
  for (int64_t r = 0; r < n; ++r) {
    const float* x = rows + r * H;
    uint8_t* codes = packed + r * row_bytes;
    uint8_t* scales = codes + H;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * kFp8RowGroup;
      const int64_t width = std::min(kFp8RowGroup, H - begin);
      const float scale = GroupScale(GroupAmax(x + begin, width));
      QuantizeF8E4M3(x + begin, width, scale, codes + begin);
      std::memcpy(scales + 4 * g, &scale, 4);
    }
  }
}

void DequantizeFp8Rows(const uint8_t* packed, int64_t n, int64_t H,
                       float* rows) {
  const int64_t groups = Fp8RowGroups(H), row_bytes = Fp8RowBytes(H);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* codes = packed + r * row_bytes;
    const uint8_t* scales = codes + H;
    float* x = rows + r * H;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * kFp8RowGroup;
      const int64_t width = std::min(kFp8RowGroup, H - begin);
      float scale;
      std::memcpy(&scale, scales + 4 * g, 4);
      DequantizeF8E4M3(codes + begin, width, scale, x + begin);
    }
  }
}

}  // namespace moe
