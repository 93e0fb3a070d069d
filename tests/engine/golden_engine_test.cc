// Every golden case through the single-process engine, with fp32 and bf16
// weights: routing ids exact, y within the golden tolerance.
#include <map>
#include <set>

#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"

namespace moe {
namespace {

using testing::AllClose;
using testing::GoldenCase;

// Expert choice: for each expert, the set of tokens that reached it must be
// the golden top_idx row; each token's weight the renormalised top_w.
::testing::AssertionResult SameExpertChoice(const GoldenCase& c,
                                            const Routing& r) {
  const int64_t E = c.config.num_experts, C = c.top_shape[1];
  std::map<int64_t, double> sum;  // token -> sum of raw probabilities
  for (int64_t i = 0; i < E * C; ++i) sum[c.top_idx[i]] += c.top_w[i];
  for (int64_t e = 0; e < E; ++e) {
    std::map<int64_t, double> want, got;
    for (int64_t j = 0; j < C; ++j) {
      const int64_t t = c.top_idx[e * C + j];
      want[t] = c.top_w[e * C + j] / (sum[t] + 1e-9) * c.config.route_scale;
    }
    for (int64_t t = 0; t < r.tokens; ++t) {
      for (int64_t s = 0; s < r.slots; ++s) {
        if (r.expert[t * r.slots + s] == e) got[t] = r.weight[t * r.slots + s];
      }
    }
    if (want.size() != got.size()) {
      return ::testing::AssertionFailure()
             << "expert " << e << " took " << got.size() << " tokens, want "
             << want.size();
    }
    for (const auto& [t, w] : want) {
      if (!got.count(t)) {
        return ::testing::AssertionFailure()
               << "expert " << e << " did not take token " << t;
      }
      if (std::fabs(got[t] - w) > 1e-5 + 1e-4 * std::fabs(w)) {
        return ::testing::AssertionFailure()
               << "token " << t << " expert " << e << " weight " << got[t]
               << " want " << w;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

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
    EXPECT_TRUE(SameExpertChoice(*c, routing));
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
