#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace moe {
namespace {

struct DTypeEntry {
  DType dtype;
  absl::string_view name;
  size_t size;
  bool floating;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF32, "F32", 4, true},        {DType::kBF16, "BF16", 2, true},
    {DType::kF16, "F16", 2, true},        {DType::kF64, "F64", 8, true},
    {DType::kI64, "I64", 8, false},       {DType::kI32, "I32", 4, false},
    {DType::kI16, "I16", 2, false},       {DType::kI8, "I8", 1, false},
    {DType::kU8, "U8", 1, false},         {DType::kBool, "BOOL", 1, false},
    {DType::kF8E4M3, "F8_E4M3", 1, true}, {DType::kF8E5M2, "F8_E5M2", 1, true},
};

const DTypeEntry& Entry(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // Unreachable: every enumerator is listed.
}

}  // namespace

size_t DTypeSize(DType dtype) { return Entry(dtype).size; }
absl::string_view DTypeName(DType dtype) { return Entry(dtype).name; }
bool IsFloatingPoint(DType dtype) { return Entry(dtype).floating; }

std::optional<DType> ParseDTypeName(absl::string_view name) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return std::nullopt;
}

float Bf16ToF32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t F32ToBf16(float value) {
  uint32_t u = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);  // Round to nearest, ties to even.
  return static_cast<uint16_t>(u >> 16);
}

// IEEE half conversions through the compiler's _Float16, which rounds
// correctly (and handles subnormals, inf and NaN) on every target GCC >= 12
// supports.
float F16ToF32(uint16_t bits) {
  return static_cast<float>(std::bit_cast<_Float16>(bits));
}

uint16_t F32ToF16(float value) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(value));
}

float F8E4M3ToF32(uint8_t bits) {
  // E4M3FN: bias 7, no infinities, 0x7f/0xff are NaN.
  const uint32_t sign = bits >> 7;
  const uint32_t exp = (bits >> 3) & 0xf;
  const uint32_t man = bits & 0x7;
  float v;
  if (exp == 0xf && man == 0x7) {
    v = std::nanf("");
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);  // man/8 * 2^-6
  } else {
    v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f,
                   static_cast<int>(exp) - 7);
  }
  return sign ? -v : v;
}

float F8E5M2ToF32(uint8_t bits) {
  // E5M2 is the top byte of an IEEE half.
  return F16ToF32(static_cast<uint16_t>(bits) << 8);
}

bool ConvertToF32(DType src_dtype, const void* src, size_t count, float* dst) {
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return true;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = Bf16ToF32(s[i]);
      return true;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = F16ToF32(s[i]);
      return true;
    }
    case DType::kF64: {
      const auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(s[i]);
      return true;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = F8E4M3ToF32(s[i]);
      return true;
    }
    case DType::kF8E5M2: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = F8E5M2ToF32(s[i]);
      return true;
    }
    default:
      return false;
  }
}

bool ConvertFromF32(DType dst_dtype, const float* src, size_t count,
                    void* dst) {
  switch (dst_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return true;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = F32ToBf16(src[i]);
      return true;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) d[i] = F32ToF16(src[i]);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace moe
