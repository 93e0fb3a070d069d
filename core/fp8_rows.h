// FP8 rows, the dispatch all-to-all's payload under the router's
// --dispatch-dtype fp8 (docs/architecture.md section 5), as DeepEP's FP8
// dispatch packs tokens: each row of H fp32 values becomes its H e4m3 codes
// followed by one fp32 scale per group of 128 channels (the last group
// narrower when H is not a multiple of 128), unaligned, little-endian, so
// that n rows are one byte buffer of n * Fp8RowBytes(H) bytes.
//   scale = amax of the group / 448 (1 for a group of zeros; at least the
//           smallest normal fp32, so that no code divides by zero)
//   code  = e4m3(value / scale), round to nearest even (core/dtype.h)
//   value = e4m3 value of code * scale
#pragma once

#include <cstdint>

namespace moe {

inline constexpr int64_t kFp8RowGroup = 128;

// ceil(H / 128): scales per row.
inline int64_t Fp8RowGroups(int64_t hidden) {
  return (hidden + kFp8RowGroup - 1) / kFp8RowGroup;
}
// H code bytes plus 4 bytes per scale.
inline int64_t Fp8RowBytes(int64_t hidden) {
  return hidden + 4 * Fp8RowGroups(hidden);
}

// rows [n, H] fp32 -> packed [n, Fp8RowBytes(H)] bytes.
void QuantizeFp8Rows(const float* rows, int64_t n, int64_t hidden,
                     uint8_t* packed);
// packed [n, Fp8RowBytes(H)] bytes -> rows [n, H] fp32.
void DequantizeFp8Rows(const uint8_t* packed, int64_t n, int64_t hidden,
                       float* rows);

}  // namespace moe
