#include "core/bf16_rows.h"

#include <cstring>

namespace moe {
namespace {

// Branch-free so that the loops vectorise: a NaN keeps its payload's top
// bits and gets the quiet bit, everything else rounds to nearest even
// (overflow goes to infinity, as IEEE rounding does).
inline uint16_t NarrowBits(uint32_t u) {
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(nan ? quiet : rounded);
}

}  // namespace

void F32ToBf16Bits(const float* src, size_t count, uint16_t* dst) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    dst[i] = NarrowBits(u);
  }
}

void Bf16BitsToF32(const void* src, size_t count, float* dst) {
  const auto* p = static_cast<const char*>(src);
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

void RoundToBf16(float* v, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t u;
    std::memcpy(&u, v + i, 4);
    u = static_cast<uint32_t>(NarrowBits(u)) << 16;
    std::memcpy(v + i, &u, 4);
  }
}

}  // namespace moe
