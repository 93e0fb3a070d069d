// The CUDA kernels' 2026 layer options (tests/golden/README.md) against the
// CPU path on the same inputs: the fused routing kernel with router bias,
// top-k softmax, sqrt-softplus, the correction bias under softmax, norm_min
// and hash routing, at the 2026 models' shapes (384 experts, 512 with k = 10);
// the clamped activations and the expert biases of the expert pass. Skips,
// with the reason, when no CUDA device is visible.
#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "engine/cuda/cuda_status.h"
#include "engine/cuda/device_buffer.h"
#include "engine/token_router.h"
#include "gtest/gtest.h"
#include "kernels/act_rule.h"
#include "kernels/cuda/kernels.h"
#include "kernels/routing_rule.h"
#include "tests/testutil/cuda_test_util.h"
#include "tests/testutil/many_experts.h"

namespace moe {
namespace {

namespace kcu = kernels::cuda;

// Those shapes take the fused kernel, not the host fallback: Kimi K2
// (384 experts, k = 8, one group), Qwen3-Next (512 experts, k = 10), within
// its expert, slot and 48 KB shared-memory bounds. Checked at build time.
static_assert(384 <= kcu::kMaxRouteExperts && 512 <= kcu::kMaxRouteExperts);
static_assert(10 <= kcu::kMaxRouteTopK);
static_assert(kernels::RouteFitsSharedMemory(384, 1) &&
              kernels::RouteFitsSharedMemory(512, 0));
// And the late-2026 ones (tests/testutil/many_experts.h): Nemotron 3 Super
// (512 experts in 8 groups, k = 22), Kimi K3 (896, k = 16), 640 with k = 22;
// and room to spare: 1024 experts with k = 32.
static_assert(896 <= kcu::kMaxRouteExperts && 1024 <= kcu::kMaxRouteExperts);
static_assert(22 <= kcu::kMaxRouteTopK && 32 <= kcu::kMaxRouteTopK);
static_assert(kernels::RouteFitsSharedMemory(512, 8) &&
              kernels::RouteFitsSharedMemory(896, 0) &&
              kernels::RouteFitsSharedMemory(640, 0) &&
              kernels::RouteFitsSharedMemory(1024, 0));

class Cuda2026KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok())
      GTEST_SKIP() << s.message();
  }
  static std::vector<float> Random(size_t n, uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  }
};

MoeLayerConfig Layer(int64_t E, int64_t k, ScoreFunc f) {
  MoeLayerConfig c;
  c.hidden = 8;
  c.inter = 8;
  c.num_experts = E;
  c.top_k = k;
  c.score_func = f;
  return c;
}

int32_t ScoreId(ScoreFunc f) {
  switch (f) {
    case ScoreFunc::kSigmoid:
      return kcu::kScoreSigmoid;
    case ScoreFunc::kSqrtSoftplus:
      return kcu::kScoreSqrtSoftplus;
    case ScoreFunc::kTopkSoftmax:
      return kcu::kScoreTopkSoftmax;
    case ScoreFunc::kSoftmax:
      break;
  }
  return kcu::kScoreSoftmax;
}

