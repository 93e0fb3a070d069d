// The FP8 rules the CUDA kernels apply (kernels/fp8_rule.h), on the host:
// the E4M3 encoding is bit for bit core/dtype.h's (which quantises the CPU
// weights), the scale rule, and the cuBLASLt scale layouts (sizes, padding,
// segment tables that never overlap and start on 16 bytes).
#include "kernels/fp8_rule.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

float FromBits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

TEST(Fp8Rule, DecodesEveryCodeAsCoreDoes) {
  for (int c = 0; c < 256; ++c) {
    const float want = F8E4M3ToF32(static_cast<uint8_t>(c));
    const float got = E4M3ToF32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(got, want) << c;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << c;
    }
  }
}

TEST(Fp8Rule, EncodesLikeCoreAtEveryCodeAndEveryTie) {
  // Each finite code's value, the midpoints between neighbours (the ties,
  // where round-to-even decides) and one fp32 step either side of them.
  std::vector<float> values;
  for (int c = 0; c < 0x7f; ++c) {
    const float a = F8E4M3ToF32(static_cast<uint8_t>(c));
    const float b = F8E4M3ToF32(static_cast<uint8_t>(c + 1));
    const float mid = (c + 1 < 0x7f) ? (a + b) / 2 : 464.0f;
    for (float v :
         {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  for (float v : values) {
    EXPECT_EQ(E4M3FromF32(v), F32ToF8E4M3(v)) << v;
  }
}

TEST(Fp8Rule, EncodesLikeCoreAcrossTheFloatRange) {
  // Every 4099th bit pattern: normals, subnormals, both signs, inf, NaN.
  int checked = 0;
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) {
    const float v = FromBits(static_cast<uint32_t>(b));
    ASSERT_EQ(E4M3FromF32(v), F32ToF8E4M3(v)) << v << " bits " << b;
    ++checked;
  }
  EXPECT_GT(checked, 1000000);
  EXPECT_EQ(E4M3FromF32(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(E4M3FromF32(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(E4M3FromF32(std::nanf("")), 0x7f);
  EXPECT_EQ(E4M3FromF32(-0.0f), 0x80);
}

TEST(Fp8Rule, ScaleIsAmaxOver448AndOneForZeroBlocks) {
  EXPECT_EQ(Fp8BlockScale(0.0f), 1.0f);
  EXPECT_EQ(Fp8BlockScale(448.0f), 1.0f);
  EXPECT_EQ(Fp8BlockScale(2.0f), 2.0f / 448.0f);
  // A block of subnormals: amax / 448 would underflow to 0 (and v / 0 to
  // NaN); the scale stops at the smallest normal float, as core/fp8_rows.
  const float tiny = 1e-44f;
  EXPECT_EQ(Fp8BlockScale(tiny), 1.17549435e-38f);
  EXPECT_EQ(E4M3FromF32(tiny / Fp8BlockScale(tiny)), 0);
  // The block's largest value encodes as the largest code.
  const float amax = 3.7f, s = Fp8BlockScale(amax);
  EXPECT_EQ(E4M3FromF32(amax / s), 0x7e);
  EXPECT_EQ(E4M3FromF32(-amax / s), 0xfe);
}

TEST(Fp8Rule, WeightScaleRowsArePaddedToFourFloats) {
  EXPECT_EQ(Fp8Blocks(1), 1);
  EXPECT_EQ(Fp8Blocks(128), 1);
  EXPECT_EQ(Fp8Blocks(129), 2);
  EXPECT_EQ(Fp8WeightScaleLd(7168), 56);  // DeepSeek-V3 H: 56 blocks
  EXPECT_EQ(Fp8WeightScaleLd(2048), 16);
  EXPECT_EQ(Fp8WeightScaleLd(1408), 12);  // 11 blocks, padded
  EXPECT_EQ(Fp8WeightScaleLd(64), 4);
  // NVIDIA's LtBlk128x128Fp8Matmul sample: roundoff(ceil(inner / 128), 4) x
  // ceil(outer / 128) floats for a [outer, inner] weight.
  EXPECT_EQ(Fp8WeightScaleFloats(4096, 7168), 32 * 56);
  EXPECT_EQ(Fp8WeightScaleFloats(7168, 1408), 56 * 12);
  EXPECT_EQ(Fp8WeightScaleFloats(2 * 128, 64), 2 * 4);
}

TEST(Fp8Rule, ActivationScaleTablesAreAlignedAndDisjoint) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t cols = 1 + rng() % 3000;
    const int64_t segments = 1 + rng() % 40;
    std::vector<int64_t> rows(segments);
    int64_t total = 0;
    for (auto& r : rows) {
      r = rng() % 4 == 0 ? 0 : rng() % 50;  // some experts without rows
      total += r;
    }
    std::vector<char> used(Fp8ActScaleFloats(total, segments, cols), 0);
    int64_t begin = 0;
    for (int64_t g = 0; g < segments; ++g) {
      const int64_t base = Fp8SegmentScaleBase(begin, g, cols);
      EXPECT_EQ(base % kFp8ScaleAlign, 0);
      // The matmul reads the padded rows too: their scales must not be
      // another segment's.
      for (int64_t r = 0; r < Fp8MatmulRows(rows[g]); ++r) {
        for (int64_t kb = 0; kb < Fp8Blocks(cols); ++kb) {
          const int64_t i = Fp8ActScaleIndex(base, rows[g], r, kb);
          ASSERT_LT(i, static_cast<int64_t>(used.size()));
          ASSERT_EQ(used[i], 0) << "scale " << i << " written twice";
          used[i] = 1;
        }
      }
      begin += rows[g];
    }
  }
}

TEST(Fp8Rule, ActivationScalesOfOneSegmentAreOuterDimMajor) {
  // One matmul of m rows: row r, block kb at kb * m4 + r, m4 = m rounded up
  // to a multiple of 4 (the rows the matmul runs; PyTorch's check for
  // BlockWise1x128: shape (m4, blocks), strides (1, m4)).
  EXPECT_EQ(Fp8SegmentScaleBase(0, 0, 300), 0);
  EXPECT_EQ(Fp8ActScaleIndex(0, 8, 0, 0), 0);
  EXPECT_EQ(Fp8ActScaleIndex(0, 8, 7, 0), 7);
  EXPECT_EQ(Fp8ActScaleIndex(0, 8, 0, 1), 8);
  EXPECT_EQ(Fp8ActScaleIndex(0, 8, 2, 2), 18);
  EXPECT_EQ(Fp8ActScaleIndex(0, 5, 4, 0), 4);
  EXPECT_EQ(Fp8ActScaleIndex(0, 5, 0, 1), 8);
  EXPECT_EQ(Fp8ActScaleIndex(0, 5, 2, 2), 18);
}

TEST(Fp8Rule, MatmulRowsAreWholeQuanta) {
  EXPECT_EQ(Fp8MatmulRows(0), 0);
  EXPECT_EQ(Fp8MatmulRows(1), 4);
  EXPECT_EQ(Fp8MatmulRows(4), 4);
  EXPECT_EQ(Fp8MatmulRows(5), 8);
  EXPECT_EQ(Fp8MatmulRows(130), 132);
}

}  // namespace
}  // namespace moe::kernels
