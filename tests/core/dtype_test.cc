#include "core/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI64,
                  DType::kF8E4M3, DType::kBool}) {
    EXPECT_EQ(ParseDTypeName(DTypeName(d)), d);
  }
  EXPECT_FALSE(ParseDTypeName("F128").has_value());
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3f80);
  // Just above halfway rounds up.
  EXPECT_EQ(F32ToBf16(std::nextafter(1.00390625f, 2.0f)), 0x3f81);
  // Halfway above an odd mantissa rounds up to even.
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3f82);
  EXPECT_EQ(Bf16ToF32(0xc040), -3.0f);
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
}

// The row converters (vector builds, picked at load) give each value's
// scalar answer: every 2^32 / 4099th bit pattern (all exponents, NaNs,
// infinities, ties), at odd lengths and offsets.
TEST(DType, Bf16RowsMatchTheScalarConversion) {
  std::vector<float> f;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    f.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  }
  f.push_back(1.00390625f);
  f.push_back(-std::numeric_limits<float>::infinity());
  for (size_t offset : {size_t{0}, size_t{3}}) {
    const size_t n = f.size() - offset;
    std::vector<uint16_t> b(n);
    ASSERT_TRUE(ConvertFromF32(DType::kBF16, f.data() + offset, n, b.data()));
    std::vector<float> back(n);
    ASSERT_TRUE(ConvertToF32(DType::kBF16, b.data(), n, back.data()));
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i], F32ToBf16(f[offset + i])) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]),
                std::bit_cast<uint32_t>(Bf16ToF32(b[i])))
          << i;
    }
  }
}

TEST(DType, F16Conversions) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);               // below the tie
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);               // tie: to infinity
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -26)), 0x0000);  // below half the min
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp: up
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: even
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie: even
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(F16ToF32(0xfc00)) && F16ToF32(0xfc00) < 0);
  // Every half value survives the round trip through fp32.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(DType, Fp8E4M3) {
  EXPECT_EQ(F8E4M3ToF32(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);  // largest finite
  EXPECT_EQ(F8E4M3ToF32(0xb8), -1.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(F8E4M3ToF32(0x7f)));
  EXPECT_EQ(F8E5M2ToF32(0x3c), 1.0f);
}

TEST(DType, Fp8E4M3RoundTripsEveryCodeAndRoundsToNearestEven) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(F32ToF8E4M3(F8E4M3ToF32(static_cast<uint8_t>(b))), b) << b;
  }
  // Midpoints between neighbours go to the even code; just above, up.
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = F8E4M3ToF32(static_cast<uint8_t>(b));
    const float hi = F8E4M3ToF32(static_cast<uint8_t>(b + 1));
    const float mid = (lo + hi) / 2;  // exact in fp32
    EXPECT_EQ(F32ToF8E4M3(mid), (b & 1) ? b + 1 : b) << b;
    EXPECT_EQ(F32ToF8E4M3(std::nextafter(mid, 1000.0f)), b + 1) << b;
    EXPECT_EQ(F32ToF8E4M3(-std::nextafter(mid, 0.0f)), 0x80 | b) << b;
  }
  EXPECT_EQ(F32ToF8E4M3(463.9f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(1e6f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-1e6f), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(std::nanf("")), 0x7f);
}

// The textbook e4m3 definitions (frexp, nearbyint, ldexp), against which
// core/dtype's branch-free ones are checked.
float TextbookE4M3ToF32(uint8_t bits) {
  const int exp = (bits >> 3) & 0xf, man = bits & 7;
  float v;
  if (exp == 0xf && man == 7) {
    v = std::nanf("");
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);
  } else {
    v = std::ldexp(1.0f + man / 8.0f, exp - 7);
  }
  return (bits & 0x80) ? -v : v;
}

uint8_t TextbookF32ToE4M3(float value) {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  const float a = std::fabs(value);
  if (a >= 464.0f) return sign | 0x7e;  // saturate (no infinity)
  if (a < std::ldexp(1.0f, -6)) {
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int e;
  const float m = std::frexp(a, &e);
  const int q = static_cast<int>(std::nearbyint(std::ldexp(m, 4))) - 8;
  return sign | static_cast<uint8_t>(((e - 1 + 7) << 3) + q);
}

// Encodes `x` one at a time and in bulk and checks both against the
// textbook.
void ExpectTextbookCodes(const std::vector<float>& x) {
  std::vector<uint8_t> codes(x.size());
  QuantizeF8E4M3(x.data(), x.size(), 1.0f, codes.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t want = TextbookF32ToE4M3(x[i]);
    ASSERT_EQ(F32ToF8E4M3(x[i]), want) << std::bit_cast<uint32_t>(x[i]);
    ASSERT_EQ(codes[i], want) << std::bit_cast<uint32_t>(x[i]);
  }
}

// Every code decodes as the textbook says (NaN bits included), one at a
// time and in bulk; encoding agrees on a sweep of fp32 bit patterns (every
// 251st) and on every pattern around the subnormal edge (2^-6 +- 2^-12)
// and the saturation range [440, 488], with both signs. The whole 2^32 was
// checked once when these were made branch-free.
TEST(DType, Fp8E4M3MatchesTheTextbookDefinition) {
  std::vector<uint8_t> codes(256);
  std::vector<float> values(256);
  for (int b = 0; b < 256; ++b) codes[b] = static_cast<uint8_t>(b);
  DequantizeF8E4M3(codes.data(), 256, 1.0f, values.data());
  for (int b = 0; b < 256; ++b) {
    const uint32_t want = std::bit_cast<uint32_t>(TextbookE4M3ToF32(b));
    ASSERT_EQ(std::bit_cast<uint32_t>(F8E4M3ToF32(b)), want) << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(values[b]), want) << b;
  }
  std::vector<float> x;
  constexpr uint64_t kStride = 251, kChunk = uint64_t{1} << 20;
  for (uint64_t base = 0; base < (uint64_t{1} << 32);
       base += kStride * kChunk) {
    x.clear();
    for (uint64_t u = base;
         u < std::min(base + kStride * kChunk, uint64_t{1} << 32);
         u += kStride) {
      x.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
    }
    ExpectTextbookCodes(x);
  }
  auto every = [&](float lo, float hi) {
    x.clear();
    for (uint32_t u = std::bit_cast<uint32_t>(lo);
         u <= std::bit_cast<uint32_t>(hi); ++u) {
      x.push_back(std::bit_cast<float>(u));
      x.push_back(-std::bit_cast<float>(u));
    }
    ExpectTextbookCodes(x);
  };
  every(std::ldexp(1.0f, -6) - std::ldexp(1.0f, -12),
        std::ldexp(1.0f, -6) + std::ldexp(1.0f, -12));
  every(440.0f, 488.0f);
}

TEST(DType, ConvertRejectsIntegers) {
  int64_t v = 3;
  float out;
  EXPECT_FALSE(ConvertToF32(DType::kI64, &v, 1, &out));
  EXPECT_FALSE(ConvertFromF32(DType::kI32, &out, 1, &v));
}

// Empty tensors (N = 0) carry no buffer at all: converting them must not
// touch the null pointers (the fuzzer found memcpy(nullptr, nullptr, 0)).
TEST(DType, ConvertsEmptyTensorsWithoutBuffers) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    EXPECT_TRUE(ConvertToF32(t, nullptr, 0, nullptr));
    EXPECT_TRUE(ConvertFromF32(t, nullptr, 0, nullptr));
  }
}

}  // namespace
}  // namespace moe
