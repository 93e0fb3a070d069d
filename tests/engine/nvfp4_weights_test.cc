// NVFP4 routed experts in the CPU engine: raw ModelOpt tensors packed as
// they are, the refusals of bad input, the memory they take, the quantiser
// of --weight-dtype nvfp4, and a ModelOpt NVFP4 checkpoint of a per-expert
// family serving what the fp32 checkpoint of the same values serves.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/hf_checkpoint.h"
#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "engine/weight_values.h"
#include "gtest/gtest.h"
#include "kernels/cpu/packed_gemm.h"
#include "kernels/nvfp4_rule.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

namespace kc = kernels::cpu;
namespace kn = kernels;

// Raw codes, block scales and global scale of an [out, in] NVFP4 weight, as
// a loader reads them.
struct RawNvfp4 {
  std::vector<uint8_t> pairs, scales;
  float global = 0.01f;
};
RawNvfp4 RandomRaw(int64_t out, int64_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RawNvfp4 r;
  r.pairs.resize(out * in / 2);
  r.scales.resize(out * in / 16);
  for (uint8_t& b : r.pairs) b = static_cast<uint8_t>(rng());
  for (uint8_t& b : r.scales) b = static_cast<uint8_t>(0x28 + rng() % 0x30);
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

TEST(Nvfp4Weights, RawCodesAndScalesPackAsTheyAre) {
  const int64_t out = 70, in = 96;
  RawNvfp4 raw = RandomRaw(out, in, 1);
  auto t = MakeNvfp4Tensor("experts.0.w1.weight", out, in, raw.pairs.data(),
                           raw.pairs.size(), raw.scales.data(),
                           raw.scales.size(), raw.global);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->is_nvfp4());
  EXPECT_FALSE(t->is_mxfp4());
  auto p4 = PackWeight(*t, WeightDType::kNVFP4);
  auto p32 = PackWeight(*t, WeightDType::kF32);  // dequantised
  ASSERT_TRUE(p4.ok() && p32.ok()) << p4.status();
  EXPECT_EQ(p4->format, kc::WeightFormat::kNVFP4);
  // 4.5 bits a weight and 32 column scales a panel (70 rows: 3 panels).
  EXPECT_EQ(p4->bytes(), 3u * (32 * in / 2 + 32 * in / 16 + 128));
  auto f = WeightsAsF32(*t);
  ASSERT_TRUE(f.ok());
  for (int64_t i = 0; i < out; ++i) {
    for (int64_t j = 0; j < in; ++j) {
      ASSERT_EQ(f->data[i * in + j],
                kn::Nvfp4Value(raw.pairs.data() + i * in / 2,
                               raw.scales.data() + i * in / 16, raw.global, j));
    }
  }
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t m : {1, 2, 8}) {
    std::vector<float> a(m * in);
    for (float& x : a) x = u(rng);
    EXPECT_TRUE(
        testing::AllClose(Gemm(*p4, a, m), Gemm(*p32, a, m), {1e-6, 1e-5}))
        << "m=" << m;
  }
}

TEST(Nvfp4Weights, BadInputIsRefusedNamingTheTensor) {
  RawNvfp4 raw = RandomRaw(4, 64, 3);
  auto odd =
      MakeNvfp4Tensor("layers.3.experts.5.w2.weight", 4, 40, raw.pairs.data(),
                      4 * 20, raw.scales.data(), 12, 1.0f);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("layers.3.experts.5.w2.weight"),
            std::string::npos);
  EXPECT_NE(odd.status().message().find("not a multiple of 16"),
            std::string::npos)
      << odd.status();
  raw.scales[5] = 0x7f;
  auto nan = MakeNvfp4Tensor("w1.weight_scale", 4, 64, raw.pairs.data(),
                             raw.pairs.size(), raw.scales.data(),
                             raw.scales.size(), 1.0f);
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("w1.weight_scale"), std::string::npos);
  EXPECT_NE(nan.status().message().find("NaN"), std::string::npos)
      << nan.status();
  raw.scales[5] = 0x30;
  EXPECT_FALSE(MakeNvfp4Tensor("s", 4, 64, raw.pairs.data(), raw.pairs.size(),
                               raw.scales.data(), raw.scales.size() - 1, 1.0f)
                   .ok());
  auto inf = MakeNvfp4Tensor("g", 4, 64, raw.pairs.data(), raw.pairs.size(),
                             raw.scales.data(), raw.scales.size(), INFINITY);
  ASSERT_FALSE(inf.ok());
  EXPECT_NE(inf.status().message().find("global scale"), std::string::npos);
  // Quantising at load refuses non-finite weights, naming the tensor.
  WeightTensor bad;
  bad.name = "w3.weight";
  bad.shape = {1, 3};
  std::vector<float> v = {1.0f, NAN, 0.0f};
  bad.data = reinterpret_cast<const std::byte*>(v.data());
  auto q = WeightsAsNvfp4(bad);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("w3.weight"), std::string::npos);
}

