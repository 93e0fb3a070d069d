#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/vector_clones.h"

namespace moe {
namespace {

struct DTypeEntry {
  DType dtype;
  absl::string_view name;
  size_t size;
  bool floating;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kF32, "F32", 4, true},         {DType::kBF16, "BF16", 2, true},
    {DType::kF16, "F16", 2, true},         {DType::kF64, "F64", 8, true},
    {DType::kI64, "I64", 8, false},        {DType::kI32, "I32", 4, false},
    {DType::kI16, "I16", 2, false},        {DType::kI8, "I8", 1, false},
    {DType::kU8, "U8", 1, false},          {DType::kBool, "BOOL", 1, false},
    {DType::kF8E4M3, "F8_E4M3", 1, true},  {DType::kF8E5M2, "F8_E5M2", 1, true},
    {DType::kF8E8M0, "F8_E8M0", 1, false},
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
  // Branch-free, so that ConvertFromF32's loop vectorises (it narrows every
  // bf16 answer and step row): a NaN keeps its top bits and gets the quiet
  // bit; everything else rounds to nearest, ties to even (overflow goes to
  // infinity, as IEEE rounding does).
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(nan ? (u >> 16) | 0x40u : rounded);
}

// IEEE half conversions in plain bit arithmetic (clang < 15 has no x86
// _Float16): exact widening, and narrowing with round-to-nearest-even,
// subnormals, overflow to infinity and NaN kept NaN.
float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exp = (bits >> 10) & 0x1f;
  const uint32_t man = bits & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exact in fp32.
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t F32ToF16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffff;
  if (a >= 0x7f800000) {  // inf, NaN (keep it a NaN)
    return sign | 0x7c00 | (a > 0x7f800000 ? 0x200 | ((a >> 13) & 0x3ff) : 0);
  }
  // 65520 is the tie between 65504 (odd mantissa) and 65536: to infinity.
  if (a >= 0x477ff000) return sign | 0x7c00;
  if (a < 0x38800000) {
    // Below the smallest normal half: a subnormal count of 2^-24. Scaling by
    // 2^24 is exact, and nearbyint rounds to nearest even; 1024 correctly
    // becomes the smallest normal.
    const float scaled = std::bit_cast<float>(a) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t h = (a - 0x38000000) >> 13;  // rebias the exponent
  const uint32_t rest = a & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // may carry: fine
  return sign | static_cast<uint16_t>(h);
}

// The e4m3 conversions are branch-free so that the bulk loops below (and
// ConvertToF32's) vectorise: FP8 dispatch runs them over every row that
// crosses the all-to-all. Checked against the textbook definitions over
// every code and a sweep of fp32 bit patterns (tests/core/dtype_test.cc).
namespace {

inline float DecodeE4M3(uint8_t bits) {
  // E4M3FN: bias 7, no infinities, 0x7f/0xff are NaN.
  const uint32_t sign = static_cast<uint32_t>(bits & 0x80) << 24;
  const uint32_t em = bits & 0x7f;  // exponent and mantissa
  // Normal: rebias 7 -> 127 and move the 3 mantissa bits to the top of
  // fp32's; subnormal (exponent 0): man/8 * 2^-6, exact in fp32.
  const uint32_t normal = (em + (120u << 3)) << 20;
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(static_cast<float>(em) * (1.0f / 512.0f));
  // Selected by masks, not ?: (which GCC keeps as branches here).
  const uint32_t is_sub = 0u - static_cast<uint32_t>(em < 8);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(em == 0x7f);
  const uint32_t finite = (subnormal & is_sub) | (normal & ~is_sub);
  return std::bit_cast<float>(sign | (0x7fc00000u & is_nan) |
                              (finite & ~is_nan));
}

inline uint8_t EncodeE4M3(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (u >> 24) & 0x80;
  const uint32_t a = u & 0x7fffffffu;
  // Normal: keep 3 mantissa bits, rounded to nearest even (a carry moves to
  // the next binade, which the encoding absorbs), rebias 127 -> 7. Anything
  // from 464 on (the tie between 448 and 480, which is not a number in
  // E4M3FN) rounds past 0x7e: saturate to +-448, as from infinity.
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t biased = (r >> 20) - (120u << 3);
  const uint32_t normal = biased < 0x7eu ? biased : 0x7eu;
  // Below 2^-6: a count of 2^-9. Adding 2^14 (whose ulp is 2^-9) rounds it
  // to nearest even in the FPU; 8 is correctly the smallest normal, 0x08.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 16384.0f) - 0x46800000u;
  const uint32_t is_sub = 0u - static_cast<uint32_t>(a < 0x3c800000u);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(a > 0x7f800000u);
  const uint32_t code = (subnormal & is_sub) | (normal & ~is_sub);
  return static_cast<uint8_t>((0x7fu & is_nan) | ((sign | code) & ~is_nan));
}

}  // namespace

float F8E4M3ToF32(uint8_t bits) { return DecodeE4M3(bits); }

uint8_t F32ToF8E4M3(float value) { return EncodeE4M3(value); }

// bf16 rows: every bf16 answer, step row and packed combine goes through
// these (the baseline build narrows one value at a time: SSE2 has no
// unsigned 32 -> 16 pack).
namespace {

MOE_VECTOR_CLONES
void NarrowToBf16(const float* src, size_t count, uint16_t* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = F32ToBf16(src[i]);
}

MOE_VECTOR_CLONES
void WidenFromBf16(const uint16_t* src, size_t count, float* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = Bf16ToF32(src[i]);
}

}  // namespace

MOE_VECTOR_CLONES
void QuantizeF8E4M3(const float* src, size_t count, float scale, uint8_t* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = EncodeE4M3(src[i] / scale);
}

MOE_VECTOR_CLONES
void DequantizeF8E4M3(const uint8_t* src, size_t count, float scale,
                      float* dst) {
  for (size_t i = 0; i < count; ++i) dst[i] = DecodeE4M3(src[i]) * scale;
}

float F8E5M2ToF32(uint8_t bits) {
  // E5M2 is the top byte of an IEEE half.
  return F16ToF32(static_cast<uint16_t>(bits) << 8);
}

float E8M0ToF32(uint8_t bits) {
  if (bits == 255) return std::numeric_limits<float>::quiet_NaN();
  // 2^-127 is below fp32's normal range: ldexp gives the subnormal exactly.
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

bool ConvertToF32(DType src_dtype, const void* src, size_t count, float* dst) {
  switch (src_dtype) {
    case DType::kF32:
      // memcpy wants non-null pointers even for 0 bytes; empty tensors
      // have none.
      if (count > 0) std::memcpy(dst, src, count * sizeof(float));
      return true;
    case DType::kBF16:
      WidenFromBf16(static_cast<const uint16_t*>(src), count, dst);
      return true;
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
      for (size_t i = 0; i < count; ++i) dst[i] = DecodeE4M3(s[i]);
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
      // memcpy wants non-null pointers even for 0 bytes; empty tensors
      // have none.
      if (count > 0) std::memcpy(dst, src, count * sizeof(float));
      return true;
    case DType::kBF16:
      NarrowToBf16(src, count, static_cast<uint16_t*>(dst));
      return true;
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
