#include "kernels/cpu/routing.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/routing_rule.h"
#include "tests/kernels/routing_edge_cases.h"

namespace moe::kernels::cpu {
namespace {

TEST(Routing, SoftmaxAndSigmoid) {
  const float logits[] = {0.0f, 1.0f, 2.0f, 1000.0f, 1000.0f, -1000.0f};
  float s[6];
  ComputeScores(kScoreSoftmax, logits, 2, 3, s, 1);
  const double d = 1 + std::exp(1.0) + std::exp(2.0);
  EXPECT_NEAR(s[0], 1 / d, 1e-7);
  EXPECT_NEAR(s[2], std::exp(2.0) / d, 1e-6);
  EXPECT_NEAR(s[3], 0.5, 1e-7);  // large logits stay finite
  EXPECT_EQ(s[5], 0.0f);
  ComputeScores(kScoreSigmoid, logits, 1, 3, s, 1);
  EXPECT_NEAR(s[1], 1 / (1 + std::exp(-1.0)), 1e-7);
}

TEST(Routing, SqrtSoftplusMatchesItsDefinition) {
  // sqrt(ln(1 + e^l)), in double, over ordinary and extreme logits; a NaN
  // logit counts as -inf (score 0).
  const std::vector<float> logits = {-3.0f, -0.5f, 0.0f,  0.25f,  2.0f,
                                     17.0f, 40.0f, 90.0f, -90.0f, NAN};
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<float> s(n);
  ComputeScores(kScoreSqrtSoftplus, logits.data(), 1, n, s.data(), 1);
  for (int64_t e = 0; e + 1 < n; ++e) {
    const double l = logits[e];
    const double want = std::sqrt(l > 30 ? l : std::log1p(std::exp(l)));
    EXPECT_NEAR(s[e], want, 2e-6 * std::max(1.0, want)) << "logit " << l;
  }
  EXPECT_EQ(s[n - 1], 0.0f);
  ComputeScores(kScoreSqrtSoftplus, logits.data(), 0, n, s.data(), 1);  // N=0
}

TEST(Routing, NormMinClampsTheDenominatorFromBelow) {
  // Token 0 sums to 0.3 < 0.45: divided by 0.45. Token 1 sums to 0.9.
  float w[] = {0.2f, 0.1f, 0.6f, 0.3f};
  NormalizeAndScale(2, 2, /*normalize=*/true, 2.0f, w, /*norm_min=*/0.45f);
  EXPECT_FLOAT_EQ(w[0], 0.2f / 0.45f * 2.0f);
  EXPECT_FLOAT_EQ(w[1], 0.1f / 0.45f * 2.0f);
  EXPECT_FLOAT_EQ(w[2], 0.6f / 0.9f * 2.0f);
  EXPECT_FLOAT_EQ(w[3], 0.3f / 0.9f * 2.0f);
  float z[] = {0.0f, 0.0f};  // no epsilon needed: the floor is > 0
  NormalizeAndScale(1, 2, true, 1.0f, z, 0.45f);
  EXPECT_EQ(z[0], 0.0f);
  EXPECT_EQ(RouteNormDenominator(0.3f, 0.0f), 0.3f + 1e-20f);
}

TEST(Routing, SoftmaxOverChosenLogitsOnly) {
  // The k chosen logits of 2 tokens (N = 0 is a no-op).
  float w[] = {3.0f, 1.0f, 0.5f, 2.0f, 2.0f, NAN};
  SoftmaxOverChosen(0, 3, w);
  SoftmaxOverChosen(2, 3, w);
  const double d0 = 1 + std::exp(-2.0) + std::exp(-2.5);
  EXPECT_NEAR(w[0], 1 / d0, 1e-7);
  EXPECT_NEAR(w[1], std::exp(-2.0) / d0, 1e-7);
  EXPECT_NEAR(w[2], std::exp(-2.5) / d0, 1e-7);
  EXPECT_NEAR(w[3], 0.5, 1e-7);  // a NaN logit weighs 0, like -inf
  EXPECT_NEAR(w[4], 0.5, 1e-7);
  EXPECT_EQ(w[5], 0.0f);
}

TEST(Routing, HashedSelectionKeepsStoredOrder) {
  const int32_t table[] = {3, 0, 1, 2, 2, 3};  // V = 3, k = 2
  const int64_t ids[] = {2, 0, 1};
  const float scores[] = {0.1f, 0.2f, 0.3f, 0.4f,   // token 0
                          0.5f, 0.6f, 0.7f, 0.8f,   // token 1
                          0.9f, 1.0f, 1.1f, 1.2f};  // token 2
  int32_t idx[6];
  float w[6];
  SelectHashed(table, ids, scores, 3, 4, 2, idx, w);
  const int32_t want_idx[] = {2, 3, 3, 0, 1, 2};
  const float want_w[] = {0.3f, 0.4f, 0.8f, 0.5f, 1.0f, 1.1f};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(idx[i], want_idx[i]) << i;
    EXPECT_EQ(w[i], want_w[i]) << i;
  }
}

// The NaN and tie rules of kernels/routing_rule.h; the CUDA kernel runs the
// same cases (tests/kernels/cuda/cuda_kernels_test.cc).
TEST(Routing, NanEdgeCasesFollowTheSharedRule) {
  for (const testing::RouteEdgeCase& rc : testing::RouteEdgeCases()) {
    SCOPED_TRACE(rc.name);
    std::vector<float> s(rc.num_experts);
    ComputeScores(rc.score_func, rc.logits.data(), 1, rc.num_experts, s.data(),
                  1);
    TopKParams p;
    p.num_experts = rc.num_experts;
    p.top_k = rc.top_k;
    p.expert_bias = rc.bias.empty() ? nullptr : rc.bias.data();
    p.n_groups = rc.n_groups;
    p.topk_groups = rc.topk_groups;
    p.group_score = rc.group_score;
    std::vector<int32_t> idx(rc.top_k);
    std::vector<float> w(rc.top_k);
    SelectTopK(p, s.data(), 1, idx.data(), w.data(), 1);
    EXPECT_EQ(idx, rc.idx);
    for (int j = 0; j < rc.top_k; ++j) {
      EXPECT_TRUE(testing::WeightMatches(w[j], rc.w[j]))
          << "slot " << j << ": " << w[j] << " vs " << rc.w[j];
    }
  }
}

TEST(Routing, RuleKeysAndOrder) {
  const float nan = std::nanf("");
  EXPECT_EQ(RouteKey(nan), -INFINITY);
  EXPECT_EQ(RouteLogit(nan), -INFINITY);
  EXPECT_EQ(RouteKey(0.25f), 0.25f);
  EXPECT_TRUE(RanksBefore(1.0f, 5, 0.5f, 0));
  EXPECT_TRUE(RanksBefore(1.0f, 2, 1.0f, 3));  // tie: lower index
  EXPECT_FALSE(RanksBefore(1.0f, 3, 1.0f, 2));
  EXPECT_TRUE(RanksBefore(-INFINITY, 0, -INFINITY, 1));
  // The fused CUDA kernel's shared memory (no opt-in above 48 KB).
  EXPECT_TRUE(RouteFitsSharedMemory(4096, 0));
  EXPECT_TRUE(RouteFitsSharedMemory(256, 8));
  EXPECT_FALSE(RouteFitsSharedMemory(4096, 4096));
  EXPECT_EQ(RouteDynamicSharedBytes(256, 8), (2 * 256 + 8) * 4 + 256 + 8);
}

TEST(Routing, TiesGoToTheLowerExpert) {
  const float scores[] = {0.2f, 0.3f, 0.3f, 0.2f};
  TopKParams p;
  p.num_experts = 4;
  p.top_k = 3;
  int32_t idx[3];
  float w[3];
  SelectTopK(p, scores, 1, idx, w, 1);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
  EXPECT_EQ(idx[2], 0);
}

TEST(Routing, BiasChoosesButDoesNotWeigh) {
  const float scores[] = {0.5f, 0.3f, 0.2f};
  const float bias[] = {0.0f, 0.0f, 1.0f};
  TopKParams p;
  p.num_experts = 3;
  p.top_k = 1;
  p.expert_bias = bias;
  int32_t idx;
  float w;
  SelectTopK(p, scores, 1, &idx, &w, 1);
  EXPECT_EQ(idx, 2);
  EXPECT_EQ(w, 0.2f);
}

TEST(Routing, GroupLimitedTop2SumAndMax) {
  // Groups {0,1} {2,3} {4,5}: top-2 sums 0.5, 0.6, 0.55; max 0.4, 0.3, 0.5.
  const float scores[] = {0.1f, 0.4f, 0.3f, 0.3f, 0.05f, 0.5f};
  TopKParams p;
  p.num_experts = 6;
  p.top_k = 2;
  p.n_groups = 3;
  p.topk_groups = 1;
  int32_t idx[2];
  float w[2];
  p.group_score = kGroupTop2Sum;
  SelectTopK(p, scores, 1, idx, w, 1);
  EXPECT_EQ(idx[0], 2);  // only group 1 kept; tie 0.3/0.3 to the lower id
  EXPECT_EQ(idx[1], 3);
  p.group_score = kGroupMax;
  SelectTopK(p, scores, 1, idx, w, 1);
  EXPECT_EQ(idx[0], 5);
  EXPECT_EQ(idx[1], 4);
}

TEST(Routing, CapacityAdmitsTokenMajor) {
  // Both tokens want expert 0 in slot 0 and 1 in slot 1; capacity 1.
  const int32_t idx[] = {0, 1, 0, 1};
  float w[] = {0.6f, 0.4f, 0.7f, 0.3f};
  uint8_t kept[4];
  int64_t load[2];
  EXPECT_EQ(ApplyCapacity(2, 2, 2, 1, idx, w, kept, load), 2);
  EXPECT_EQ(kept[0], 1);
  EXPECT_EQ(kept[1], 1);
  EXPECT_EQ(kept[2], 0);
  EXPECT_EQ(kept[3], 0);
  EXPECT_EQ(w[2], 0.0f);
  NormalizeAndScale(2, 2, true, 2.0f, w);
  EXPECT_NEAR(w[0], 1.2f, 1e-6);
  EXPECT_EQ(w[2], 0.0f);  // a fully dropped token stays 0, no NaN
}

TEST(Routing, ExpertChoiceTakesTopTokensPerExpert) {
  // 3 tokens, 2 experts, capacity 2.
  const float logits[] = {1.0f, 0.0f,  //
                          2.0f, 0.0f,  //
                          0.0f, 3.0f};
  int32_t tokens[4];
  float probs[4];
  ExpertChoiceSelect(logits, 3, 2, 2, tokens, probs, 1);
  EXPECT_EQ(tokens[0], 1);
  EXPECT_EQ(tokens[1], 0);
  EXPECT_EQ(tokens[2], 2);
  EXPECT_EQ(tokens[3], 0);  // tokens 0 and 1 tie for expert 1: lower id
  const double d = std::exp(1.0) + std::exp(2.0) + 1;
  EXPECT_NEAR(probs[0], std::exp(2.0) / d, 1e-6);
}

}  // namespace
}  // namespace moe::kernels::cpu
