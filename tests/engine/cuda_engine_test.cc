// The single-GPU layer (LocalMoe on the CUDA backend) against the independent
// reference: odd sizes, every routing option, and no device allocation per
// step. The golden cases run in golden_engine_test's cuda instantiation. Skips,
// with the reason, when no CUDA device is visible.
#include <cuda_runtime_api.h>

#include <cmath>

#include "core/dtype.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/lt_matmul.h"
#include "engine/cuda/row_bucket.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/bf16_forward_check.h"
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
  ASSERT_TRUE((*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &r).ok());
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
  // The first step too: a backend holding experts makes its step buffers
  // at load, so no step allocates device memory.
  const int64_t before = DeviceAllocationCount();
  for (int64_t n : {64, 64, 7, 1, 64}) {
    ASSERT_TRUE((*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &r).ok());
  }
  EXPECT_EQ(DeviceAllocationCount(), before);
}

// A bf16 request goes up as bf16 and is widened on the device: the same
// fp32 rows as the host's widening, so the same bits.
TEST_F(CudaEngineTest, ABf16RequestGivesItsWidenedRowsBits) {
  MoeLayerConfig c = Base();
  c.shared_inter = 24;
  c.shared_gate = true;
  testing::ExpectBf16ForwardGivesWidenedRowsBits(
      c, /*n=*/37, /*seed=*/9, "cuda:0", WeightDType::kBF16, 64);
}

// Many steps in a row, each OK: no error left over by one step (or by an
// unrelated runtime call, here a failed cudaSetDevice every 10th step) may
// fail a later one's kernel launch.
TEST_F(CudaEngineTest, FiveHundredStepsInARowAllSucceed) {
  MoeLayerConfig c = Base();
  c.shared_inter = 24;
  auto g = testing::RandomCase(c, 37, 21);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 64);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(37 * c.hidden), first;
  Routing r;
  for (int step = 0; step < 500; ++step) {
    if (step % 10 == 9) {
      ASSERT_NE(cudaSetDevice(CudaDeviceCount() + 3), cudaSuccess);
    }
    const int64_t n = 1 + (step * 7) % 37;  // odd sizes, 1..37
    const absl::Status s =
        (*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &r);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s;
    if (n == 37 && first.empty()) {
      first = y;
      EXPECT_TRUE(testing::AllClose(y, g.y, testing::kBf16Tol));
    } else if (n == 37) {
      EXPECT_EQ(y, first) << "step " << step;
    }
  }
  (void)cudaGetLastError();
}

// Expert choice per request: seven requests of odd lengths in one batch
// route and compute exactly as the CPU engine does with the same weights
// (bf16 on both), within bf16 tolerance, with the same expert ids.
TEST_F(CudaEngineTest, ExpertChoiceOfSevenOddRequestsMatchesTheCpuEngine) {
  MoeLayerConfig c = Base();
  c.routing = RoutingMode::kExpertChoice;
  c.num_experts = 6;
  c.shared_inter = 16;
  const std::vector<int64_t> lengths = {1, 3, 5, 9, 13, 7, 19};
  std::vector<int64_t> ends;
  int64_t n = 0;
  for (int64_t len : lengths) ends.push_back(n += len);
  auto g = testing::RandomCase(c, n, 31);
  auto src = testing::MakeGoldenSource(g);
  auto gpu = LocalMoe::Create(*src, "cuda:0", WeightDType::kBF16, 1, 64);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = LocalMoe::Create(*src, "cpu", WeightDType::kBF16, 2, 64);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::vector<float> y_gpu(n * c.hidden), y_cpu(n * c.hidden);
  Routing r_gpu, r_cpu;
  ASSERT_TRUE((*gpu)
                  ->Forward(0, g.x.data(), {.n = n, .segment_ends = ends},
                            y_gpu.data(), &r_gpu)
                  .ok());
  ASSERT_TRUE((*cpu)
                  ->Forward(0, g.x.data(), {.n = n, .segment_ends = ends},
                            y_cpu.data(), &r_cpu)
                  .ok());
  EXPECT_TRUE(testing::AllClose(y_gpu, y_cpu, testing::kBf16Tol));
  ASSERT_EQ(r_gpu.slots, r_cpu.slots);
  EXPECT_EQ(r_gpu.expert, r_cpu.expert);
  ASSERT_EQ(r_gpu.weight.size(), r_cpu.weight.size());
  for (size_t i = 0; i < r_cpu.weight.size(); ++i) {
    EXPECT_NEAR(r_gpu.weight[i], r_cpu.weight[i],
                1e-5 + 1e-4 * std::fabs(r_cpu.weight[i]))
        << "slot " << i;
  }
  // Per request, not per step: each request alone gives the same rows.
  int64_t begin = 0;
  for (int64_t end : ends) {
    const int64_t len = end - begin;
    std::vector<float> y_one(len * c.hidden);
    Routing r_one;
    ASSERT_TRUE((*gpu)
                    ->Forward(0, g.x.data() + begin * c.hidden, {.n = len},
                              y_one.data(), &r_one)
                    .ok());
    EXPECT_TRUE(
        testing::AllClose(y_one,
                          std::vector<float>(y_cpu.begin() + begin * c.hidden,
                                             y_cpu.begin() + end * c.hidden),
                          testing::kBf16Tol))
        << "request [" << begin << ", " << end << ")";
    begin = end;
  }
}

