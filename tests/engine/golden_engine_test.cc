// Every golden case through the single-process engine, with fp32 and bf16
// weights: routing ids exact, y within the golden tolerance.
#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"

namespace moe {
namespace {

using testing::AllClose;
using testing::GoldenCase;

class GoldenEngineTest
    : public ::testing::TestWithParam<std::tuple<std::string, WeightDType>> {};

TEST_P(GoldenEngineTest, MatchesReference) {
  const auto& [path, dtype] = GetParam();
  auto c = testing::LoadGoldenCase(path);
  ASSERT_TRUE(c.ok()) << c.status();
  auto source = testing::MakeGoldenSource(*c);
  LoadOptions opts;
  opts.dtype = dtype;
  opts.num_threads = 2;
  auto w = LoadLayerWeights(*source, 0, opts);
  ASSERT_TRUE(w.ok()) << w.status();

  LocalMoe moe(2);
  std::vector<float> y(c->y.size(), -1.0f);
  Routing routing;
  ASSERT_TRUE(
      moe.Forward(**w, c->x.data(), c->tokens, {}, y.data(), &routing).ok());
  EXPECT_TRUE(AllClose(
      y, c->y,
      dtype == WeightDType::kF32 ? testing::kF32Tol : testing::kBf16Tol));
  if (c->config.routing == RoutingMode::kExpertChoice) {
    EXPECT_TRUE(testing::SameExpertChoice(*c, routing.expert, routing.weight,
                                          routing.tokens, routing.slots));
  } else {
    EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, routing.expert,
                                          routing.weight, c->tokens,
                                          c->config.top_k, routing.slots));
  }
}

std::string CaseName(
    const ::testing::TestParamInfo<std::tuple<std::string, WeightDType>>&
        info) {
  std::string stem = std::get<0>(info.param);
  stem = stem.substr(stem.find_last_of('/') + 1);
  stem = stem.substr(0, stem.find('.'));
  return stem + "_" + std::string(WeightDTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    Golden, GoldenEngineTest,
    ::testing::Combine(::testing::ValuesIn(testing::GoldenFiles()),
                       ::testing::Values(WeightDType::kF32,
                                         WeightDType::kBF16)),
    CaseName);

TEST(GoldenFiles, ArePresent) {
  EXPECT_GE(testing::GoldenFiles().size(), 10u)
      << "golden cases not found in " << testing::GoldenDir()
      << " (set MOE_GOLDEN_DIR)";
}

}  // namespace
}  // namespace moe
