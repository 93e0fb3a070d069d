// The single-process engine against the independent reference on random
// layers: every routing option, odd sizes, N = 0 and 1, batching invariance.
#include "engine/local_moe.h"

#include "gtest/gtest.h"
#include "kernels/cpu/packed_gemm.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/fp8_checkpoint.h"
#include "tests/testutil/many_experts.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

using testing::AllClose;
using testing::RandomCase;

MoeLayerConfig Base() {
  MoeLayerConfig c;
  c.hidden = 37;
  c.inter = 19;
  c.num_experts = 8;
  c.top_k = 2;
  return c;
}

struct RunResult {
  std::vector<float> y;
  Routing routing;
};

RunResult Forward(const testing::GoldenCase& c,
                  WeightDType dtype = WeightDType::kF32,
                  std::vector<int64_t> segments = {}, int threads = 2) {
  auto source = testing::MakeGoldenSource(c);
  auto moe = LocalMoe::Create(*source, "cpu", dtype, threads,
                              std::max<int64_t>(c.tokens, 1));
  EXPECT_TRUE(moe.ok()) << moe.status();
  RunResult r;
  r.y.assign(c.tokens * c.config.hidden, -7.0f);
  if (!moe.ok()) return r;
  absl::Status s =
      (*moe)->Forward(0, c.x.data(), {.n = c.tokens, .segment_ends = segments},
                      r.y.data(), &r.routing);
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

void ExpectMatchesReference(const MoeLayerConfig& config, int64_t n,
                            uint64_t seed) {
  auto c = RandomCase(config, n, seed);
  RunResult r = Forward(c);
  EXPECT_TRUE(AllClose(r.y, c.y, testing::kF32Tol));
  if (config.routing == RoutingMode::kTokenChoice) {
    EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, r.routing.expert,
                                          r.routing.weight, n, config.top_k,
                                          r.routing.slots));
  }
}

TEST(LocalMoe, OddSizes) {
  for (int64_t n : {0, 1, 2, 37, 101}) {
    SCOPED_TRACE(n);
    ExpectMatchesReference(Base(), n, 11 + n);
  }
}

TEST(LocalMoe, EmptyBatchWritesNothingAndRoutesNothing) {
  // N = 0 on a layer with routed and shared weights: the call succeeds,
  // replaces stale routing with empty arrays and zero counts, writes nothing,
  // and the same LocalMoe then gets a real batch right.
  MoeLayerConfig config = Base();
  config.shared_inter = 16;
  auto c = RandomCase(config, 9, 3);
  auto source = testing::MakeGoldenSource(c);
  auto moe = LocalMoe::Create(*source, "cpu", WeightDType::kF32, 2, c.tokens);
  ASSERT_TRUE(moe.ok()) << moe.status();
  Routing routing;
  routing.Reset(4, config.top_k, config.num_experts);
  routing.expert_counts[1] = 8;
  routing.dropped = 3;
  float guard = -7.0f;
  ASSERT_TRUE((*moe)->Forward(0, c.x.data(), {.n = 0}, &guard, &routing).ok());
  EXPECT_EQ(guard, -7.0f);
  EXPECT_EQ(routing.tokens, 0);
  EXPECT_TRUE(routing.expert.empty());
  EXPECT_TRUE(routing.weight.empty());
  EXPECT_TRUE(routing.dispatched.empty());
  EXPECT_EQ(routing.expert_counts, std::vector<int64_t>(config.num_experts, 0));
  EXPECT_EQ(routing.dropped, 0);

  std::vector<float> y(c.tokens * config.hidden, -7.0f);
  ASSERT_TRUE(
      (*moe)->Forward(0, c.x.data(), {.n = c.tokens}, y.data(), &routing).ok());
  EXPECT_TRUE(AllClose(y, c.y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, routing.expert,
                                        routing.weight, c.tokens, config.top_k,
                                        routing.slots));
}

TEST(LocalMoe, SigmoidBiasGroupsTop2) {
  MoeLayerConfig c = Base();
  c.num_experts = 16;
  c.top_k = 4;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.n_groups = 4;
  c.topk_groups = 2;
  c.route_scale = 2.5f;
  c.shared_inter = 23;
  ExpectMatchesReference(c, 29, 5);
}

