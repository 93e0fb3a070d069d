// The CUDA kernels against the CPU kernels on the same inputs. Skips, with
// the reason, when no CUDA device is visible.
#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "core/dtype.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "gtest/gtest.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/routing.h"
#include "kernels/cuda/kernels.h"
#include "kernels/routing_rule.h"
#include "tests/kernels/routing_edge_cases.h"
#include "tests/testutil/cuda_test_util.h"

namespace moe {
namespace {

namespace kcu = kernels::cuda;
namespace kc = kernels::cpu;

class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok())
      GTEST_SKIP() << s.message();
  }
  static std::vector<float> Random(size_t n, uint64_t seed, float scale = 1) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  }
};

struct RouteCase {
  int E, k, score, groups, topk_groups, group_score;
  bool bias, renorm;
  float scale;
};

TEST_F(CudaKernelTest, RoutingMatchesTheCpuPath) {
  const int n = 77;
  for (const RouteCase& rc :
       {RouteCase{8, 2, kcu::kScoreSoftmax, 0, 0, 0, false, true, 1},
        RouteCase{64, 6, kcu::kScoreSoftmax, 0, 0, 0, false, false, 1},
        RouteCase{16, 4, kcu::kScoreSigmoid, 4, 2, kcu::kGroupTop2Sum, true,
                  true, 2.5f},
        RouteCase{16, 3, kcu::kScoreSoftmax, 4, 2, kcu::kGroupMax, false, false,
                  16},
        RouteCase{256, 8, kcu::kScoreSigmoid, 8, 4, kcu::kGroupTop2Sum, true,
                  true, 2.5f}}) {
    SCOPED_TRACE(rc.E);
    const auto logits = Random(n * rc.E, rc.E, 3);
    const auto bias = Random(rc.E, 7, 0.1f);
    // CPU reference.
    std::vector<float> scores(n * rc.E), w_cpu(n * rc.k);
    std::vector<int32_t> idx_cpu(n * rc.k);
    kc::ComputeScores(rc.score, logits.data(), n, rc.E, scores.data(), 1);
    kc::TopKParams p;
    p.num_experts = rc.E;
    p.top_k = rc.k;
    p.expert_bias = rc.bias ? bias.data() : nullptr;
    p.n_groups = rc.groups;
    p.topk_groups = rc.topk_groups;
    p.group_score = rc.group_score;
    kc::SelectTopK(p, scores.data(), n, idx_cpu.data(), w_cpu.data(), 1);
    kc::NormalizeAndScale(n, rc.k, rc.renorm, rc.scale, w_cpu.data());
    // GPU.
    DeviceBuffer d_logits = testing::Upload(logits),
                 d_bias = testing::Upload(bias);
    auto d_idx = *DeviceBuffer::Allocate(n * rc.k * 4);
    auto d_w = *DeviceBuffer::Allocate(n * rc.k * 4);
    auto d_counts = testing::Upload(std::vector<int32_t>(rc.E, 0));
    kcu::RouteArgs a;
    a.logits = d_logits.as<float>();
    a.tokens = n;
    a.num_experts = rc.E;
    a.top_k = rc.k;
    a.score_func = rc.score;
    a.expert_bias = rc.bias ? d_bias.as<float>() : nullptr;
    a.n_groups = rc.groups;
    a.topk_groups = rc.topk_groups;
    a.group_score = rc.group_score;
    a.renorm = rc.renorm;
    a.route_scale = rc.scale;
    a.idx = d_idx.as<int32_t>();
    a.weights = d_w.as<float>();
    a.counts = d_counts.as<int32_t>();
    ASSERT_EQ(kcu::RouteTopK(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto idx = testing::Download<int32_t>(d_idx, n * rc.k);
    const auto w = testing::Download<float>(d_w, n * rc.k);
    const auto counts = testing::Download<int32_t>(d_counts, rc.E);
    EXPECT_EQ(idx, idx_cpu);
    for (size_t i = 0; i < w.size(); ++i)
      EXPECT_NEAR(w[i], w_cpu[i], 1e-5 * (1 + std::fabs(w_cpu[i])));
    int64_t total = 0;
    for (int32_t c : counts) total += c;
    EXPECT_EQ(total, n * rc.k);
  }
}

// The NaN and tie rules of kernels/routing_rule.h: the same golden cases as
// the CPU kernels' test (tests/kernels/cpu/routing_test.cc).
TEST_F(CudaKernelTest, RoutingNanEdgeCasesFollowTheSharedRule) {
  for (const testing::RouteEdgeCase& rc : testing::RouteEdgeCases()) {
    SCOPED_TRACE(rc.name);
    DeviceBuffer d_logits = testing::Upload(rc.logits),
                 d_bias = testing::Upload(rc.bias);
    auto d_idx = *DeviceBuffer::Allocate(rc.top_k * 4);
    auto d_w = *DeviceBuffer::Allocate(rc.top_k * 4);
    kcu::RouteArgs a;
    a.logits = d_logits.as<float>();
    a.tokens = 1;
    a.num_experts = rc.num_experts;
    a.top_k = rc.top_k;
    a.score_func = rc.score_func;
    a.expert_bias = rc.bias.empty() ? nullptr : d_bias.as<float>();
    a.n_groups = rc.n_groups;
    a.topk_groups = rc.topk_groups;
    a.group_score = rc.group_score;
    a.renorm = false;  // w = s[idx], as the cases are written
    a.route_scale = 1.0f;
    a.idx = d_idx.as<int32_t>();
    a.weights = d_w.as<float>();
    ASSERT_EQ(kcu::RouteTopK(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(testing::Download<int32_t>(d_idx, rc.top_k), rc.idx);
    const auto w = testing::Download<float>(d_w, rc.top_k);
    for (int j = 0; j < rc.top_k; ++j) {
      EXPECT_TRUE(testing::WeightMatches(w[j], rc.w[j]))
          << "slot " << j << ": " << w[j] << " vs " << rc.w[j];
    }
  }
}

// Shared memory: the largest layer the fused kernel takes launches (no
// opt-in needed); one past the 48 KB limit is refused without a launch, and
// the refusal leaves nothing behind for the next launch.
TEST_F(CudaKernelTest, RoutingSharedMemoryLimit) {
  const int E = kcu::kMaxRouteExperts, n = 3;
  ASSERT_TRUE(kernels::RouteFitsSharedMemory(E, 0));
  const auto logits = Random(n * E, 9, 3);
  DeviceBuffer d_logits = testing::Upload(logits);
  auto d_idx = *DeviceBuffer::Allocate(n * 8 * 4);
  auto d_w = *DeviceBuffer::Allocate(n * 8 * 4);
  kcu::RouteArgs a;
  a.logits = d_logits.as<float>();
  a.tokens = n;
  a.num_experts = E;
  a.top_k = 8;
  a.idx = d_idx.as<int32_t>();
  a.weights = d_w.as<float>();
  ASSERT_EQ(kcu::RouteTopK(a, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> scores(n * E), w_cpu(n * 8);
  std::vector<int32_t> idx_cpu(n * 8);
  kc::ComputeScores(kc::kScoreSoftmax, logits.data(), n, E, scores.data(), 1);
  kc::TopKParams p;
  p.num_experts = E;
  p.top_k = 8;
  kc::SelectTopK(p, scores.data(), n, idx_cpu.data(), w_cpu.data(), 1);
  EXPECT_EQ(testing::Download<int32_t>(d_idx, n * 8), idx_cpu);
  a.n_groups = E;  // groups of one expert: (2E + G) * 4 + E + G > 48 KB
  a.topk_groups = 8;
  ASSERT_FALSE(kernels::RouteFitsSharedMemory(E, E));
  EXPECT_EQ(kcu::RouteTopK(a, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A wrapper reports its own launch: an earlier call's error left in the
// thread's last-error state (here a failed cudaSetDevice; in the engine a
// cudaErrorNotReady from polling an event) does not fail it, and is not
// consumed by it either.
TEST_F(CudaKernelTest, StaleErrorDoesNotFailTheNextLaunch) {
  const int64_t rows = 5, cols = 40;
  DeviceBuffer d_src = testing::Upload(std::vector<uint16_t>(rows * cols, 1));
  DeviceBuffer d_row = testing::Upload(std::vector<int32_t>{4, 3, 2, 1, 0});
  auto d_dst = *DeviceBuffer::Allocate(rows * cols * 2);
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_NE(cudaSetDevice(CudaDeviceCount() + 7), cudaSuccess);
  EXPECT_EQ(kcu::GatherRowsBf16(d_src.as<uint16_t>(), cols, d_row.as<int32_t>(),
                                rows, d_dst.as<uint16_t>(), nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);  // still the stale one
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int now = -1;
  ASSERT_EQ(cudaGetDevice(&now), cudaSuccess);
  EXPECT_EQ(now, device);
  // And a launch that fails reports itself and leaves nothing behind.
  EXPECT_NE(
      kcu::GatherRowsBf16(d_src.as<uint16_t>(), 1 << 20, d_row.as<int32_t>(),
                          1u << 31, d_dst.as<uint16_t>(), nullptr),
      cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaKernelTest, GatherScatterCombineSiluMul) {
  const int64_t rows = 13, cols = 37, tokens = 5, slots = 3;
  const auto src = Random(tokens * cols, 1);
  std::vector<int32_t> src_row(rows);
  for (int64_t j = 0; j < rows; ++j)
    src_row[j] = static_cast<int32_t>((j * 7) % tokens);
  const auto scale = Random(rows, 2);
  DeviceBuffer d_src = testing::Upload(src), d_row = testing::Upload(src_row),
               d_scale = testing::Upload(scale);
  auto d_g = *DeviceBuffer::Allocate(rows * cols * 2);
  ASSERT_EQ(kcu::GatherRowsF32ToBf16(d_src.as<float>(), cols,
                                     d_row.as<int32_t>(), d_scale.as<float>(),
                                     rows, d_g.as<uint16_t>(), nullptr),
            cudaSuccess);
  const auto g = testing::Download<uint16_t>(d_g, rows * cols);
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(g[j * cols + c],
                F32ToBf16(src[src_row[j] * cols + c] * scale[j]));
    }
  }
  // Scatter undoes a gather with the same index.
  std::vector<int32_t> perm(rows);
  for (int64_t j = 0; j < rows; ++j)
    perm[j] = static_cast<int32_t>((j * 5) % rows);
  DeviceBuffer d_perm = testing::Upload(perm);
  auto d_a = *DeviceBuffer::Allocate(rows * cols * 2);
  auto d_b = *DeviceBuffer::Allocate(rows * cols * 2);
  ASSERT_EQ(kcu::GatherRowsBf16(d_g.as<uint16_t>(), cols, d_perm.as<int32_t>(),
                                rows, d_a.as<uint16_t>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(kcu::ScatterRowsBf16(d_a.as<uint16_t>(), cols, d_perm.as<int32_t>(),
                                 rows, d_b.as<uint16_t>(), nullptr),
            cudaSuccess);
  EXPECT_EQ(testing::Download<uint16_t>(d_b, rows * cols), g);
  // Combine in slot order against the CPU kernel on the same bf16 values.
  std::vector<int32_t> slot_row = {0,  3, -1, 12, 1, 2, -1, -1,
                                   -1, 4, 5,  6,  7, 8, 9};
  const auto wts = Random(tokens * slots, 3);
  DeviceBuffer d_sr = testing::Upload(slot_row), d_w = testing::Upload(wts);
  auto d_y = *DeviceBuffer::Allocate(tokens * cols * 4);
  ASSERT_EQ(kcu::CombineSlots(tokens, slots, cols, d_w.as<float>(),
                              d_sr.as<int32_t>(), d_g.as<uint16_t>(),
                              d_y.as<float>(), nullptr),
            cudaSuccess);
  std::vector<float> gf(rows * cols), y_cpu(tokens * cols);
  for (size_t i = 0; i < gf.size(); ++i) gf[i] = Bf16ToF32(g[i]);
  std::vector<int64_t> sr64(slot_row.begin(), slot_row.end());
  kc::CombineSlots(tokens, slots, cols, wts.data(), sr64.data(), gf.data(),
                   y_cpu.data(), 1);
  const auto y = testing::Download<float>(d_y, tokens * cols);
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], y_cpu[i], 1e-5 * (1 + std::fabs(y_cpu[i])));
  // SiLU-mul.
  const int64_t inter = 19;
  const auto gu = Random(rows * 2 * inter, 4, 4);
  DeviceBuffer d_gu = testing::Upload(gu);
  auto d_h = *DeviceBuffer::Allocate(rows * inter * 2);
  ASSERT_EQ(
      kcu::SiluMul(d_gu.as<float>(), rows, inter, d_h.as<uint16_t>(), nullptr),
      cudaSuccess);
  const auto h = testing::Download<uint16_t>(d_h, rows * inter);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < inter; ++c) {
      const float gv = gu[r * 2 * inter + c],
                  uv = gu[r * 2 * inter + inter + c];
      EXPECT_NEAR(Bf16ToF32(h[r * inter + c]), gv / (1 + std::exp(-gv)) * uv,
                  1e-2 * (1 + std::fabs(gv * uv)));
    }
  }
  // SiLU-mul from bf16 gate-up (the engine's path): the same as the fp32
  // kernel on the same, bf16-rounded values, bit for bit.
  std::vector<uint16_t> gu_bf(gu.size());
  std::vector<float> gu_rounded(gu.size());
  for (size_t i = 0; i < gu.size(); ++i) {
    gu_bf[i] = F32ToBf16(gu[i]);
    gu_rounded[i] = Bf16ToF32(gu_bf[i]);
  }
  DeviceBuffer d_gub = testing::Upload(gu_bf),
               d_gur = testing::Upload(gu_rounded);
  auto d_hb = *DeviceBuffer::Allocate(rows * inter * 2);
  ASSERT_EQ(kcu::SiluMulBf16(d_gub.as<uint16_t>(), rows, inter,
                             d_hb.as<uint16_t>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(
      kcu::SiluMul(d_gur.as<float>(), rows, inter, d_h.as<uint16_t>(), nullptr),
      cudaSuccess);
  EXPECT_EQ(testing::Download<uint16_t>(d_hb, rows * inter),
            testing::Download<uint16_t>(d_h, rows * inter));
}

TEST_F(CudaKernelTest, EmptyLaunchesAreNoOps) {
  EXPECT_EQ(kcu::SiluMulBf16(nullptr, 0, 8, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(kcu::GatherRowsBf16(nullptr, 8, nullptr, 0, nullptr, nullptr),
            cudaSuccess);
  EXPECT_EQ(
      kcu::CombineSlots(0, 2, 8, nullptr, nullptr, nullptr, nullptr, nullptr),
      cudaSuccess);
  kcu::RouteArgs a;
  EXPECT_EQ(kcu::RouteTopK(a, nullptr), cudaSuccess);  // no tokens
  a.tokens = 1;
  a.num_experts = 8;
  a.top_k = 9;  // more than E
  EXPECT_EQ(kcu::RouteTopK(a, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace moe
