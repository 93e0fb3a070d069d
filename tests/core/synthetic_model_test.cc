// The synthetic model's Zipf gate: only the gate changes, row e scaled by
// (e + 1)^-S, and the option's range is checked.
#include "core/synthetic_model.h"

#include <cmath>

#include "gtest/gtest.h"

namespace moe {
namespace {

SyntheticArgs Args(double zipf) {
  SyntheticArgs a;
  a.hidden = 16;
  a.inter = 8;
  a.experts = 6;
  a.top_k = 2;
  a.seed = 4;
  a.zipf = zipf;
  return a;
}

std::vector<float> Values(const ModelSource& m, WeightRole role, int64_t e) {
  auto t = m.Get(0, role, e);
  EXPECT_TRUE(t.ok()) << t.status();
  const float* v = reinterpret_cast<const float*>(t->data);
  return std::vector<float>(v, v + t->numel());
}

TEST(SyntheticModel, ZipfScalesOnlyTheGateRows) {
  auto even = MakeSyntheticModel(*MakeSyntheticSpec(Args(0)));
  auto skewed = MakeSyntheticModel(*MakeSyntheticSpec(Args(1.5)));
  ASSERT_TRUE(even.ok() && skewed.ok());
  const auto g0 = Values(**even, WeightRole::kGate, -1);
  const auto g1 = Values(**skewed, WeightRole::kGate, -1);
  ASSERT_EQ(g0.size(), 6u * 16);
  for (int64_t e = 0; e < 6; ++e) {
    const float scale = static_cast<float>(std::pow(e + 1.0, -1.5));
    for (int64_t h = 0; h < 16; ++h) {
      EXPECT_EQ(g1[e * 16 + h], g0[e * 16 + h] * scale) << e << " " << h;
    }
  }
  EXPECT_EQ(Values(**even, WeightRole::kW1, 3),
            Values(**skewed, WeightRole::kW1, 3));
}

TEST(SyntheticModel, ZipfOutsideItsRangeIsRefused) {
  auto s = MakeSyntheticSpec(Args(-1));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("zipf"), std::string::npos);
}

}  // namespace
}  // namespace moe