// --weight-dtype nvfp4 on fp32 weights: ModelOpt's rule, a global scale from
// the tensor's amax, an E4M3 scale per 16 (the last block of a row of 40
// shorter), codes rounded to the nearest E2M1 value.
TEST(Nvfp4Weights, QuantiserFollowsModelOpt) {
  const int64_t rows = 3, cols = 40;
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 0.02f);
  std::vector<float> v(rows * cols);
  for (float& x : v) x = n(rng);
  WeightTensor t;
  t.name = "w";
  t.shape = {rows, cols};
  t.data = reinterpret_cast<const std::byte*>(v.data());
  auto q = WeightsAsNvfp4(t);
  ASSERT_TRUE(q.ok()) << q.status();
  float amax = 0.0f;
  for (float x : v) amax = std::max(amax, std::fabs(x));
  EXPECT_EQ(q->global, amax / (6.0f * 448.0f));
  ASSERT_EQ(q->blocks, 3);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t b = 0; b < 3; ++b) {
      float bmax = 0.0f;
      for (int64_t j = 16 * b; j < std::min<int64_t>(cols, 16 * b + 16); ++j) {
        bmax = std::max(bmax, std::fabs(v[i * cols + j]));
      }
      const uint8_t s = q->row_scales(i)[b];
      EXPECT_EQ(s, kn::E4M3FromF32(bmax / 6.0f / q->global));
      for (int64_t j = 16 * b; j < std::min<int64_t>(cols, 16 * b + 16); ++j) {
        const float got =
            kn::Nvfp4Value(q->row_pairs(i), q->row_scales(i), q->global, j);
        const float step = kn::E4M3ToF32(s) * q->global;
        // Nearest E2M1 value: within half the widest gap (2) of the scale.
        EXPECT_LE(std::fabs(got - v[i * cols + j]), step + 1e-9f)
            << i << "," << j;
      }
    }
  }
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

TEST(Nvfp4Weights, RoutedExpertsTakeAboutAQuarterOfBf16) {
  auto g = testing::RandomCase(Config(), 1, 4);
  auto src = testing::MakeGoldenSource(g);  // fp32 tensors
  LoadOptions bf16, nv;
  bf16.dtype = WeightDType::kBF16;
  nv.dtype = WeightDType::kNVFP4;
  auto a = LoadLayerWeights(*src, 0, bf16);
  auto b = LoadLayerWeights(*src, 0, nv);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ((*b)->dtype, WeightDType::kNVFP4);
  EXPECT_EQ((*b)->experts.front().w13.format, kc::WeightFormat::kNVFP4);
  // The shared expert and the gate stay as stored (fp32 here).
  EXPECT_EQ((*b)->shared.w13.format, kc::WeightFormat::kF32);
  EXPECT_EQ((*b)->gate.format, kc::WeightFormat::kF32);
  EXPECT_EQ(PackedExpertBytes(Config(), WeightDType::kNVFP4),
            static_cast<int64_t>((*b)->expert_bytes()));
  // 18 bytes per 32 weights plus 128 a panel: 0.29 of bf16 at K = 128-256,
  // 0.28 at a real model's sizes.
  const double small = double((*b)->expert_bytes()) / (*a)->expert_bytes();
  EXPECT_NEAR(small, 0.29, 0.01);
  MoeLayerConfig big = Config();
  big.hidden = 2048;
  big.inter = 768;
  EXPECT_NEAR(double(PackedExpertBytes(big, WeightDType::kNVFP4)) /
                  PackedExpertBytes(big, WeightDType::kBF16),
              0.283, 0.002);
  EXPECT_EQ(ParseWeightDType("nvfp4").value(), WeightDType::kNVFP4);
  EXPECT_EQ(WeightDTypeName(WeightDType::kNVFP4), "nvfp4");
}

