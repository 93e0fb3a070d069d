#include "kernels/cpu/routing.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

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
