// The bf16 expert form a GPU keeps (engine/cuda/expert_image.h), checked on
// the CPU: an expert pass emulated on the host as engine/cuda/cuda_experts.cc
// indexes it (first GEMM into gate-up rows of GateUpCols columns, the
// activation reading g at column i and u at UpCol + i, as
// kernels/cuda/rows.cu's ActRowsBf16 does, then down) must give the
// expert's own math, gated or not, at any row width.
#include "engine/cuda/expert_image.h"

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "gtest/gtest.h"
#include "kernels/act_rule.h"

namespace moe {
namespace {

std::vector<uint16_t> RandomBf16(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = F32ToBf16(d(rng));
  return v;
}

// One row x [W] through the packed w13 and w2 [W, I] as the device pass
// indexes them (fp32 here: the layout is under test, not the rounding).
std::vector<float> DevicePassRow(const ExpertShape& s,
                                 const std::vector<uint16_t>& w13,
                                 const std::vector<uint16_t>& w2,
                                 const std::vector<float>& x,
                                 const kernels::GatedActParams& act) {
  const int64_t W = s.width, I = s.inter, GU = GateUpCols(s.gated, I);
  const int64_t up = UpCol(s.gated, I);
  std::vector<float> gate_up(GU), h(I), y(W);
  for (int64_t n = 0; n < GU; ++n) {
    double acc = 0;
    for (int64_t j = 0; j < W; ++j) acc += x[j] * Bf16ToF32(w13[n * W + j]);
    gate_up[n] = static_cast<float>(acc);
  }
  for (int64_t i = 0; i < I; ++i) {
    h[i] = kernels::GatedAct(act, gate_up[i], gate_up[up + i]);
  }
  for (int64_t j = 0; j < W; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < I; ++i) acc += h[i] * Bf16ToF32(w2[j * I + i]);
    y[j] = static_cast<float>(acc);
  }
  return y;
}

// act(x W1^T, x W3^T) W2^T, or act(-, x W3^T) W2^T without W1.
std::vector<float> ExpertRow(const ExpertShape& s, const uint16_t* w1,
                             const uint16_t* w3,
                             const std::vector<uint16_t>& w2,
                             const std::vector<float>& x,
                             const kernels::GatedActParams& act) {
  const int64_t W = s.width, I = s.inter;
  std::vector<float> y(W);
  std::vector<float> h(I);
  for (int64_t i = 0; i < I; ++i) {
    double g = 0, u = 0;
    for (int64_t j = 0; j < W; ++j) {
      if (w1 != nullptr) g += x[j] * Bf16ToF32(w1[i * W + j]);
      u += x[j] * Bf16ToF32(w3[i * W + j]);
    }
    h[i] = kernels::GatedAct(act, static_cast<float>(g), static_cast<float>(u));
  }
  for (int64_t j = 0; j < W; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < I; ++i) acc += h[i] * Bf16ToF32(w2[j * I + i]);
    y[j] = static_cast<float>(acc);
  }
  return y;
}

void ExpectPassIsTheExpert(const ExpertShape& s,
                           const kernels::GatedActParams& act) {
  const int64_t W = s.width, I = s.inter;
  const std::vector<uint16_t> w1 = RandomBf16(I * W, 1),
                              w3 = RandomBf16(I * W, 2),
                              w2 = RandomBf16(W * I, 3);
  const uint16_t* gate = s.gated ? w1.data() : nullptr;
  auto w13 = PackBf16GateUp(s, gate, w3.data());
  ASSERT_TRUE(w13.ok()) << w13.status();
  ASSERT_EQ(static_cast<int64_t>(w13->size()), GateUpCols(s.gated, I) * W);
  std::vector<float> x(W);
  for (int64_t j = 0; j < W; ++j) x[j] = std::sin(0.37f * j + 0.1f);
  const std::vector<float> got = DevicePassRow(s, *w13, w2, x, act);
  const std::vector<float> want = ExpertRow(s, gate, w3.data(), w2, x, act);
  for (int64_t j = 0; j < W; ++j) {
    ASSERT_NEAR(got[j], want[j], 1e-4f * (1.0f + std::fabs(want[j])))
        << "column " << j;
  }
}

