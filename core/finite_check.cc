#include "core/finite_check.h"

#include <cstdint>
#include <cstring>

#include "core/vector_clones.h"

namespace moe {
namespace {

// Element `i` of `p` as its bits (memcpy: the buffer holds floats; the
// compiler turns it into a plain load).
template <typename Bits>
Bits BitsAt(const char* p, int64_t i) {
  Bits b;
  std::memcpy(&b, p + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
  return b;
}

// All exponent bits set: an infinity or a NaN, in every IEEE format. An OR
// of compares in the values' own width rather than a max of the exponent
// bits (the baseline's SSE2 has no unsigned 32-bit max), built for AVX-512,
// AVX2 and the baseline (GCC function multiversioning): every request and
// every answer goes through it.

MOE_VECTOR_CLONES
bool RowHasNonFinite32(const char* row, int64_t cols) {
  uint32_t bad = 0;
  for (int64_t c = 0; c < cols; ++c) {
    bad |= (BitsAt<uint32_t>(row, c) & 0x7F800000u) == 0x7F800000u;
  }
  return bad != 0;
}

MOE_VECTOR_CLONES
bool RowHasNonFinite16(const char* row, int64_t cols, uint16_t exponent) {
  uint16_t bad = 0;
  for (int64_t c = 0; c < cols; ++c) {
    bad |= (BitsAt<uint16_t>(row, c) & exponent) == exponent;
  }
  return bad != 0;
}

template <typename Bits, Bits kExponent>
bool RowHasNonFinite(const char* row, int64_t cols) {
  if constexpr (sizeof(Bits) == 4) {
    return RowHasNonFinite32(row, cols);
  } else {
    return RowHasNonFinite16(row, cols, kExponent);
  }
}

template <typename Bits, Bits kExponent>
int64_t FirstRow(const void* v, int64_t rows, int64_t cols) {
  const auto* p = static_cast<const char*>(v);
  const int64_t stride = cols * static_cast<int64_t>(sizeof(Bits));
  for (int64_t r = 0; r < rows; ++r) {
    if (RowHasNonFinite<Bits, kExponent>(p + r * stride, cols)) return r;
  }
  return -1;
}

template <typename Bits, Bits kExponent>
int64_t FirstInRow(const void* row, int64_t cols) {
  const auto* p = static_cast<const char*>(row);
  for (int64_t c = 0; c < cols; ++c) {
    if ((BitsAt<Bits>(p, c) & kExponent) == kExponent) return c;
  }
  return -1;
}

}  // namespace

int64_t FirstNonFiniteRow(const float* v, int64_t rows, int64_t cols) {
  return FirstNonFiniteRow(DType::kF32, v, rows, cols);
}

int64_t FirstNonFiniteRow(DType dtype, const void* v, int64_t rows,
                          int64_t cols) {
  switch (dtype) {
    case DType::kF32:
      return FirstRow<uint32_t, 0x7F800000u>(v, rows, cols);
    case DType::kBF16:
      return FirstRow<uint16_t, 0x7F80u>(v, rows, cols);
    case DType::kF16:
      return FirstRow<uint16_t, 0x7C00u>(v, rows, cols);
    default:
      return -1;
  }
}

int64_t FirstNonFiniteInRow(DType dtype, const void* row, int64_t cols) {
  switch (dtype) {
    case DType::kF32:
      return FirstInRow<uint32_t, 0x7F800000u>(row, cols);
    case DType::kBF16:
      return FirstInRow<uint16_t, 0x7F80u>(row, cols);
    case DType::kF16:
      return FirstInRow<uint16_t, 0x7C00u>(row, cols);
    default:
      return -1;
  }
}

}  // namespace moe