// The late-2026 shapes (tests/testutil/many_experts.h: 512 experts top-22
// with groups, 896 top-16, softmax over 640 top-22) at odd token counts,
// N = 0 and 1 included, and with one expert that every token picks: the
// routing is the reference's and y within the fp32 golden tolerance.
TEST(LocalMoe, ManyExpertsAndSlotsMatchTheReference) {
  for (const testing::ManyExpertsShape& s : testing::ManyExpertsShapes()) {
    SCOPED_TRACE(s.name);
    ASSERT_TRUE(s.config.Validate().ok()) << s.config.Validate();
    for (int64_t n : {0, 1, 3, 37}) {
      SCOPED_TRACE(n);
      ExpectMatchesReference(s.config, n, 100 + n);
    }
    const int64_t hot = s.config.num_experts - 3;
    auto g = RandomCase(s.config, 41, 7);
    testing::MakeExpertHot(g, hot);
    RunResult r = Forward(g);
    EXPECT_TRUE(AllClose(r.y, g.y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(g.top_idx, g.top_w, r.routing.expert,
                                          r.routing.weight, g.tokens,
                                          s.config.top_k, r.routing.slots));
    ASSERT_EQ(r.routing.expert_counts.size(),
              static_cast<size_t>(s.config.num_experts));
    // Sigmoid scores saturate at 1, so under a group limit a token's other
    // groups can now and then outscore the hot one's top-2 sum: nearly
    // every token, not every one.
    EXPECT_GE(r.routing.expert_counts[hot] * 10, g.tokens * 9) << "not hot";
  }
}

// Room above them: 1024 experts in 16 groups keeping 8, top-32.
TEST(LocalMoe, ThousandExpertsTopThirtyTwoMatchTheReference) {
  MoeLayerConfig c = Base();
  c.num_experts = 1024;
  c.top_k = 32;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.n_groups = 16;
  c.topk_groups = 8;
  c.route_scale = 2.5f;
  c.inter = 7;
  ExpectMatchesReference(c, 13, 9);
}

TEST(LocalMoe, GroupsByMaxNoNorm) {
  MoeLayerConfig c = Base();
  c.num_experts = 12;
  c.top_k = 3;
  c.n_groups = 3;
  c.topk_groups = 1;
  c.group_score = GroupScore::kMax;
  c.route_norm = false;
  c.route_scale = 16.0f;
  ExpectMatchesReference(c, 23, 6);
}

TEST(LocalMoe, SharedExpertWithGate) {
  MoeLayerConfig c = Base();
  c.shared_inter = 41;
  c.shared_gate = true;
  c.route_norm = false;
  ExpectMatchesReference(c, 17, 7);
}

TEST(LocalMoe, ScoreBeforeExperts) {
  MoeLayerConfig c = Base();
  c.score_before_experts = true;
  ExpectMatchesReference(c, 31, 8);
}

TEST(LocalMoe, CapacityDrops) {
  MoeLayerConfig c = Base();
  c.capacity_factor = 0.5;
  auto g = RandomCase(c, 40, 9);
  RunResult r = Forward(g);
  EXPECT_TRUE(AllClose(r.y, g.y, testing::kF32Tol));
  EXPECT_GT(r.routing.dropped, 0);
  int64_t dispatched = 0;
  for (uint8_t d : r.routing.dispatched) dispatched += d;
  // ceil(0.5 * 40 * 2 / 8) = 5 per expert at most.
  EXPECT_LE(dispatched, 8 * 5);
  EXPECT_EQ(dispatched + r.routing.dropped, 40 * 2);
}

TEST(LocalMoe, ExpertChoiceOddSizes) {
  MoeLayerConfig c = Base();
  c.routing = RoutingMode::kExpertChoice;
  for (int64_t n : {1, 3, 37}) {
    SCOPED_TRACE(n);
    ExpectMatchesReference(c, n, 20 + n);
  }
  c.capacity_factor = 1.5;
  ExpectMatchesReference(c, 40, 30);
}

TEST(LocalMoe, TopKEqualsExperts) {
  MoeLayerConfig c = Base();
  c.num_experts = 3;
  c.top_k = 3;
  ExpectMatchesReference(c, 9, 31);
}

TEST(LocalMoe, HotExpertTakesEveryToken) {
  // A gate that makes expert 5 win for every token: one big group, the rest
  // empty, the work still split over both threads.
  MoeLayerConfig c = Base();
  c.top_k = 1;
  auto g = RandomCase(c, 300, 12);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    for (int64_t j = 0; j < c.hidden; ++j)
      g.gate[e * c.hidden + j] = e == 5 ? 0.5f : 0.0f;
  }
  for (int64_t t = 0; t < g.tokens; ++t) g.x[t * c.hidden] = 3.0f + t % 3;
  for (int64_t t = 0; t < g.tokens; ++t) {
    for (int64_t j = 1; j < c.hidden; ++j)
      g.x[t * c.hidden + j] = std::fabs(g.x[t * c.hidden + j]);
  }
  testing::RunReferenceMoe(g);
  RunResult r = Forward(g);
  EXPECT_EQ(r.routing.expert_counts[5], 300);
  EXPECT_TRUE(AllClose(r.y, g.y, testing::kF32Tol));
}