TEST_F(Cuda2026KernelTest, RoutingMatchesTheCpuRouter) {
  const int64_t n = 53, V = 41;
  std::vector<MoeLayerConfig> layers;
  {  // gpt-oss: router bias, top-k softmax.
    MoeLayerConfig c = Layer(32, 4, ScoreFunc::kTopkSoftmax);
    c.router_bias = true;
    layers.push_back(c);
  }
  {  // DeepSeek-V4 at Kimi's width: sqrt-softplus, correction bias, scale.
    MoeLayerConfig c = Layer(384, 8, ScoreFunc::kSqrtSoftplus);
    c.use_bias = true;
    c.route_scale = 2.5f;
    layers.push_back(c);
  }
  {  // ERNIE 4.5: softmax with the correction bias, norm_min.
    MoeLayerConfig c = Layer(64, 6, ScoreFunc::kSoftmax);
    c.use_bias = true;
    c.norm_min = 0.5f;
    layers.push_back(c);
  }
  layers.push_back(Layer(512, 10, ScoreFunc::kSoftmax));  // Qwen3-Next
  {  // DeepSeek-V4's hash layers.
    MoeLayerConfig c = Layer(64, 6, ScoreFunc::kSqrtSoftplus);
    c.hash_vocab = V;
    layers.push_back(c);
  }
  for (const MoeLayerConfig& c : layers) {
    ASSERT_TRUE(c.Validate().ok()) << c.Validate();
    const int64_t E = c.num_experts, k = c.top_k;
    SCOPED_TRACE(::testing::Message() << "E " << E << " k " << k << " "
                                      << ScoreFuncName(c.score_func));
    const auto logits = Random(n * E, E + k, 3);
    const auto bias = Random(E, 5, 0.5f), rbias = Random(E, 6, 1);
    std::vector<int32_t> table(V * k);
    std::vector<int64_t> ids(n);
    std::mt19937_64 rng(11);
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t j = 0; j < k; ++j) table[v * k + j] = (v * 7 + j * 5) % E;
    }
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % V);
    // The CPU router on the same logits.
    RouteTables tables;
    tables.expert_bias = bias.data();
    tables.router_bias = rbias.data();
    tables.tid2eid = table.data();
    TokenRouter cpu;
    Routing want;
    ASSERT_TRUE(cpu.RouteLogits(c, tables, logits.data(),
                                {.n = n, .token_ids = ids}, 1, &want)
                    .ok());
    // The fused kernel.
    DeviceBuffer d_logits = testing::Upload(logits),
                 d_bias = testing::Upload(bias),
                 d_rbias = testing::Upload(rbias),
                 d_table = testing::Upload(table), d_ids = testing::Upload(ids);
    auto d_idx = *DeviceBuffer::Allocate(n * k * 4);
    auto d_w = *DeviceBuffer::Allocate(n * k * 4);
    kcu::RouteArgs a;
    a.logits = d_logits.as<float>();
    a.tokens = n;
    a.num_experts = static_cast<int32_t>(E);
    a.top_k = static_cast<int32_t>(k);
    a.score_func = ScoreId(c.score_func);
    a.router_bias = c.router_bias ? d_rbias.as<float>() : nullptr;
    a.expert_bias = c.use_bias ? d_bias.as<float>() : nullptr;
    if (c.hash_routed()) {
      a.tid2eid = d_table.as<int32_t>();
      a.token_ids = d_ids.as<int64_t>();
    }
    a.renorm = c.route_norm;
    a.route_scale = c.route_scale;
    a.norm_min = c.norm_min;
    a.idx = d_idx.as<int32_t>();
    a.weights = d_w.as<float>();
    ASSERT_EQ(kcu::RouteTopK(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(testing::Download<int32_t>(d_idx, n * k), want.expert);
    const auto w = testing::Download<float>(d_w, n * k);
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(w[i], want.weight[i], 1e-5 * (1 + std::fabs(want.weight[i])))
          << i;
    }
  }
}

