// Rows viewed where they arrived: a 2-D matrix of F32, BF16 or F16 elements
// in a message's own bytes, checked once (proto/tensor_codec.h's
// CheckMatrix) and converted to fp32 only where a step needs them, so that
// the code after the RPC handler sees the rows without a copy and without
// a wire type.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace moe {

// `data` points into the message it came from, which must outlive the view.
struct WireMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;  // F32, BF16 or F16
  const char* data = nullptr;
};

// Rows [first, first + count) of `m` as fp32 into `dst` (exact).
inline void DecodeRows(const WireMatrix& m, int64_t first, int64_t count,
                       float* dst) {
  const size_t esize = DTypeSize(m.dtype);
  const char* src = m.data + static_cast<size_t>(first * m.cols) * esize;
  ConvertToF32(m.dtype, src, static_cast<size_t>(count * m.cols), dst);
}

}  // namespace moe