// Quantised at load from fp32: 4-bit weights, so not the fp32 tolerance,
// but close (E2M1's steps are at most a third of a value).
TEST(Nvfp4Weights, QuantisedAtLoadStaysClose) {
  const int64_t n = 16;
  auto g = testing::RandomCase(Config(), n, 11);
  auto src = testing::MakeGoldenSource(g);
  auto moe = LocalMoe::Create(*src, "cpu", WeightDType::kNVFP4, 2, n);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(g.y.size(), -7.0f);
  Routing routing;
  ASSERT_TRUE(
      (*moe)->Forward(0, g.x.data(), {.n = n}, y.data(), &routing).ok());
  double err = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    err += (y[i] - g.y[i]) * double(y[i] - g.y[i]);
    norm += g.y[i] * double(g.y[i]);
  }
  const double rel = std::sqrt(err / norm);
  RecordProperty("relative_rms", std::to_string(rel));
  EXPECT_LT(rel, 0.15);
}

// Replaces the routed expert weights of `c` by values NVFP4 holds exactly
// under a power-of-two global scale (codes x E4M3 scales x 2^-8, each block
// holding a +-6: its amax sets its scale), and recomputes the reference.
void MakeRoutedExpertsNvfp4Exact(testing::GoldenCase* c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const float kScales[] = {0.5f, 0.625f, 0.75f, 1.0f, 1.25f, 1.5f, 2.0f};
  auto fill = [&](std::vector<float>& w) {
    for (size_t b = 0; b < w.size(); b += 16) {
      const float s = kScales[rng() % 7] / 256.0f;
      for (size_t j = b; j < b + 16 && j < w.size(); ++j) {
        const uint8_t code = j == b ? static_cast<uint8_t>(7 | (rng() % 2) * 8)
                                    : static_cast<uint8_t>(rng() % 16);
        w[j] = kn::E2M1ToF32(code) * s;
      }
    }
  };
  fill(c->w1);
  fill(c->w3);
  fill(c->w2);
  testing::RunReferenceMoe(*c);
}

HfFamily PerExpertFamily(const MoeLayerConfig& c) {
  for (HfFamily f : testing::FamiliesFor(c)) {
    if (f == HfFamily::kMixtral || f == HfFamily::kQwen3Moe ||
        f == HfFamily::kOlmoe || f == HfFamily::kQwen2Moe) {
      return f;
    }
  }
  return HfFamily::kGptOss;  // none: the caller fails
}

class Nvfp4CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    c_.hidden = 64;
    c_.inter = 48;
    c_.num_experts = 4;
    c_.top_k = 2;
    g_ = testing::RandomCase(c_, kTokens, 21);
    MakeRoutedExpertsNvfp4Exact(&g_, 22);
    family_ = PerExpertFamily(c_);
    ASSERT_NE(family_, HfFamily::kGptOss) << "no per-expert family";
    testing::HfWriteOptions o;
    o.family = family_;
    o.storage = DType::kF32;
    f32_dir_ = testing::MakeTempDir("nvfp4_f32");
    ASSERT_TRUE(testing::WriteHfCheckpoint(g_, o, f32_dir_).ok());
    o.nvfp4_experts = true;
    nv_dir_ = testing::MakeTempDir("nvfp4_modelopt");
    absl::Status s = testing::WriteHfCheckpoint(g_, o, nv_dir_);
    ASSERT_TRUE(s.ok()) << s;
  }
  static constexpr int64_t kTokens = 12;
  static constexpr int64_t kLayer = 1;  // HfWriteOptions' default
  MoeLayerConfig c_;
  testing::GoldenCase g_;
  HfFamily family_ = HfFamily::kMixtral;
  std::string f32_dir_, nv_dir_;
};

TEST_F(Nvfp4CheckpointTest, ServesWhatTheF32CheckpointServes) {
  auto nv = HfCheckpoint::Open(nv_dir_);
  auto f32 = HfCheckpoint::Open(f32_dir_);
  ASSERT_TRUE(nv.ok()) << nv.status();
  ASSERT_TRUE(f32.ok()) << f32.status();
  auto w1 = (*nv)->Get(kLayer, WeightRole::kW1, 0);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_TRUE(w1->is_nvfp4());
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{c_.inter, c_.hidden}));
  auto dtype = ResolveWeightDType(WeightDType::kAuto, **nv);
  ASSERT_TRUE(dtype.ok()) << dtype.status();
  EXPECT_EQ(*dtype, WeightDType::kNVFP4);
  LoadOptions auto_dtype;
  auto_dtype.dtype = WeightDType::kAuto;
  auto layer = LoadLayerWeights(**nv, kLayer, auto_dtype);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ((*layer)->experts.front().w13.format, kc::WeightFormat::kNVFP4);
  EXPECT_EQ((*layer)->gate.format, kc::WeightFormat::kF32);

  std::vector<float> y_nv(g_.y.size(), -7.0f), y_f32(g_.y.size(), -9.0f);
  Routing r_nv, r_f32;
  auto moe_nv =
      LocalMoe::Create(**nv, "cpu", WeightDType::kAuto, 2, kTokens, kLayer);
  auto moe_f32 =
      LocalMoe::Create(**f32, "cpu", WeightDType::kF32, 2, kTokens, kLayer);
  ASSERT_TRUE(moe_nv.ok()) << moe_nv.status();
  ASSERT_TRUE(moe_f32.ok()) << moe_f32.status();
  ASSERT_TRUE(
      (*moe_nv)
          ->Forward(kLayer, g_.x.data(), {.n = kTokens}, y_nv.data(), &r_nv)
          .ok());
  ASSERT_TRUE(
      (*moe_f32)
          ->Forward(kLayer, g_.x.data(), {.n = kTokens}, y_f32.data(), &r_f32)
          .ok());
  EXPECT_TRUE(testing::AllClose(y_nv, y_f32, testing::kF32Tol));
  EXPECT_TRUE(testing::AllClose(y_nv, g_.y, testing::kF32Tol));
}

TEST_F(Nvfp4CheckpointTest, BadScaleShapeOrDtypeNamesTheTensor) {
  const std::string w1 =
      HfTensorName(family_, kLayer, WeightRole::kW1, 0) + "_scale";
  ASSERT_TRUE(testing::ReplaceHfTensorBytes(
                  nv_dir_, w1, DType::kF8E4M3, {c_.inter, c_.hidden / 16 - 1},
                  std::vector<uint8_t>(c_.inter * (c_.hidden / 16 - 1), 0x38))
                  .ok());
  auto nv = HfCheckpoint::Open(nv_dir_);
  ASSERT_TRUE(nv.ok()) << nv.status();
  auto shape = (*nv)->Get(kLayer, WeightRole::kW1, 0);
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find(w1), std::string::npos)
      << shape.status();
  EXPECT_NE(shape.status().message().find(
                absl::StrCat("expected [", c_.inter, ", ", c_.hidden / 16)),
            std::string::npos)
      << shape.status();
  ASSERT_TRUE(testing::ReplaceHfTensor(nv_dir_, w1, {c_.inter, c_.hidden / 16})
                  .ok());  // F32 zeros
  auto nv2 = HfCheckpoint::Open(nv_dir_);
  ASSERT_TRUE(nv2.ok()) << nv2.status();
  auto dtype = (*nv2)->Get(kLayer, WeightRole::kW1, 0);
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find(w1), std::string::npos);
  EXPECT_NE(dtype.status().message().find("expected F8_E4M3"),
            std::string::npos)
      << dtype.status();
}

TEST_F(Nvfp4CheckpointTest, OtherModelOptAlgorithmsAreRefused) {
  ASSERT_TRUE(testing::SetHfConfigKey(
                  nv_dir_, "quantization_config",
                  R"({"quant_method": "modelopt", "quant_algo": "FP8"})")
                  .ok());
  auto nv = HfCheckpoint::Open(nv_dir_);
  ASSERT_FALSE(nv.ok());
  EXPECT_NE(nv.status().message().find("'FP8'"), std::string::npos)
      << nv.status();
  EXPECT_NE(nv.status().message().find("NVFP4"), std::string::npos);
}

// Exports that describe their quantisation only in hf_quant_config.json.
TEST_F(Nvfp4CheckpointTest, HfQuantConfigAloneIsEnough) {
  ASSERT_TRUE(
      testing::SetHfConfigKey(nv_dir_, "quantization_config", "null").ok());
  const auto write = [&](const std::string& algo) {
    std::ofstream(nv_dir_ + "/hf_quant_config.json")
        << R"({"producer": {"name": "modelopt"}, "quantization": )"
        << R"({"quant_algo": ")" << algo
        << R"(", "group_size": 16, "exclude_modules": ["lm_head"]}})";
  };
  write("NVFP4");
  auto nv = HfCheckpoint::Open(nv_dir_);
  ASSERT_TRUE(nv.ok()) << nv.status();
  auto w2 = (*nv)->Get(kLayer, WeightRole::kW2, 1);
  ASSERT_TRUE(w2.ok()) << w2.status();
  EXPECT_TRUE(w2->is_nvfp4());
  write("W4A8_AWQ");
  auto awq = HfCheckpoint::Open(nv_dir_);
  ASSERT_FALSE(awq.ok());
  EXPECT_NE(awq.status().message().find("W4A8_AWQ"), std::string::npos)
      << awq.status();
  EXPECT_NE(awq.status().message().find("hf_quant_config.json"),
            std::string::npos);
}

}  // namespace
}  // namespace moe