// The late-2026 shapes through the fused kernel, groups included, against
// the CPU router on the same logits: the same experts in the same order and
// the same weights.
TEST_F(Cuda2026KernelTest, ManyExpertsAndSlotsMatchTheCpuRouter) {
  const int64_t n = 37;
  for (const testing::ManyExpertsShape& s : testing::ManyExpertsShapes()) {
    const MoeLayerConfig& c = s.config;
    SCOPED_TRACE(s.name);
    ASSERT_TRUE(c.Validate().ok()) << c.Validate();
    const int64_t E = c.num_experts, k = c.top_k;
    const auto logits = Random(n * E, E + k, 3);
    const auto bias = Random(E, 5, 0.5f);
    RouteTables tables;
    tables.expert_bias = bias.data();
    TokenRouter cpu;
    Routing want;
    ASSERT_TRUE(
        cpu.RouteLogits(c, tables, logits.data(), {.n = n}, 1, &want).ok());
    DeviceBuffer d_logits = testing::Upload(logits),
                 d_bias = testing::Upload(bias);
    auto d_idx = *DeviceBuffer::Allocate(n * k * 4);
    auto d_w = *DeviceBuffer::Allocate(n * k * 4);
    kcu::RouteArgs a;
    a.logits = d_logits.as<float>();
    a.tokens = n;
    a.num_experts = static_cast<int32_t>(E);
    a.top_k = static_cast<int32_t>(k);
    a.score_func = ScoreId(c.score_func);
    a.expert_bias = c.use_bias ? d_bias.as<float>() : nullptr;
    a.n_groups = static_cast<int32_t>(c.n_groups);
    a.topk_groups = static_cast<int32_t>(c.topk_groups);
    a.group_score =
        c.group_score == GroupScore::kMax ? kcu::kGroupMax : kcu::kGroupTop2Sum;
    a.renorm = c.route_norm;
    a.route_scale = c.route_scale;
    a.norm_min = c.norm_min;
    a.idx = d_idx.as<int32_t>();
    a.weights = d_w.as<float>();
    ASSERT_EQ(kcu::RouteTopK(a, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(testing::Download<int32_t>(d_idx, n * k), want.expert);
    const auto w = testing::Download<float>(d_w, n * k);
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_NEAR(w[i], want.weight[i], 1e-5 * (1 + std::fabs(want.weight[i])))
          << i;
    }
  }
}

TEST_F(Cuda2026KernelTest, HashRoutingNeedsTableAndIdsTogether) {
  auto d_logits = *DeviceBuffer::Allocate(8 * 4);
  auto d_table = *DeviceBuffer::Allocate(8 * 4);
  kcu::RouteArgs a;
  a.logits = d_logits.as<float>();
  a.tokens = 1;
  a.num_experts = 8;
  a.top_k = 2;
  a.tid2eid = d_table.as<int32_t>();  // no token ids
  EXPECT_EQ(kcu::RouteTopK(a, nullptr), cudaErrorInvalidValue);
  a.tid2eid = nullptr;
  a.score_func = 7;  // no such score function
  EXPECT_EQ(kcu::RouteTopK(a, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The activation of the expert pass (bf16 gate-up in, bf16 h out) is the
// shared rule (kernels/act_rule.h) on the same values, up to h's rounding;
// a limit small enough that the clamps bite.
TEST_F(Cuda2026KernelTest, ClampedActivationsFollowTheSharedRule) {
  const int64_t rows = 9, inter = 37;
  const auto gu = Random(rows * 2 * inter, 3, 6);
  std::vector<uint16_t> gu_bf(gu.size());
  for (size_t i = 0; i < gu.size(); ++i) gu_bf[i] = F32ToBf16(gu[i]);
  DeviceBuffer d_gu = testing::Upload(gu_bf);
  auto d_h = *DeviceBuffer::Allocate(rows * inter * 2);
  for (int32_t act : {kernels::kActGptOss, kernels::kActSiluClamp}) {
    kernels::GatedActParams p;
    p.act = act;
    p.alpha = 1.702f;
    p.limit = 2.5f;
    ASSERT_EQ(kcu::SiluMulBf16(d_gu.as<uint16_t>(), rows, inter,
                               d_h.as<uint16_t>(), nullptr, p),
              cudaSuccess);
    const auto h = testing::Download<uint16_t>(d_h, rows * inter);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < inter; ++c) {
        const float g = Bf16ToF32(gu_bf[r * 2 * inter + c]);
        const float u = Bf16ToF32(gu_bf[r * 2 * inter + inter + c]);
        // The device's expf may differ from the host's by an ulp or two:
        // within h's bf16 rounding.
        const float want = kernels::GatedAct(p, g, u);
        EXPECT_NEAR(Bf16ToF32(h[r * inter + c]), want,
                    std::fabs(want) / 128 + 1e-6f)
            << "act " << act << " row " << r << " col " << c;
      }
    }
  }
}

// A non-gated expert's gate-up rows hold u alone (engine/cuda/
// expert_image.h: ld inter, up 0): relu2 of each u, the shared rule; and a
// gated layout through ActRowsBf16 is SiluMulBf16's, bit for bit.
TEST_F(Cuda2026KernelTest, NonGatedRowsTakeRelu2OfUAlone) {
  const int64_t rows = 7, inter = 45;
  const auto u = Random(rows * inter, 12, 3);
  std::vector<uint16_t> u_bf(u.size());
  for (size_t i = 0; i < u.size(); ++i) u_bf[i] = F32ToBf16(u[i]);
  DeviceBuffer d_u = testing::Upload(u_bf);
  auto d_h = *DeviceBuffer::Allocate(rows * inter * 2);
  kernels::GatedActParams relu2;
  relu2.act = kernels::kActRelu2;
  ASSERT_EQ(kcu::ActRowsBf16(d_u.as<uint16_t>(), inter, 0, rows, inter,
                             d_h.as<uint16_t>(), nullptr, relu2),
            cudaSuccess);
  const auto h = testing::Download<uint16_t>(d_h, rows * inter);
  for (int64_t i = 0; i < rows * inter; ++i) {
    const float v = Bf16ToF32(u_bf[i]);
    EXPECT_EQ(h[i], F32ToBf16(kernels::GatedAct(relu2, v, v))) << i;
  }
  // u past a row's stride is refused, launching nothing.
  EXPECT_EQ(kcu::ActRowsBf16(d_u.as<uint16_t>(), inter, 1, rows, inter,
                             d_h.as<uint16_t>(), nullptr, relu2),
            cudaErrorInvalidValue);

  const int64_t gated_rows = 3, gi = 15;  // [3, 2 * 15] of the same values
  auto d_h2 = *DeviceBuffer::Allocate(gated_rows * gi * 2);
  kernels::GatedActParams gelu;
  gelu.act = kernels::kActGeluTanh;
  ASSERT_EQ(kcu::SiluMulBf16(d_u.as<uint16_t>(), gated_rows, gi,
                             d_h.as<uint16_t>(), nullptr, gelu),
            cudaSuccess);
  ASSERT_EQ(kcu::ActRowsBf16(d_u.as<uint16_t>(), 2 * gi, gi, gated_rows, gi,
                             d_h2.as<uint16_t>(), nullptr, gelu),
            cudaSuccess);
  EXPECT_EQ(testing::Download<uint16_t>(d_h, gated_rows * gi),
            testing::Download<uint16_t>(d_h2, gated_rows * gi));
}

// gelu_erf and swiglustep through ActRowsBf16 against the rule on the
// host (kernels/act_rule.h): the device's erff and expf may differ from the
// host's in the last float bits, so each h is held to one bf16 step.
TEST_F(Cuda2026KernelTest, GeluErfAndSwigluStepRowsFollowTheRule) {
  const int64_t rows = 6, inter = 37;
  const auto gu = Random(rows * 2 * inter, 13, 12);  // |v| up to 12: clamps
  std::vector<uint16_t> gu_bf(gu.size());
  for (size_t i = 0; i < gu.size(); ++i) gu_bf[i] = F32ToBf16(gu[i]);
  DeviceBuffer d_gu = testing::Upload(gu_bf);
  auto d_h = *DeviceBuffer::Allocate(rows * inter * 2);
  for (int32_t act : {kernels::kActGeluErf, kernels::kActSwigluStep}) {
    SCOPED_TRACE(act);
    kernels::GatedActParams p;
    p.act = act;
    p.limit = 5.0f;
    ASSERT_EQ(kcu::ActRowsBf16(d_gu.as<uint16_t>(), 2 * inter, inter, rows,
                               inter, d_h.as<uint16_t>(), nullptr, p),
              cudaSuccess);
    const auto h = testing::Download<uint16_t>(d_h, rows * inter);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < inter; ++c) {
        const float g = Bf16ToF32(gu_bf[r * 2 * inter + c]);
        const float u = Bf16ToF32(gu_bf[r * 2 * inter + inter + c]);
        const float want = kernels::GatedAct(p, g, u);
        EXPECT_NEAR(Bf16ToF32(h[r * inter + c]), want,
                    1e-6f + std::abs(want) / 128.0f)
            << r << "," << c;
      }
    }
  }
}

