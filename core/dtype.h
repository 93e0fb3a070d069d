// Element types of tensors on disk and on the wire, and exact conversions
// between them and fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace moe {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,  // DeepSeek-V3 style block-quantised weights.
  kF8E5M2,
  // Power-of-two scales only (OCP MX E8M0: 2^(s - 127), 255 is NaN): the
  // `.scale` tensors of DeepSeek-V4's fp4/fp8 weights. Not a value type.
  kF8E8M0,
};

// The element type of the rows a step moves: kF32, kBF16, or kU8 for
// opaque bytes (packed FP8 rows, core/fp8_rows.h). The same enum, named for
// the step and collective code that reads it.
using ElementType = DType;

// Bytes per element.
size_t DTypeSize(DType dtype);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
absl::string_view DTypeName(DType dtype);
std::optional<DType> ParseDTypeName(absl::string_view name);
// True for the types that convert to fp32 values (floats and fp8).
bool IsFloatingPoint(DType dtype);

float Bf16ToF32(uint16_t bits);
// Round to nearest even; NaN stays NaN.
uint16_t F32ToBf16(float value);
float F16ToF32(uint16_t bits);
uint16_t F32ToF16(float value);
float F8E4M3ToF32(uint8_t bits);
// E4M3FN, round to nearest even; beyond 448 saturates to +-448 (the format
// has no infinity; quantisers scale into range first), NaN gives 0x7f.
uint8_t F32ToF8E4M3(float value);
// dst[i] = F32ToF8E4M3(src[i] / scale): the codes of values quantised with
// one scale (FP8 dispatch rows, core/fp8_rows.h).
void QuantizeF8E4M3(const float* src, size_t count, float scale, uint8_t* dst);
// dst[i] = F8E4M3ToF32(src[i]) * scale.
void DequantizeF8E4M3(const uint8_t* src, size_t count, float scale,
                      float* dst);
float F8E5M2ToF32(uint8_t bits);
// 2^(bits - 127); NaN for 255.
float E8M0ToF32(uint8_t bits);

// Converts `count` elements of a floating-point `src` to fp32. Returns false
// when `src_dtype` is not a floating-point type.
bool ConvertToF32(DType src_dtype, const void* src, size_t count, float* dst);
// Converts fp32 to F32, BF16 or F16. Returns false for other types.
bool ConvertFromF32(DType dst_dtype, const float* src, size_t count, void* dst);

}  // namespace moe