TEST(LocalMoe, BatchedSegmentsEqualSeparateRuns) {
  // Capacity and expert choice depend on the batch; a batch of requests
  // routed as segments must give each request its stand-alone result.
  for (RoutingMode mode :
       {RoutingMode::kTokenChoice, RoutingMode::kExpertChoice}) {
    MoeLayerConfig c = Base();
    c.routing = mode;
    c.capacity_factor = mode == RoutingMode::kTokenChoice ? 0.6 : 0.0;
    auto whole = RandomCase(c, 5 + 11 + 1, 40);
    RunResult batched = Forward(whole, WeightDType::kF32, {5, 16, 17});
    int64_t begin = 0;
    for (int64_t end : {5, 16, 17}) {
      auto part = whole;
      part.tokens = end - begin;
      part.x.assign(whole.x.begin() + begin * c.hidden,
                    whole.x.begin() + end * c.hidden);
      RunResult alone = Forward(part);
      std::vector<float> slice(batched.y.begin() + begin * c.hidden,
                               batched.y.begin() + end * c.hidden);
      EXPECT_EQ(slice, alone.y) << "segment ending at " << end;
      begin = end;
    }
  }
}

TEST(LocalMoe, ResultIndependentOfThreads) {
  auto g = RandomCase(Base(), 57, 50);
  RunResult one = Forward(g, WeightDType::kF32, {}, 1);
  RunResult two = Forward(g, WeightDType::kF32, {}, 2);
  EXPECT_EQ(one.y, two.y);
}

TEST(LocalMoe, Bf16WeightsWithinBf16Tolerance) {
  MoeLayerConfig c = Base();
  c.shared_inter = 16;
  auto g = RandomCase(c, 33, 60);
  RunResult r = Forward(g, WeightDType::kBF16);
  EXPECT_TRUE(AllClose(r.y, g.y, testing::kBf16Tol));
}

// Weights quantised to FP8 at load (128 x 128 blocks with partial edges,
// amax / 448, nearest even) give what fp32 gives on the dequantised weights:
// the same routing, y at the fp32 tolerance, on every ISA.
TEST(LocalMoe, Fp8WeightsMatchTheDequantisedReference) {
  MoeLayerConfig c = Base();
  c.hidden = 200;
  c.inter = 150;
  c.shared_inter = 140;
  auto g = RandomCase(c, 37, 61);
  testing::RoundTripExpertsThroughFp8(&g);
  const std::string original = kernels::cpu::GemmIsaName();
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    if (!kernels::cpu::SetGemmIsa(isa)) continue;
    SCOPED_TRACE(isa);
    RunResult r = Forward(g, WeightDType::kFP8);
    EXPECT_TRUE(AllClose(r.y, g.y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(g.top_idx, g.top_w, r.routing.expert,
                                          r.routing.weight, g.tokens, c.top_k,
                                          r.routing.slots));
  }
  kernels::cpu::SetGemmIsa(original.c_str());
}

TEST(LocalMoe, EveryIsaAgrees) {
  MoeLayerConfig c = Base();
  c.hidden = 70;
  c.inter = 45;
  c.shared_inter = 33;
  auto g = RandomCase(c, 29, 70);
  const std::string original = kernels::cpu::GemmIsaName();
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    if (!kernels::cpu::SetGemmIsa(isa)) continue;
    SCOPED_TRACE(isa);
    for (WeightDType d : {WeightDType::kF32, WeightDType::kBF16}) {
      RunResult r = Forward(g, d);
      EXPECT_TRUE(AllClose(
          r.y, g.y,
          d == WeightDType::kF32 ? testing::kF32Tol : testing::kBf16Tol));
    }
  }
  kernels::cpu::SetGemmIsa(original.c_str());
}

}  // namespace
}  // namespace moe
