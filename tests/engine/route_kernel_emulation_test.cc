// The fused CUDA routing kernel (kernels/cuda/routing.cu) step for step on
// the host, through the rule functions it shares with the CPU kernels
// (kernels/routing_rule.h, here compiled for the host): every golden case
// the kernel routes (token choice, no capacity limit, no groups: the 2026
// ones among them) gets the case's experts and weights. A GPU cannot run
// here; this holds the kernel's order of steps (router bias, score, choice
// keys, hash row or top-k, softmax over the chosen, normalisation) and the
// shared rules to the golden answers. tests/kernels/cuda/kernels_2026_test.cc
// runs the kernel itself against the CPU router on a GPU.
#include <climits>
#include <cmath>
#include <vector>

#include "engine/device_backend.h"
#include "gtest/gtest.h"
#include "kernels/routing_rule.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/many_experts.h"

namespace moe {
namespace {

namespace k = kernels;

// One token as RouteKernel routes it (threads and reductions aside): its
// gate logits `l` [E] in, its k experts and final weights out.
void RouteTokenAsTheKernel(const testing::GoldenCase& c, const float* l,
                           int64_t token, int32_t* idx, float* w) {
  const MoeLayerConfig& cfg = c.config;
  const int64_t E = cfg.num_experts, K = cfg.top_k;
  std::vector<float> s(E), key(E);
  for (int64_t e = 0; e < E; ++e) {
    s[e] = k::RouteLogit(cfg.router_bias ? l[e] + c.router_bias[e] : l[e]);
  }
  if (cfg.score_func == ScoreFunc::kSigmoid) {
    for (float& v : s) v = 1.0f / (1.0f + expf(-v));
  } else if (cfg.score_func == ScoreFunc::kSqrtSoftplus) {
    for (float& v : s) v = k::SqrtSoftplus(v);
  } else if (cfg.score_func == ScoreFunc::kSoftmax) {
    float m = -INFINITY, sum = 0.0f;
    for (float v : s) m = fmaxf(m, v);
    for (float& v : s) sum += (v = expf(v - m));
    for (float& v : s) v *= 1.0f / sum;
  }  // kTopkSoftmax: the logits themselves
  for (int64_t e = 0; e < E; ++e) {
    key[e] = k::RouteKey(cfg.use_bias ? s[e] + c.bias[e] : s[e]);
  }
  if (cfg.hash_routed()) {
    std::vector<int32_t> row(K);
    for (int64_t j = 0; j < K; ++j) {
      row[j] = static_cast<int32_t>(c.tid2eid[c.token_ids[token] * K + j]);
    }
    k::HashedRow(row.data(), s.data(), K, idx, w);
  } else {
    std::vector<uint8_t> taken(E, 0);
    for (int64_t j = 0; j < K; ++j) {
      float bv = -INFINITY;
      int64_t bi = INT_MAX;
      for (int64_t e = 0; e < E; ++e) {
        if (!taken[e] && k::RanksBefore(key[e], e, bv, bi)) {
          bv = key[e];
          bi = e;
        }
      }
      taken[bi] = 1;
      idx[j] = static_cast<int32_t>(bi);
      w[j] = s[bi];
    }
  }
  if (cfg.score_func == ScoreFunc::kTopkSoftmax) k::SoftmaxOverChosenRow(w, K);
  k::NormalizeAndScaleRow(w, K, cfg.route_norm, cfg.route_scale, cfg.norm_min);
}

// Every token of `c` routed as the kernel routes it, from fp32 gate logits:
// the case's experts and weights.
void ExpectKernelRoutesAsTheCase(const testing::GoldenCase& c) {
  const MoeLayerConfig& cfg = c.config;
  const int64_t n = c.tokens, E = cfg.num_experts, H = cfg.hidden;
  std::vector<int32_t> idx(n * cfg.top_k);
  std::vector<float> w(n * cfg.top_k), l(E);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < E; ++e) {  // the fp32 gate GEMM
      double acc = 0;
      for (int64_t i = 0; i < H; ++i) {
        acc += double(c.x[t * H + i]) * c.gate[e * H + i];
      }
      l[e] = static_cast<float>(acc);
    }
    RouteTokenAsTheKernel(c, l.data(), t, idx.data() + t * cfg.top_k,
                          w.data() + t * cfg.top_k);
  }
  EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, idx, w, n,
                                        cfg.top_k, cfg.top_k));
}

class RouteKernelEmulationTest : public ::testing::TestWithParam<std::string> {
};

TEST_P(RouteKernelEmulationTest, RoutesEveryKernelCaseAsTheGoldenCase) {
  auto c = testing::LoadGoldenCase(GetParam());
  ASSERT_TRUE(c.ok()) << c.status();
  const MoeLayerConfig& cfg = c->config;
  if (cfg.routing != RoutingMode::kTokenChoice || cfg.capacity_factor > 0 ||
      cfg.n_groups > 0) {
    // Capacity limits and expert choice route on the host on a GPU too (the
    // CPU router's own code); group-limited choice (no 2026 option) is held
    // to the CPU kernels by tests/kernels/cuda/cuda_kernels_test.cc.
    GTEST_SKIP() << "not the fused kernel's no-group token choice";
  }
  if (RoutesOnHost(cfg)) {
    // Gemma 4's router pre-norm and per-expert scales are routed on the
    // host on a GPU (DeviceBackend::RouteTokens, the CPU's TokenRouter), so
    // the fused kernel never routes such a layer.
    GTEST_SKIP() << c->name << ": routed on the host on a GPU";
  }
  if (absl::Status s = CheckDeviceRouterMath(c->config, "the CUDA backend");
      !s.ok()) {
    GTEST_SKIP() << c->name << ": " << s.message();
  }
  ExpectKernelRoutesAsTheCase(*c);
}

// The late-2026 shapes without groups (tests/testutil/many_experts.h: 896
// experts top-16 with the correction bias, softmax over 640 top-22), on
// random layers with a hot expert for the second half of the tokens, as the
// naive reference routes them.
TEST(RouteKernelEmulation, ManyExpertsAndSlotsRouteAsTheReference) {
  for (const testing::ManyExpertsShape& s : testing::ManyExpertsShapes()) {
    if (s.config.n_groups > 0) continue;
    SCOPED_TRACE(s.name);
    auto c = testing::RandomCase(s.config, 29, 31, s.name);
    testing::MakeExpertHot(c, s.config.num_experts - 1, 15);
    ExpectKernelRoutesAsTheCase(c);
  }
}

std::string CaseName(const ::testing::TestParamInfo<std::string>& info) {
  std::string stem = info.param.substr(info.param.find_last_of('/') + 1);
  return stem.substr(0, stem.find('.'));
}

INSTANTIATE_TEST_SUITE_P(Golden, RouteKernelEmulationTest,
                         ::testing::ValuesIn(testing::GoldenParams()),
                         CaseName);

}  // namespace
}  // namespace moe