TEST_F(Cuda2026KernelTest, BiasRowsAddInFp32WithinTheStride) {
  const int64_t n = 5, cols = 13, ld = 20;
  const auto v = Random(n * ld, 8, 4), bias = Random(cols, 9, 2);
  std::vector<uint16_t> vb(v.size());
  for (size_t i = 0; i < v.size(); ++i) vb[i] = F32ToBf16(v[i]);
  DeviceBuffer d_vb = testing::Upload(vb), d_v = testing::Upload(v),
               d_bias = testing::Upload(bias);
  ASSERT_EQ(kcu::AddBiasRowsBf16(d_vb.as<uint16_t>(), n, cols, ld,
                                 d_bias.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(kcu::AddBiasRowsF32(d_v.as<float>(), n, cols, ld,
                                d_bias.as<float>(), nullptr),
            cudaSuccess);
  const auto gb = testing::Download<uint16_t>(d_vb, n * ld);
  const auto gf = testing::Download<float>(d_v, n * ld);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < ld; ++c) {
      const size_t i = r * ld + c;
      if (c >= cols) {  // past the columns: untouched
        EXPECT_EQ(gb[i], vb[i]);
        EXPECT_EQ(gf[i], v[i]);
        continue;
      }
      EXPECT_EQ(gb[i], F32ToBf16(Bf16ToF32(vb[i]) + bias[c]));
      EXPECT_EQ(gf[i], v[i] + bias[c]);
    }
  }
  EXPECT_EQ(kcu::AddBiasRowsBf16(d_vb.as<uint16_t>(), n, cols, cols - 1,
                                 d_bias.as<float>(), nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace moe
