// The 2026 families as checkpoints beyond their golden cases: Kimi K2's 384
// experts, Llama 4's fused experts in bf16, MTP layers left alone, and bad
// checkpoints refused naming what is wrong.
#include <filesystem>

#include "core/hf_checkpoint.h"
#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::GoldenCase;
using testing::HfWriteOptions;

absl::StatusOr<std::vector<float>> RunLayer(const std::string& dir,
                                            int64_t layer, const GoldenCase& c,
                                            WeightDType dtype,
                                            Routing* routing) {
  auto ckpt = HfCheckpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  auto moe = LocalMoe::Create(**ckpt, "cpu", dtype, 2, c.tokens, layer);
  if (!moe.ok()) return moe.status();
  std::vector<float> y(c.x.size());
  absl::Status s =
      (*moe)->Forward(layer, c.x.data(), c.tokens, {}, y.data(), routing);
  if (!s.ok()) return s;
  return y;
}

// A written golden-layout case in `family`, in a fresh directory.
std::string Write(const GoldenCase& c, HfFamily family, const char* prefix,
                  DType storage = DType::kF32) {
  const std::string dir = testing::MakeTempDir(prefix);
  HfWriteOptions o;
  o.family = family;
  o.storage = storage;
  EXPECT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
  return dir;
}

TEST(HfFamilyCheckpoint, KimiK2With384ExpertsLoadsAndMatches) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 384;  // not a power of two
  k.top_k = 8;
  k.score_func = ScoreFunc::kSigmoid;
  k.use_bias = true;
  k.route_norm = true;
  k.route_scale = 2.827f;
  k.n_groups = 1;
  k.topk_groups = 1;
  k.shared_inter = 8;
  auto c = testing::RandomCase(k, 24, 17);
  const std::string dir = Write(c, HfFamily::kKimiK2, "kimi384_");
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().layer.num_experts, 384);
  Routing routing;
  auto y = RunLayer(dir, 1, c, WeightDType::kF32, &routing);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, c.y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, routing.expert,
                                        routing.weight, c.tokens, k.top_k,
                                        routing.slots));
  fs::remove_all(dir);
}

MoeLayerConfig Llama4Config() {
  MoeLayerConfig k;
  k.hidden = 40;
  k.inter = 24;
  k.num_experts = 6;
  k.top_k = 1;
  k.score_func = ScoreFunc::kSigmoid;
  k.route_norm = false;
  k.score_before_experts = true;
  k.shared_inter = 24;
  return k;
}

TEST(HfFamilyCheckpoint, Llama4FusedExpertsInBf16StayBf16) {
  auto c = testing::RandomCase(Llama4Config(), 20, 5);
  for (HfFamily f : {HfFamily::kLlama4, HfFamily::kLlama4Text}) {
    SCOPED_TRACE(HfFamilyName(f));
    const std::string dir = Write(c, f, "llama4bf16_", DType::kBF16);
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(*ResolveWeightDType(WeightDType::kAuto, **ckpt),
              WeightDType::kBF16);
    auto w3 = (*ckpt)->Get(1, WeightRole::kW3, 4);
    ASSERT_TRUE(w3.ok()) << w3.status();
    EXPECT_EQ(w3->dtype, DType::kBF16);
    EXPECT_EQ(w3->shape, (std::vector<int64_t>{24, 40}));
    // Up row 3 of expert 4, column 7: bf16 of the reference weight.
    const float want = c.w3[(4 * 24 + 3) * 40 + 7];
    const uint16_t got =
        reinterpret_cast<const uint16_t*>(w3->data)[3 * 40 + 7];
    EXPECT_EQ(got, F32ToBf16(want));
    Routing routing;
    auto y = RunLayer(dir, 1, c, WeightDType::kAuto, &routing);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(testing::AllClose(*y, c.y, testing::kBf16Tol));
    fs::remove_all(dir);
  }
}

TEST(HfFamilyCheckpoint, MtpAndDenseLayersAreNotMoeLayers) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 2;
  k.score_func = ScoreFunc::kSigmoid;
  k.use_bias = true;
  k.n_groups = 1;
  k.topk_groups = 1;
  k.shared_inter = 8;
  auto c = testing::RandomCase(k, 4, 3);
  const std::string dir = Write(c, HfFamily::kGlm4Moe, "glm_mtp_");
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  // 3 layers, first_k_dense_replace 1; the MTP layer 3 is in the files.
  EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(LoadLayerWeights(**ckpt, 3, {}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadLayerWeights(**ckpt, 0, {}).status().code(),
            absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(HfFamilyCheckpoint, MissingFusedTensorIsNamed) {
  auto c = testing::RandomCase(Llama4Config(), 4, 6);
  const std::string dir = Write(c, HfFamily::kLlama4, "llama4miss_");
  const std::string name =
      "language_model.model.layers.1.feed_forward.experts.down_proj";
  ASSERT_TRUE(testing::ReplaceHfTensor(dir, name, {}).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto w = LoadLayerWeights(**ckpt, 1, {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(w.status().message().find(name), std::string::npos) << w.status();
  fs::remove_all(dir);
}

TEST(HfFamilyCheckpoint, MisShapedTensorsAreNamedWithTheExpectedShape) {
  {
    auto c = testing::RandomCase(Llama4Config(), 4, 7);
    const std::string dir = Write(c, HfFamily::kLlama4Text, "llama4shape_");
    const std::string name = "model.layers.1.feed_forward.experts.gate_up_proj";
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, name, {6, 40, 50}).ok());
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto w = LoadLayerWeights(**ckpt, 1, {});
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find(name), std::string::npos);
    EXPECT_NE(w.status().message().find("[6, 40, 48]"), std::string::npos)
        << w.status();
    fs::remove_all(dir);
  }
  {
    MoeLayerConfig k;
    k.hidden = 16;
    k.inter = 8;
    k.num_experts = 4;
    k.top_k = 2;
    k.score_func = ScoreFunc::kSigmoid;
    k.use_bias = true;
    auto c = testing::RandomCase(k, 4, 8);
    const std::string dir = Write(c, HfFamily::kMinimaxM2, "minimaxshape_");
    const std::string name =
        "model.layers.1.block_sparse_moe.e_score_correction_bias";
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, name, {5}).ok());
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto w = LoadLayerWeights(**ckpt, 1, {});
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find(name), std::string::npos) << w.status();
    fs::remove_all(dir);
  }
}

TEST(HfFamilyCheckpoint, UnknownModelTypeAndQuantisationAreRefusedAtOpen) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 2;
  auto c = testing::RandomCase(k, 4, 9);
  const std::string dir = Write(c, HfFamily::kMixtral, "unknown_");
  ASSERT_TRUE(testing::SetHfConfigKey(dir, "model_type", R"("phimoe")").ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("'phimoe'"), std::string::npos);
  EXPECT_NE(ckpt.status().message().find(SupportedHfFamilies()),
            std::string::npos)
      << ckpt.status();

  ASSERT_TRUE(testing::SetHfConfigKey(dir, "model_type", R"("mixtral")").ok());
  ASSERT_TRUE(HfCheckpoint::Open(dir).ok());
  ASSERT_TRUE(testing::SetHfConfigKey(
                  dir, "quantization_config",
                  R"({"quant_method":"gptq","bits":4,"group_size":128})")
                  .ok());
  ckpt = HfCheckpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("'gptq'"), std::string::npos)
      << ckpt.status();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe
