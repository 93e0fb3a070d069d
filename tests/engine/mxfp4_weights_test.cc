// MXFP4 routed experts: the loaders' entry point (raw codes and
// scales packed as they are), refusals of bad input, resident size, a layer
// whose weights MXFP4 holds exactly at fp32 tolerance, and every golden case
// quantised at load within kMxfp4WeightTol.
#include <cmath>
#include <cstdio>
#include <random>

#include "core/dtype.h"
#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "engine/weight_values.h"
#include "gtest/gtest.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/mxfp4_rule.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/mxfp4_case.h"
#include "tests/testutil/reference_moe.h"

#ifdef MOE_HAVE_CUDA
#include "engine/cuda/cuda_status.h"
#endif

namespace moe {
namespace {

namespace kc = kernels::cpu;

// Raw codes and scales of an [out, in] MXFP4 weight, as a loader reads them.
struct RawMxfp4 {
  std::vector<uint8_t> pairs, scales;
};
RawMxfp4 RandomRaw(int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RawMxfp4 r;
  r.pairs.resize(out * in / 2);
  r.scales.resize(out * in / 32);
  for (uint8_t& b : r.pairs) b = static_cast<uint8_t>(rng());
  for (uint8_t& b : r.scales) b = static_cast<uint8_t>(120 + rng() % 10);
  return r;
}

// C = A W^T over a packed weight.
std::vector<float> Gemm(const PackedWeight& w, const std::vector<float>& a,
                        int64_t m) {
  std::vector<float> c(m * w.n, -9.0f);
  std::vector<const float*> a_rows(m);
  std::vector<float*> c_rows(m);
  for (int64_t i = 0; i < m; ++i) {
    a_rows[i] = a.data() + i * w.k;
    c_rows[i] = c.data() + i * w.n;
  }
  kc::GemmPanels(a_rows.data(), m, w.k, w.ptr(), w.format, 0,
                 kc::NumPanels(w.n), kc::Epilogue::kStore, w.n, c_rows.data());
  return c;
}

TEST(Mxfp4Weights, RawCodesAndScalesPackAsTheyAre) {
  const int64_t out = 70, in = 96;
  RawMxfp4 raw = RandomRaw(out, in, 1);
  auto t =
      MakeMxfp4Tensor("blocks", out, in, raw.pairs.data(), raw.pairs.size(),
                      raw.scales.data(), raw.scales.size());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->is_mxfp4());
  auto p4 = PackWeight(*t, WeightDType::kMXFP4);
  auto p32 = PackWeight(*t, WeightDType::kF32);  // dequantised
  ASSERT_TRUE(p4.ok() && p32.ok());
  EXPECT_EQ(p4->format, kc::WeightFormat::kMXFP4);
  // 4.25 bits a weight (70 rows pad to 3 panels of 32).
  EXPECT_EQ(p4->bytes(), 3u * 32 * (in / 2 + in / 32));
  // The dequantised values are the rule's, element by element.
  auto f = WeightsAsF32(*t);
  ASSERT_TRUE(f.ok());
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      ASSERT_EQ(f->data[i * in + j],
                kernels::Mxfp4Value(raw.pairs.data() + i * in / 2,
                                    raw.scales.data() + i * in / 32, j));
    }
  }
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t m : {1, 8}) {
    std::vector<float> a(m * in);
    for (float& x : a) x = u(rng);
    const auto c4 = Gemm(*p4, a, m), c32 = Gemm(*p32, a, m);
    // One row on AVX2 takes the integer GEMV, which rounds activations to
    // 22 bits of their 32-block's largest magnitude (|a| < 1 here, |w| up
    // to 24: up to 2^-22 * 32 * 24 a block, three blocks; the sums seen are
    // far below that bound).
    const double abs_tol = m == 1 ? 5e-5 : 1e-6;
    EXPECT_TRUE(testing::AllClose(c4, c32, {abs_tol, 1e-5})) << "m=" << m;
  }
}

TEST(Mxfp4Weights, BadInputIsRefusedNamingTheTensor) {
  RawMxfp4 raw = RandomRaw(4, 64, 3);
  auto odd = MakeMxfp4Tensor("layers.3.ffn.experts.5.w2.weight", 4, 48,
                             raw.pairs.data(), 4 * 24, raw.scales.data(), 6);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("layers.3.ffn.experts.5.w2.weight"),
            std::string::npos);
  EXPECT_NE(odd.status().message().find("not a multiple of 32"),
            std::string::npos)
      << odd.status();
  raw.scales[5] = 255;
  auto nan =
      MakeMxfp4Tensor("gate_up_proj_scales", 4, 64, raw.pairs.data(),
                      raw.pairs.size(), raw.scales.data(), raw.scales.size());
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("gate_up_proj_scales"),
            std::string::npos);
  EXPECT_NE(nan.status().message().find("255"), std::string::npos)
      << nan.status();
  auto short_scales =
      MakeMxfp4Tensor("s", 4, 64, raw.pairs.data(), raw.pairs.size(),
                      raw.scales.data(), raw.scales.size() - 1);
  EXPECT_FALSE(short_scales.ok());
  // Quantising at load refuses non-finite weights, naming the tensor.
  WeightTensor inf;
  inf.name = "w1.weight";
  inf.shape = {1, 3};
  std::vector<float> v = {1.0f, INFINITY, 0.0f};
  inf.data = reinterpret_cast<const std::byte*>(v.data());
  auto q = WeightsAsMxfp4(inf);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("w1.weight"), std::string::npos);
}

MoeLayerConfig Config() {
  MoeLayerConfig c;
  c.hidden = 256;
  c.inter = 128;
  c.num_experts = 6;
  c.top_k = 2;
  c.shared_inter = 64;
  return c;
}

TEST(Mxfp4Weights, RoutedExpertsTakeAboutAQuarterOfBf16) {
  auto g = testing::RandomCase(Config(), 1, 4);
  auto src = testing::MakeGoldenSource(g);  // fp32 tensors
  LoadOptions bf16, mx;
  bf16.dtype = WeightDType::kBF16;
  mx.dtype = WeightDType::kMXFP4;
  auto a = LoadLayerWeights(*src, 0, bf16);
  auto b = LoadLayerWeights(*src, 0, mx);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ((*b)->dtype, WeightDType::kMXFP4);
  EXPECT_EQ((*b)->experts.front().w13.format, kc::WeightFormat::kMXFP4);
  // The shared expert and the gate stay as stored (fp32 here).
  EXPECT_EQ((*b)->shared.w13.format, kc::WeightFormat::kF32);
  EXPECT_EQ((*b)->gate.format, kc::WeightFormat::kF32);
  // 17/32 bytes a weight against 2: 0.266 of bf16.
  EXPECT_EQ((*b)->expert_bytes() * 64, (*a)->expert_bytes() * 17);
  // GetModelInfo's figure, from the sizes alone.
  EXPECT_EQ(PackedExpertBytes(Config(), WeightDType::kMXFP4),
            static_cast<int64_t>((*b)->expert_bytes()));
  EXPECT_EQ(PackedExpertBytes(Config(), WeightDType::kBF16),
            static_cast<int64_t>((*a)->expert_bytes()));
}

// Weights MXFP4 holds exactly (a random layer's routed experts round
// tripped), odd sizes included (the last block of a row shorter, the down
// projection's K padded): the mxfp4 engine meets the fp32 tolerance, and
// routing (fp32 gate) is exact.
TEST(Mxfp4Weights, ExactWeightsMeetTheFp32Tolerance) {
  for (MoeLayerConfig c : {Config(), [] {
                             MoeLayerConfig o = Config();
                             o.hidden = 75;
                             o.inter = 45;
                             return o;
                           }()}) {
    for (int64_t n : {1, 8, 100}) {
      auto g = testing::RandomCase(c, n, 7 + n);
      testing::RoundTripRoutedExpertsThroughMxfp4(&g);
      auto src = testing::MakeGoldenSource(g);
      auto moe = LocalMoe::Create(*src, "cpu", WeightDType::kMXFP4, 2, n);
      ASSERT_TRUE(moe.ok()) << moe.status();
      std::vector<float> y(g.y.size(), -7.0f);
      Routing routing;
      ASSERT_TRUE(
          (*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &routing).ok());
      EXPECT_TRUE(testing::AllClose(y, g.y, testing::kF32Tol))
          << "H=" << c.hidden << " n=" << n;
      EXPECT_TRUE(testing::SameTokenRouting(g.top_idx, g.top_w, routing.expert,
                                            routing.weight, n, c.top_k,
                                            routing.slots));
    }
  }
}

// What the CUDA backend uploads for MXFP4: the bf16 bits of the MXFP4
// values, which bf16 holds exactly (at every scale with a finite product).
TEST(Mxfp4Weights, Bf16FormIsExact) {
  const int64_t out = 8, in = 64;
  RawMxfp4 raw = RandomRaw(out, in, 9);
  for (size_t i = 0; i < raw.scales.size(); ++i) {
    raw.scales[i] = static_cast<uint8_t>(i * 16 % 250);  // 0 .. 249
  }
  auto t = MakeMxfp4Tensor("w", out, in, raw.pairs.data(), raw.pairs.size(),
                           raw.scales.data(), raw.scales.size());
  ASSERT_TRUE(t.ok()) << t.status();
  auto b = WeightsAsMxfp4Bf16(*t);
  auto f = WeightsAsF32(*t);
  ASSERT_TRUE(b.ok() && f.ok());
  for (int64_t i = 0; i < out * in; ++i) {
    ASSERT_EQ(Bf16ToF32(b->data[i]), f->data[i]) << i;
  }
}

#ifdef MOE_HAVE_CUDA
// The CUDA backend accepts mxfp4 (experts as their exact bf16 values): on
// MXFP4-exact weights it meets the bf16 tolerance.
TEST(Mxfp4Weights, CudaBackendRunsMxfp4AsBf16) {
  if (absl::Status s = CudaDeviceAvailable(); !s.ok()) {
    GTEST_SKIP() << s.message();
  }
  auto g = testing::RandomCase(Config(), 16, 21);
  testing::RoundTripRoutedExpertsThroughMxfp4(&g);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cuda:0", WeightDType::kMXFP4, 2, 16);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(g.y.size(), -7.0f);
  Routing routing;
  ASSERT_TRUE(
      (*moe)->Forward(0, g.x.data(), {.n = 16}, y.data(), &routing).ok());
  EXPECT_TRUE(testing::AllClose(y, g.y, testing::kBf16Tol));
}
#endif

class Mxfp4GoldenTest : public ::testing::TestWithParam<std::string> {};

// Every golden case, routed experts quantised to MXFP4 at load, against its
// fp32 reference: within kMxfp4WeightTol, routing exact. Prints the figures
// the README's precision table quotes.
TEST_P(Mxfp4GoldenTest, QuantisedAtLoadStaysWithinTheBound) {
  auto c = testing::LoadGoldenCase(GetParam());
  ASSERT_TRUE(c.ok()) << c.status();
  auto src = testing::MakeGoldenSource(*c);
  auto moe = LocalMoe::Create(*src, "cpu", WeightDType::kMXFP4, 2,
                              std::max<int64_t>(c->tokens, 1));
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(c->y.size(), -7.0f);
  Routing routing;
  ASSERT_TRUE((*moe)
                  ->Forward(0, c->x.data(),
                            {.n = c->tokens, .token_ids = c->token_ids},
                            y.data(), &routing)
                  .ok());
  const testing::RmsError e = testing::MeasureRmsError(y, c->y);
  std::printf("mxfp4 %s: relative RMS %.4f, largest %.3f rms\n",
              c->name.c_str(), e.rel_rms, e.max_over_rms);
  EXPECT_TRUE(testing::RmsClose(y, c->y, testing::kMxfp4WeightTol));
  if (c->config.routing == RoutingMode::kTokenChoice) {
    EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, routing.expert,
                                          routing.weight, c->tokens,
                                          c->config.top_k, routing.slots));
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, Mxfp4GoldenTest,
                         ::testing::ValuesIn(testing::GoldenParams()),
                         [](const auto& info) {
                           std::string n = info.param;
                           n = n.substr(n.find_last_of('/') + 1);
                           n = n.substr(0, n.find('.'));
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace moe
