// The MXFP4 rules (kernels/mxfp4_rule.h) against their scalar definitions,
// written here independently: E2M1 as sign, 2-bit exponent (bias 1) and one
// mantissa bit; E8M0 as a power of two; the quantiser as "the nearest E2M1
// value, ties to the even code, of v / 2^(floor(log2 amax) - 2)", searched
// by brute force over the 8 magnitudes.
#include "kernels/mxfp4_rule.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

// E2M1 from its fields: exponent field 0 is subnormal (m * 0.5).
float E2M1Definition(int code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const float mag = e == 0 ? 0.5f * m : std::ldexp(1.0f + 0.5f * m, e - 1);
  return code & 8 ? -mag : mag;
}

// The code nearest to y; at a tie the code with even magnitude index;
// beyond 6, 6.
uint8_t NearestCode(float y) {
  const double a = std::fabs(static_cast<double>(y));
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int m = 0; m < 8; ++m) {
    const double d = std::fabs(a - E2M1Definition(m));
    if (d < best_d || (d == best_d && m % 2 == 0)) {
      best = m;
      best_d = d;
    }
  }
  return static_cast<uint8_t>((std::signbit(y) ? 8 : 0) | best);
}

TEST(Mxfp4Rule, DecodesEveryCode) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(E2M1ToF32(static_cast<uint8_t>(c)), E2M1Definition(c)) << c;
    EXPECT_EQ(std::signbit(E2M1ToF32(static_cast<uint8_t>(c))), c >= 8) << c;
    // Only the low nibble counts.
    EXPECT_EQ(E2M1ToF32(static_cast<uint8_t>(c | 0xf0)), E2M1Definition(c));
  }
}

TEST(Mxfp4Rule, DecodesEveryScale) {
  for (int s = 0; s < 255; ++s) {
    const float got = E8M0ToF32(static_cast<uint8_t>(s));
    EXPECT_EQ(got, std::ldexp(1.0f, s - 127)) << s;
    EXPECT_GT(got, 0.0f) << s;
  }
  EXPECT_TRUE(std::isnan(E8M0ToF32(255)));
}

TEST(Mxfp4Rule, EncodesEveryCodeEveryTieAndItsNeighbours) {
  for (int c = 0; c < 16; ++c) {
    const float v = E2M1Definition(c);
    EXPECT_EQ(E2M1FromF32(v), c) << c;
  }
  const float mags[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 12};
  for (int i = 0; i + 1 < 9; ++i) {
    const float mid = 0.5f * (mags[i] + mags[i + 1]);
    for (float y : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 99.0f),
                    mags[i], std::nextafter(mags[i], 99.0f)}) {
      for (float sign : {1.0f, -1.0f}) {
        EXPECT_EQ(E2M1FromF32(sign * y), NearestCode(sign * y)) << sign * y;
      }
    }
  }
  // Saturation.
  EXPECT_EQ(E2M1FromF32(1e30f), 7);
  EXPECT_EQ(E2M1FromF32(-std::numeric_limits<float>::infinity()), 15);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  for (int i = 0; i < 100000; ++i) {
    const float y = u(rng);
    ASSERT_EQ(E2M1FromF32(y), NearestCode(y)) << y;
  }
}

// The block quantiser against the definition, at every scale byte the rule
// can give: blocks whose amax is 4, 6 and 7.99 times 2^e for each e, with
// random values below it.
TEST(Mxfp4Rule, QuantisesBlocksAtEveryScale) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int e = -127; e <= 125; ++e) {
    for (float top : {4.0f, 6.0f, 7.99f, 5.0f}) {
      std::vector<float> v(32);
      for (float& x : v) x = std::ldexp(u(rng) * 3.9f, e);
      v[rng() % 32] = std::ldexp(rng() % 2 ? top : -top, e);
      uint8_t codes[32];
      const uint8_t s = Mxfp4QuantizeBlock(v.data(), 32, codes);
      // floor(log2(amax)) - 2 = e, except below E8M0's range.
      ASSERT_EQ(s, e + 127) << "e=" << e << " top=" << top;
      const double scale = std::ldexp(1.0, e);
      for (int i = 0; i < 32; ++i) {
        const float y = static_cast<float>(v[i] / scale);
        ASSERT_EQ(codes[i], NearestCode(y))
            << "e=" << e << " v=" << v[i] << " y=" << y;
      }
    }
  }
}

TEST(Mxfp4Rule, EdgeBlocks) {
  uint8_t codes[32];
  // All zero: scale 1, codes 0.
  std::vector<float> zero(32, 0.0f);
  EXPECT_EQ(Mxfp4QuantizeBlock(zero.data(), 32, codes), 127);
  for (uint8_t c : codes) EXPECT_EQ(c & 7, 0);
  // Largest finite amax: exponent 127 - 2.
  std::vector<float> big(32, 1.0f);
  big[7] = -std::numeric_limits<float>::max();
  EXPECT_EQ(Mxfp4QuantizeBlock(big.data(), 32, codes), 127 + 125);
  EXPECT_EQ(codes[7], 15);  // -6 * 2^125 ~ -FLT_MAX (rounded down to 6)
  EXPECT_EQ(codes[0], 0);
  // Tiny amax: the exponent clamps at -127 and values round against 2^-127.
  std::vector<float> tiny(32, 0.0f);
  tiny[0] = std::numeric_limits<float>::denorm_min();
  tiny[1] = std::ldexp(1.0f, -127);
  tiny[2] = std::ldexp(-3.0f, -128);  // 1.5 * 2^-127
  tiny[3] = std::ldexp(1.0f, -120);   // amax: e = -120 - 2
  EXPECT_EQ(Mxfp4QuantizeBlock(tiny.data(), 3, codes), 0);
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 2);   // 1.0
  EXPECT_EQ(codes[2], 11);  // -1.5
  EXPECT_EQ(Mxfp4QuantizeBlock(tiny.data(), 4, codes), 127 - 122);
  EXPECT_EQ(codes[3], 6);  // 4
  // A short block (a row's last): the codes of its values alone.
  const float few[3] = {0.3f, -0.1f, 0.05f};
  EXPECT_EQ(Mxfp4QuantizeBlock(few, 3, codes),
            127 - 2 - 2);  // 0.3 in [1/4, 1/2)
  EXPECT_EQ(codes[0], NearestCode(0.3f * 16));
  EXPECT_EQ(codes[1], NearestCode(-0.1f * 16));
  EXPECT_EQ(codes[2], NearestCode(0.05f * 16));
}

TEST(Mxfp4Rule, ValueOfPackedPairs) {
  // Element 2j in the low nibble, 2j + 1 in the high one.
  std::vector<uint8_t> pairs(32), scales = {126, 130};
  for (int j = 0; j < 32; ++j) pairs[j] = static_cast<uint8_t>(j * 7 + 3);
  for (int j = 0; j < 64; ++j) {
    const int code = j % 2 ? pairs[j / 2] >> 4 : pairs[j / 2] & 15;
    EXPECT_EQ(Mxfp4Value(pairs.data(), scales.data(), j),
              E2M1Definition(code) * std::ldexp(1.0f, scales[j / 32] - 127));
  }
}

}  // namespace
}  // namespace moe::kernels