// cuBLASLt plans per row bucket: Warm builds one plan per bucket, after
// which every row count 1..max_rows runs (the bucket's plan with the call's
// own row count in its layouts) without another heuristic query, and gives
// the right product; the cache stays within kMaxPlans.
TEST_F(CudaEngineTest, LtMatmulPlansPerRowBucket) {
  auto lt = LtMatmul::Create();
  ASSERT_TRUE(lt.ok()) << lt.status();
  const int64_t max_rows = 100, n = 48, k = 72;
  const LtShape shape{max_rows, n, k, CUDA_R_16BF, CUDA_R_32F};
  ASSERT_TRUE((*lt)->Warm({&shape, 1}).ok());
  EXPECT_EQ((*lt)->cached_plans(), RowBuckets(max_rows).size());
  const int64_t queries = (*lt)->heuristic_queries();
  std::vector<uint16_t> x(max_rows * k), w(n * k);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = F32ToBf16(static_cast<float>((i * 37) % 17) / 8.0f - 1.0f);
  }
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = F32ToBf16(static_cast<float>((i * 11) % 13) / 6.0f - 1.0f);
  }
  auto dx = *DeviceBuffer::Allocate(x.size() * 2);
  auto dw = *DeviceBuffer::Allocate(w.size() * 2);
  auto dd = *DeviceBuffer::Allocate(max_rows * n * 4);
  ASSERT_EQ(
      cudaMemcpy(dx.data(), x.data(), x.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(dw.data(), w.data(), w.size() * 2, cudaMemcpyHostToDevice),
      cudaSuccess);
  std::vector<float> d(max_rows * n);
  for (int64_t m = 1; m <= max_rows; ++m) {
    ASSERT_EQ(cudaMemset(dd.data(), 0xff, max_rows * n * 4), cudaSuccess);
    ASSERT_TRUE((*lt)
                    ->Run(m, n, k, dx.data(), dw.data(), dd.data(), CUDA_R_16BF,
                          CUDA_R_32F, nullptr)
                    .ok());
    ASSERT_EQ(
        cudaMemcpy(d.data(), dd.data(), d.size() * 4, cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double want = 0;
        for (int64_t i = 0; i < k; ++i) {
          want += Bf16ToF32(x[r * k + i]) * Bf16ToF32(w[c * k + i]);
        }
        ASSERT_NEAR(d[r * n + c], want, 1e-3 * (1 + std::fabs(want)))
            << "m " << m << " row " << r << " col " << c;
      }
    }
    // Rows past m are not written (the layouts carry m, not the bucket).
    if (m < max_rows) {
      EXPECT_TRUE(std::isnan(d[m * n])) << "m " << m;
    }
  }
  EXPECT_EQ((*lt)->heuristic_queries(), queries);
  EXPECT_EQ((*lt)->cached_plans(), RowBuckets(max_rows).size());
  // Bounded: more shapes than the cache holds evict the oldest plans.
  auto big_w = *DeviceBuffer::Allocate(512 * 72 * 2);
  ASSERT_EQ(cudaMemset(big_w.data(), 0, big_w.size()), cudaSuccess);
  for (int64_t i = 0; i < static_cast<int64_t>(LtMatmul::kMaxPlans) + 8; ++i) {
    ASSERT_TRUE((*lt)
                    ->Run(1, 8 + 8 * (i % 64), 8 + 8 * (i / 64), dx.data(),
                          big_w.data(), dd.data(), CUDA_R_16BF, CUDA_R_32F,
                          nullptr)
                    .ok());
  }
  EXPECT_LE((*lt)->cached_plans(), LtMatmul::kMaxPlans);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace moe
