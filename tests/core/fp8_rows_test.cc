#include "core/fp8_rows.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

struct Packed {
  std::vector<uint8_t> bytes;
  int64_t hidden = 0;
  uint8_t code(int64_t row, int64_t c) const {
    return bytes[row * Fp8RowBytes(hidden) + c];
  }
  float scale(int64_t row, int64_t group) const {
    float s;
    std::memcpy(&s, &bytes[row * Fp8RowBytes(hidden) + hidden + 4 * group], 4);
    return s;
  }
};

Packed Quantize(const std::vector<float>& rows, int64_t n, int64_t H) {
  Packed p;
  p.hidden = H;
  p.bytes.assign(n * Fp8RowBytes(H), 0xAB);
  QuantizeFp8Rows(rows.data(), n, H, p.bytes.data());
  return p;
}

std::vector<float> Dequantize(const Packed& p, int64_t n) {
  std::vector<float> out(n * p.hidden, -1.0f);
  DequantizeFp8Rows(p.bytes.data(), n, p.hidden, out.data());
  return out;
}

TEST(Fp8Rows, SizesFollowTheGroupsOf128) {
  EXPECT_EQ(Fp8RowGroups(1), 1);
  EXPECT_EQ(Fp8RowBytes(1), 5);
  EXPECT_EQ(Fp8RowGroups(128), 1);
  EXPECT_EQ(Fp8RowBytes(128), 132);
  EXPECT_EQ(Fp8RowGroups(129), 2);
  EXPECT_EQ(Fp8RowBytes(7168), 7168 + 4 * 56);  // DeepSeek-V3's hidden size
}

// Every group's scale is its amax / 448, every code is e4m3(value / scale)
// rounded to nearest even (the converter core/dtype checks against the
// textbook), and the values come back as code * scale: for H = 1, 37 (one
// narrow group), 128, 200 (a full and a narrow group) and 300, with rows
// of different magnitudes.
TEST(Fp8Rows, CodesAndScalesAreExact) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t H : {1, 37, 128, 200, 300}) {
    SCOPED_TRACE(H);
    const int64_t n = 5;
    std::vector<float> x(n * H);
    for (int64_t r = 0; r < n; ++r) {
      const float magnitude = std::ldexp(1.0f, static_cast<int>(4 * r) - 8);
      for (int64_t c = 0; c < H; ++c) x[r * H + c] = normal(rng) * magnitude;
    }
    const Packed p = Quantize(x, n, H);
    const std::vector<float> y = Dequantize(p, n);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t g = 0; g < Fp8RowGroups(H); ++g) {
        const int64_t b = g * 128, e = std::min(H, b + 128);
        float amax = 0;
        for (int64_t c = b; c < e; ++c) {
          amax = std::max(amax, std::fabs(x[r * H + c]));
        }
        const float scale = amax / 448.0f;
        ASSERT_EQ(p.scale(r, g), scale) << r << " " << g;
        for (int64_t c = b; c < e; ++c) {
          const uint8_t code = F32ToF8E4M3(x[r * H + c] / scale);
          ASSERT_EQ(p.code(r, c), code) << r << " " << c;
          ASSERT_EQ(y[r * H + c], F8E4M3ToF32(code) * scale) << r << " " << c;
          // Within half an e4m3 step of the value (3 mantissa bits: 2^-4
          // relative), or of a subnormal step (2^-10 of the scale).
          ASSERT_LE(
              std::fabs(y[r * H + c] - x[r * H + c]),
              std::max(std::fabs(x[r * H + c]) / 16.0f, std::ldexp(scale, -10)))
              << r << " " << c;
        }
      }
    }
  }
}

