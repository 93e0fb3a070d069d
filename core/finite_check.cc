#include "core/finite_check.h"

#include <algorithm>
#include <cstring>

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

// All exponent bits set: an infinity or a NaN, in every IEEE format.
template <typename Bits, Bits kExponent>
bool RowHasNonFinite(const char* row, int64_t cols) {
  Bits top = 0;
  for (int64_t c = 0; c < cols; ++c) {
    top = std::max<Bits>(top,
                         static_cast<Bits>(BitsAt<Bits>(row, c) & kExponent));
  }
  return top == kExponent;
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
