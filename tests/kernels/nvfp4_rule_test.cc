// The NVFP4 rule (kernels/nvfp4_rule.h): ModelOpt's quantiser, and the
// dequantised value of packed code pairs.
#include "kernels/nvfp4_rule.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

TEST(Nvfp4Rule, GlobalScaleMapsTheTensorMaxToE4M3TimesE2M1Max) {
  EXPECT_EQ(Nvfp4GlobalScale(0.0f), 1.0f);
  EXPECT_FLOAT_EQ(Nvfp4GlobalScale(6.0f * 448.0f), 1.0f);
  EXPECT_FLOAT_EQ(Nvfp4GlobalScale(1.0f), 1.0f / 2688.0f);
}

// Values that are E2M1 codes times one E4M3 scale times the global come
// back exactly.
TEST(Nvfp4Rule, RepresentableBlocksRoundTripExactly) {
  const float global = 0.125f;
  // Block amax 6 * 2 * global: scale byte E4M3(2) exactly.
  const float v[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                       -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f, 6.0f};
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = v[i] * 2.0f * global;
  uint8_t codes[16];
  const uint8_t s = Nvfp4QuantizeBlock(x.data(), 16, global, codes);
  EXPECT_EQ(E4M3ToF32(s), 2.0f);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(E2M1ToF32(codes[i]) * E4M3ToF32(s) * global, x[i]) << i;
  }
}

TEST(Nvfp4Rule, RoundsToNearestEvenCode) {
  // Scale byte of amax 6: E4M3(1) = 1 under global 1.
  const float x[4] = {6.0f, 2.5f, 0.25f, -5.0f};
  uint8_t codes[4];
  const uint8_t s = Nvfp4QuantizeBlock(x, 4, 1.0f, codes);
  EXPECT_EQ(E4M3ToF32(s), 1.0f);
  EXPECT_EQ(E2M1ToF32(codes[0]), 6.0f);
  EXPECT_EQ(E2M1ToF32(codes[1]), 2.0f);   // tie 2 / 3: the even code
  EXPECT_EQ(E2M1ToF32(codes[2]), 0.0f);   // tie 0 / 0.5
  EXPECT_EQ(E2M1ToF32(codes[3]), -4.0f);  // tie 4 / 6
}

TEST(Nvfp4Rule, ZeroBlockAndUnderflowingScaleGiveZeroCodes) {
  const float zeros[3] = {0.0f, 0.0f, 0.0f};
  uint8_t codes[3] = {9, 9, 9};
  EXPECT_EQ(E4M3ToF32(Nvfp4QuantizeBlock(zeros, 3, 1.0f, codes)), 0.0f);
  for (uint8_t c : codes) EXPECT_EQ(E2M1ToF32(c), 0.0f);
  // A block far below the global: its scale rounds to E4M3 0.
  const float tiny[2] = {1e-9f, -1e-9f};
  EXPECT_EQ(E4M3ToF32(Nvfp4QuantizeBlock(tiny, 2, 1.0f, codes)), 0.0f);
  EXPECT_EQ(E2M1ToF32(codes[0]), 0.0f);
  EXPECT_EQ(E2M1ToF32(codes[1]), 0.0f);
}

TEST(Nvfp4Rule, ValueReadsLowNibbleFirstAndOneScalePer16) {
  // Elements 0..33: pairs (2j low, 2j+1 high); scales 1 and 2 and 4.
  std::vector<uint8_t> pairs(17, 0);
  pairs[0] = 0x72;   // element 0: code 2 (1.0), element 1: code 7 (6.0)
  pairs[8] = 0x0b;   // element 16: code 0xb (-1.5)
  pairs[16] = 0x10;  // element 33: code 1 (0.5)
  const uint8_t scales[3] = {E4M3FromF32(1.0f), E4M3FromF32(2.0f),
                             E4M3FromF32(4.0f)};
  EXPECT_EQ(Nvfp4Value(pairs.data(), scales, 0.5f, 0), 0.5f);
  EXPECT_EQ(Nvfp4Value(pairs.data(), scales, 0.5f, 1), 3.0f);
  EXPECT_EQ(Nvfp4Value(pairs.data(), scales, 0.5f, 16), -1.5f);
  EXPECT_EQ(Nvfp4Value(pairs.data(), scales, 0.5f, 33), 1.0f);
  EXPECT_TRUE(IsE4M3NaN(0x7f));
  EXPECT_TRUE(IsE4M3NaN(0xff));
  EXPECT_FALSE(IsE4M3NaN(0x7e));
}

}  // namespace
}  // namespace moe::kernels