// The group's largest value sits at the 448 boundary: it codes as +-448
// (0x7e / 0xfe), never as NaN (0x7f) or past the saturation, and comes back
// within one rounding of itself. Values just under an e4m3 midpoint of the
// scaled range round down, at the midpoint to even.
TEST(Fp8Rows, TheGroupMaximumCodesAs448) {
  for (float amax : {448.0f, 1.0f, 3.0e-3f, 7.5e4f, 1.0e30f}) {
    SCOPED_TRACE(amax);
    const int64_t H = 130;
    std::vector<float> x(2 * H, 0.0f);
    for (int64_t c = 0; c < H; ++c) {
      x[c] = amax * static_cast<float>(c) / H;
      x[H + c] = -x[c];
    }
    x[64] = amax;        // first group's max
    x[H + 129] = -amax;  // second (narrow) group's max, negative
    x[128] = amax / 4;
    x[129] = amax / 2;
    x[H + 64] = -amax;
    const Packed p = Quantize(x, 2, H);
    EXPECT_EQ(p.code(0, 64), 0x7e);
    EXPECT_EQ(p.code(1, 129), 0xfe);
    EXPECT_EQ(p.code(1, 64), 0xfe);
    EXPECT_EQ(p.scale(0, 1), (amax / 2) / 448.0f);
    EXPECT_EQ(p.code(0, 129), 0x7e);
    const std::vector<float> y = Dequantize(p, 2);
    EXPECT_NEAR(y[64], amax, amax * 1e-6);
    EXPECT_NEAR(y[H + 129], -amax, amax * 1e-6);
    for (size_t i = 0; i < p.bytes.size(); ++i) {
      const size_t in_row = i % Fp8RowBytes(H);
      if (in_row < static_cast<size_t>(H)) {
        ASSERT_NE(p.bytes[i] & 0x7f, 0x7f) << i;  // no NaN code
      }
    }
  }
}

// Values small against their group's amax are e4m3 subnormals: multiples
// of 2^-9 * scale, rounded to nearest even (1.5 and 2.5 steps go to 2).
TEST(Fp8Rows, SmallValuesAreSubnormalCodes) {
  const int64_t H = 8;
  const float scale = 1.0f;  // amax 448
  std::vector<float> x = {448.0f,
                          std::ldexp(1.0f, -9),
                          std::ldexp(1.5f, -9),
                          std::ldexp(2.5f, -9),
                          std::ldexp(7.0f, -9),
                          std::ldexp(0.5f, -9),
                          std::ldexp(0.50001f, -9),
                          -std::ldexp(3.0f, -9)};
  const Packed p = Quantize(x, 1, H);
  EXPECT_EQ(p.scale(0, 0), scale);
  const uint8_t want[] = {0x7e, 0x01, 0x02, 0x02, 0x07, 0x00, 0x01, 0x83};
  for (int64_t c = 0; c < H; ++c) EXPECT_EQ(p.code(0, c), want[c]) << c;
  const std::vector<float> y = Dequantize(p, 1);
  EXPECT_EQ(y[1], std::ldexp(1.0f, -9));
  EXPECT_EQ(y[3], std::ldexp(2.0f, -9));
  EXPECT_EQ(y[7], -std::ldexp(3.0f, -9));
}

// A row of zeros (amax 0) gets scale 1 and zero codes, and comes back as
// zeros, signs kept; so does an all-zero group beside a non-zero one. Rows
// of subnormal fp32 values get the smallest normal scale: no 0/0.
TEST(Fp8Rows, ZeroAndTinyRows) {
  const int64_t H = 200;
  std::vector<float> x(3 * H, 0.0f);
  x[5] = -0.0f;
  for (int64_t c = 128; c < H; ++c) x[H + c] = static_cast<float>(c);
  for (int64_t c = 0; c < H; ++c) {
    x[2 * H + c] = std::ldexp(static_cast<float>(c % 5), -140);  // subnormal
  }
  const Packed p = Quantize(x, 3, H);
  EXPECT_EQ(p.scale(0, 0), 1.0f);
  EXPECT_EQ(p.scale(0, 1), 1.0f);
  EXPECT_EQ(p.scale(1, 0), 1.0f);
  EXPECT_EQ(p.scale(1, 1), (H - 1) / 448.0f);
  EXPECT_EQ(p.scale(2, 0), FLT_MIN);
  const std::vector<float> y = Dequantize(p, 3);
  for (int64_t c = 0; c < H; ++c) {
    EXPECT_EQ(y[c], 0.0f);
    EXPECT_FALSE(std::isnan(y[2 * H + c])) << c;
    // Coded exactly or as 0: within a subnormal step of FLT_MIN.
    EXPECT_LE(std::fabs(y[2 * H + c] - x[2 * H + c]), std::ldexp(FLT_MIN, -9))
        << c;
  }
  EXPECT_TRUE(std::signbit(y[5]));
  for (int64_t c = 0; c < 128; ++c) EXPECT_EQ(y[H + c], 0.0f);
  EXPECT_NEAR(y[H + H - 1], static_cast<float>(H - 1), 1e-4);
}

// No rows: nothing is read or written.
TEST(Fp8Rows, NoRows) {
  QuantizeFp8Rows(nullptr, 0, 64, nullptr);
  DequantizeFp8Rows(nullptr, 0, 64, nullptr);
}

}  // namespace
}  // namespace moe