TEST(ExpertImage, GatedExpertsKeepW1RowsThenW3Rows) {
  const ExpertShape s{.width = 24, .inter = 8, .gated = true};
  const std::vector<uint16_t> w1 = RandomBf16(8 * 24, 4),
                              w3 = RandomBf16(8 * 24, 5);
  auto w13 = PackBf16GateUp(s, w1.data(), w3.data());
  ASSERT_TRUE(w13.ok()) << w13.status();
  ASSERT_EQ(w13->size(), 2u * 8 * 24);
  EXPECT_TRUE(std::equal(w1.begin(), w1.end(), w13->begin()));
  EXPECT_TRUE(std::equal(w3.begin(), w3.end(), w13->begin() + 8 * 24));
  EXPECT_EQ(GateUpCols(true, 8), 16);
  EXPECT_EQ(UpCol(true, 8), 8);
}

TEST(ExpertImage, NonGatedExpertsKeepW3RowsAlone) {
  const ExpertShape s{.width = 24, .inter = 8, .gated = false};
  const std::vector<uint16_t> w3 = RandomBf16(8 * 24, 6);
  auto w13 = PackBf16GateUp(s, nullptr, w3.data());
  ASSERT_TRUE(w13.ok()) << w13.status();
  EXPECT_EQ(*w13, w3);
  EXPECT_EQ(GateUpCols(false, 8), 8);
  EXPECT_EQ(UpCol(false, 8), 0);
}

TEST(ExpertImage, RefusesAGateThatDoesNotMatchTheShape) {
  const std::vector<uint16_t> w = RandomBf16(8 * 24, 7);
  auto extra = PackBf16GateUp({.width = 24, .inter = 8, .gated = false},
                              w.data(), w.data());
  EXPECT_EQ(extra.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(extra.status().message().find("non-gated"), std::string::npos);
  auto missing = PackBf16GateUp({.width = 24, .inter = 8, .gated = true},
                                nullptr, w.data());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpertImage, APassComputesNonGatedRelu2ExpertsAtTheLatentWidth) {
  MoeLayerConfig c;
  c.hidden = 96;
  c.latent = 40;
  c.inter = 24;
  c.shared_inter = 16;
  c.gated = false;
  c.act = Activation::kRelu2;
  const ExpertShape routed = RoutedExpertShape(c);
  EXPECT_EQ(routed.width, 40);
  EXPECT_EQ(routed.inter, 24);
  EXPECT_FALSE(routed.gated);
  const ExpertShape shared = SharedExpertShape(c);
  EXPECT_EQ(shared.width, 96);
  EXPECT_EQ(shared.inter, 16);
  EXPECT_FALSE(shared.gated);
  kernels::GatedActParams relu2;
  relu2.act = kernels::kActRelu2;
  ExpectPassIsTheExpert(routed, relu2);
  ExpectPassIsTheExpert(shared, relu2);
}

TEST(ExpertImage, APassComputesGatedExpertsAsBefore) {
  kernels::GatedActParams situ;
  situ.act = kernels::kActSitu;
  situ.beta = 4.0f;
  situ.linear_beta = 25.0f;
  ExpectPassIsTheExpert({.width = 32, .inter = 16, .gated = true}, situ);
  kernels::GatedActParams gelu;
  gelu.act = kernels::kActGeluTanh;
  ExpectPassIsTheExpert({.width = 48, .inter = 8, .gated = true}, gelu);
  ExpectPassIsTheExpert({.width = 48, .inter = 8, .gated = true}, {});
}

}  // namespace
}  // namespace moe
