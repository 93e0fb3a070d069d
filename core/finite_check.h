// Finding NaN and infinity in large row-major buffers, fast enough to run on
// every request and every answer: the exponent bits are tested with integer
// operations the compiler vectorises (a float reduction would be kept in
// order and run one element per add latency).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace moe {

// The first row of `rows` x `cols` fp32 values holding a NaN or an
// infinity; -1 when every value is finite.
int64_t FirstNonFiniteRow(const float* v, int64_t rows, int64_t cols);

// The same over raw F32, BF16 or F16 elements (the wire's types), read
// without converting them; -1 for any other dtype.
int64_t FirstNonFiniteRow(DType dtype, const void* v, int64_t rows,
                          int64_t cols);

// The first non-finite element's index within `row` of `cols` elements
// (for the error message once the row is known).
int64_t FirstNonFiniteInRow(DType dtype, const void* row, int64_t cols);

}  // namespace moe
