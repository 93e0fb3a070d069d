// The single-GPU layer (LocalMoe on the CUDA backend) against the independent
// reference: odd sizes, every routing option, and no device allocation per
// step. The golden cases run in golden_engine_test's cuda instantiation. Skips,
// with the reason, when no CUDA device is visible.
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

class CudaEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok())
      GTEST_SKIP() << s.message();
  }
};

MoeLayerConfig Base() {
  MoeLayerConfig c;
  c.hidden = 72;  // multiples of 8: cuBLASLt's bf16 alignment
  c.inter = 40;
  c.num_experts = 8;
  c.top_k = 2;
  return c;
}

void ExpectMatches(const MoeLayerConfig& config, int64_t n, uint64_t seed) {
  auto g = testing::RandomCase(config, n, seed);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 256);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(n * config.hidden);
  Routing r;
  ASSERT_TRUE((*moe)->Forward(0, g.x.data(), n, {}, y.data(), &r).ok());
  EXPECT_TRUE(testing::AllClose(y, g.y, testing::kBf16Tol));
  if (config.routing == RoutingMode::kTokenChoice) {
    EXPECT_TRUE(testing::SameTokenRouting(g.top_idx, g.top_w, r.expert,
                                          r.weight, n, config.top_k, r.slots));
  }
}

TEST_F(CudaEngineTest, OddSizes) {
  for (int64_t n : {0, 1, 37, 200}) ExpectMatches(Base(), n, 10 + n);
}

TEST_F(CudaEngineTest, EveryRoutingOption) {
  MoeLayerConfig c = Base();
  c.num_experts = 16;
  c.top_k = 4;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.n_groups = 4;
  c.topk_groups = 2;
  c.route_scale = 2.5f;
  c.shared_inter = 48;
  ExpectMatches(c, 29, 1);
  MoeLayerConfig q = Base();
  q.shared_inter = 32;
  q.shared_gate = true;
  q.route_norm = false;
  ExpectMatches(q, 17, 2);
  MoeLayerConfig s = Base();
  s.score_before_experts = true;
  s.capacity_factor = 0.75;
  ExpectMatches(s, 40, 3);
  MoeLayerConfig e = Base();
  e.routing = RoutingMode::kExpertChoice;
  ExpectMatches(e, 24, 4);
}

TEST_F(CudaEngineTest, StepsAllocateNothing) {
  const MoeLayerConfig c = Base();
  auto g = testing::RandomCase(c, 64, 5);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 128);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(64 * c.hidden);
  Routing r;
  ASSERT_TRUE((*moe)->Forward(0, g.x.data(), 64, {}, y.data(), &r).ok());
  const int64_t before = DeviceAllocationCount();
  for (int64_t n : {64, 7, 1, 64}) {
    ASSERT_TRUE((*moe)->Forward(0, g.x.data(), n, {}, y.data(), &r).ok());
  }
  EXPECT_EQ(DeviceAllocationCount(), before);
}

}  // namespace
}  // namespace moe
