// core/finite_check against the one-value definitions of core/dtype, and
// core/dtype's whole-buffer bf16 conversions (branch-free, so that they
// vectorise) against the textbook definition of bf16 rounding.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/finite_check.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(FiniteCheck, FindsTheFirstBadRowAndColumnInEveryDtype) {
  const int64_t rows = 5, cols = 37;  // odd: exercises the loop tails
  for (const float bad : {kInf, -kInf, kNaN}) {
    for (int64_t r = 0; r < rows; ++r) {
      for (const int64_t c : {int64_t{0}, int64_t{17}, cols - 1}) {
        std::vector<float> v(rows * cols, 1.5f);
        v[r * cols + c] = bad;
        EXPECT_EQ(FirstNonFiniteRow(v.data(), rows, cols), r);
        std::vector<uint16_t> b(v.size()), h(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
          b[i] = F32ToBf16(v[i]);
          h[i] = F32ToF16(v[i]);
        }
        EXPECT_EQ(FirstNonFiniteRow(DType::kBF16, b.data(), rows, cols), r);
        EXPECT_EQ(FirstNonFiniteRow(DType::kF16, h.data(), rows, cols), r);
        EXPECT_EQ(FirstNonFiniteInRow(DType::kF32, v.data() + r * cols, cols),
                  c);
        EXPECT_EQ(FirstNonFiniteInRow(DType::kBF16, b.data() + r * cols, cols),
                  c);
      }
    }
  }
}

TEST(FiniteCheck, LargestFiniteValuesAreFinite) {
  const float big = std::numeric_limits<float>::max();
  std::vector<float> v = {big, -big, std::numeric_limits<float>::denorm_min(),
                          0.0f, -0.0f};
  EXPECT_EQ(FirstNonFiniteRow(v.data(), 1, static_cast<int64_t>(v.size())), -1);
  const uint16_t half_max = 0x7BFF, bf16_max = 0x7F7F;
  EXPECT_EQ(FirstNonFiniteRow(DType::kF16, &half_max, 1, 1), -1);
  EXPECT_EQ(FirstNonFiniteRow(DType::kBF16, &bf16_max, 1, 1), -1);
  EXPECT_EQ(FirstNonFiniteRow(DType::kF32, v.data(), 0, 5), -1);  // no rows
}

// Round to nearest even; a NaN keeps its top bits and gets the quiet bit.
uint16_t ReferenceBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

TEST(Bf16Conversion, BulkNarrowingMatchesTheDefinitionAndWidensBack) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          1.00390625f,  // a tie: rounds to even
                          1.01171875f,  // a tie: rounds up to even
                          std::numeric_limits<float>::max(),  // to infinity
                          std::numeric_limits<float>::denorm_min(),
                          kInf,
                          -kInf,
                          kNaN};
  std::mt19937 gen(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = gen();
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);  // every bit pattern class, signalling NaNs included
  }
  std::vector<uint16_t> bits(v.size());
  ASSERT_TRUE(ConvertFromF32(DType::kBF16, v.data(), v.size(), bits.data()));
  std::vector<float> wide(v.size());
  ASSERT_TRUE(
      ConvertToF32(DType::kBF16, bits.data(), bits.size(), wide.data()));
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(bits[i], ReferenceBf16(v[i])) << "value " << i << " = " << v[i];
    ASSERT_EQ(bits[i], F32ToBf16(v[i])) << "value " << i;
    uint32_t b;
    std::memcpy(&b, &wide[i], 4);
    ASSERT_EQ(b, static_cast<uint32_t>(bits[i]) << 16) << "value " << i;
  }
}

}  // namespace
}  // namespace moe
