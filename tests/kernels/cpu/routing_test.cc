#include "kernels/cpu/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
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
  // The late-2026 layers take the fused kernel: Nemotron 3 Super (512
  // experts in 8 groups), Kimi K3 (896), and 1024 experts for room.
  EXPECT_TRUE(RouteFitsSharedMemory(512, 8));
  EXPECT_TRUE(RouteFitsSharedMemory(896, 0));
  EXPECT_TRUE(RouteFitsSharedMemory(1024, 32));
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

// 1024 experts in 16 groups keeping 8, top-32, sigmoid scores with the
// correction bias, over enough tokens for the threaded path: the kernel's
// choice is a plain sort's (groups by top-2 sum of the choice keys, then
// experts by key, ties to the lower id), and the weights are the unbiased
// scores.
TEST(Routing, ThousandExpertsTopThirtyTwoWithGroupsMatchAPlainSort) {
  const int64_t E = 1024, k = 32, G = 16, kept = 8, n = 70;
  std::vector<float> logits(n * E), bias(E), s(n * E);
  uint64_t state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((state >> 40) % 20001) / 10000.0f - 1.0f;
  };
  for (float& v : logits) v = 3.0f * next();
  for (float& v : bias) v = 0.05f * next();
  ComputeScores(kScoreSigmoid, logits.data(), n, E, s.data(), 2);
  TopKParams p;
  p.num_experts = E;
  p.top_k = k;
  p.expert_bias = bias.data();
  p.n_groups = G;
  p.topk_groups = kept;
  p.group_score = kGroupTop2Sum;
  std::vector<int32_t> idx(n * k);
  std::vector<float> w(n * k);
  SelectTopK(p, s.data(), n, idx.data(), w.data(), 2);
  const int64_t size = E / G;
  for (int64_t t = 0; t < n; ++t) {
    SCOPED_TRACE(t);
    std::vector<float> key(E);
    for (int64_t e = 0; e < E; ++e) key[e] = s[t * E + e] + bias[e];
    std::vector<float> group(G);
    for (int64_t g = 0; g < G; ++g) {
      std::vector<float> v(key.begin() + g * size,
                           key.begin() + (g + 1) * size);
      std::sort(v.rbegin(), v.rend());
      group[g] = v[0] + v[1];
    }
    std::vector<int64_t> gorder(G), order(E);
    std::iota(gorder.begin(), gorder.end(), 0);
    std::stable_sort(gorder.begin(), gorder.end(),
                     [&](int64_t a, int64_t b) { return group[a] > group[b]; });
    std::vector<bool> keep(G, false);
    for (int64_t j = 0; j < kept; ++j) keep[gorder[j]] = true;
    std::iota(order.begin(), order.end(), 0);
    std::stable_partition(order.begin(), order.end(),
                          [&](int64_t e) { return keep[e / size]; });
    std::stable_sort(order.begin(), order.begin() + kept * size,
                     [&](int64_t a, int64_t b) { return key[a] > key[b]; });
    std::vector<int64_t> want(order.begin(), order.begin() + k);
    std::sort(want.begin(), want.end());  // compared as sets; order above
    std::vector<int64_t> got(idx.begin() + t * k, idx.begin() + (t + 1) * k);
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(w[t * k + j], s[t * E + got[j]]) << "slot " << j;
      if (j > 0) {
        EXPECT_GE(key[got[j - 1]], key[got[j]]) << "slot " << j;
      }
    }
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want);
  }
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
