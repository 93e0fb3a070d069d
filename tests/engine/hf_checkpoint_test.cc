// Every golden case written into each Hugging Face family's layout that can
// express it (sharded, with unrelated tensors beside it) loads through the
// checkpoint reader and gives the golden routing and output.
#include "core/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/fp8_checkpoint.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::GoldenCase;
using testing::HfWriteOptions;

struct Output {
  std::vector<float> y;
  Routing routing;
};

absl::StatusOr<Output> RunCheckpoint(const std::string& dir, int64_t layer,
                                     const std::vector<float>& x, int64_t n,
                                     WeightDType dtype,
                                     const std::vector<int64_t>& ids = {}) {
  auto ckpt = HfCheckpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  auto moe =
      LocalMoe::Create(**ckpt, "cpu", dtype, 2, std::max<int64_t>(n, 1), layer);
  if (!moe.ok()) return moe.status();
  Output out;
  out.y.resize(x.size());
  absl::Status s = (*moe)->Forward(layer, x.data(), {.n = n, .token_ids = ids},
                                   out.y.data(), &out.routing);
  if (!s.ok()) return s;
  return out;
}

void ExpectGolden(const GoldenCase& c, const Output& out,
                  testing::Tolerance tol) {
  EXPECT_TRUE(testing::AllClose(out.y, c.y, tol));
  if (c.config.routing == RoutingMode::kTokenChoice) {
    EXPECT_TRUE(testing::SameTokenRouting(
        c.top_idx, c.top_w, out.routing.expert, out.routing.weight, c.tokens,
        c.config.top_k, out.routing.slots));
  }
}

class HfGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGoldenTest, EveryExpressibleFamilyLoadsAndMatches) {
  auto c = testing::LoadGoldenCase(GetParam());
  ASSERT_TRUE(c.ok()) << c.status();
  const auto families = testing::FamiliesFor(c->config);
  ASSERT_FALSE(families.empty()) << "no family expresses " << c->name;
  for (HfFamily f : families) {
    SCOPED_TRACE(HfFamilyName(f));
    const std::string dir = testing::MakeTempDir(c->name + "_");
    HfWriteOptions o;
    o.family = f;
    o.layer = 1;
    o.shards = 3;
    ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
    auto out =
        RunCheckpoint(dir, 1, c->x, c->tokens, WeightDType::kF32, c->token_ids);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectGolden(*c, *out, testing::kF32Tol);
    fs::remove_all(dir);
  }
}

TEST_P(HfGoldenTest, Bf16CheckpointWithinBf16Tolerance) {
  auto c = testing::LoadGoldenCase(GetParam());
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir(c->name + "_bf16_");
  HfWriteOptions o;
  const auto families = testing::FamiliesFor(c->config);
  ASSERT_FALSE(families.empty()) << "no family expresses " << c->name;
  o.family = families.front();
  o.storage = DType::kBF16;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  auto out = RunCheckpoint(dir, o.layer, c->x, c->tokens, WeightDType::kBF16,
                           c->token_ids);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(testing::CpuBf16Close(*c, out->y));
  fs::remove_all(dir);
}

std::string Stem(const ::testing::TestParamInfo<std::string>& info) {
  return fs::path(info.param).stem().string();
}

INSTANTIATE_TEST_SUITE_P(Golden, HfGoldenTest,
                         ::testing::ValuesIn(testing::GoldenParams()), Stem);

TEST(HfCheckpoint, EveryFamilyIsCoveredByTheGoldenCases) {
  std::set<HfFamily> covered;
  for (const auto& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok());
    for (HfFamily f : testing::FamiliesFor(c->config)) covered.insert(f);
  }
  // Jamba's softmax top-k without renorm and without a shared expert, and
  // Hunyuan's and Step-3's (and so Step3-VL's) shared MLPs that are always
  // there beside plain softmax routing, are in no golden case: they serve
  // reference cases (families_golden_test) and their layouts are checked in
  // hf_families_checkpoint_test.
  for (HfFamily f : AllHfFamilies()) {
    if (f == HfFamily::kJamba || f == HfFamily::kHunyuanV1Moe ||
        f == HfFamily::kStep3Text || f == HfFamily::kStep3Vl) {
      continue;
    }
    EXPECT_TRUE(covered.count(f) > 0) << "no golden case is written as a "
                                      << HfFamilyName(f) << " checkpoint";
  }
}

// Each 2026 family's own golden case, written in that family's layout.
TEST(HfCheckpoint, EachFamilyLoadsItsOwnGoldenCase) {
  const std::pair<HfFamily, const char*> kCases[] = {
      {HfFamily::kGlm4Moe, "glm45_like"},
      {HfFamily::kKimiK2, "deepseek_v3_like"},
      {HfFamily::kKimiK2, "glm45_like"},
      {HfFamily::kGlmMoeDsa, "glm45_like"},
      {HfFamily::kGlmMoeDsa, "deepseek_v3_like"},
      {HfFamily::kMimoV2Flash, "minimax_m2_like"},
      {HfFamily::kQwen3Next, "qwen3_next_like"},
      {HfFamily::kQwen35Moe, "qwen3_next_like"},
      {HfFamily::kMinimaxM2, "minimax_m2_like"},
      {HfFamily::kLlama4, "llama4_like"},
      {HfFamily::kLlama4Text, "llama4_like"},
      {HfFamily::kErnie45Moe, "ernie45_like"},
      {HfFamily::kGptOss, "gptoss_like"},
      {HfFamily::kDeepseekV4, "deepseek_v4_like"},
      {HfFamily::kDeepseekV4, "deepseek_v4_hash"},
      {HfFamily::kNemotronH, "nemotron3_latent"},
      {HfFamily::kNemotronH, "nemotron3_nvfp4"},
      {HfFamily::kGemma4, "gemma4_like"},
      {HfFamily::kKimiK3, "kimi_k3_like"},
      {HfFamily::kDeepseek, "mixtral_like"},
      {HfFamily::kDeepseekV32, "deepseek_v3_like"},
      {HfFamily::kDots1, "deepseek_v3_like"},
      {HfFamily::kGlm4MoeLite, "glm45_like"},
      {HfFamily::kSolarOpen, "glm45_like"},
      {HfFamily::kKimiLinear, "deepseek_v3_like"},
      {HfFamily::kBailingMoe, "mixtral_like"},
      {HfFamily::kBailingMoeV2, "deepseek_v3_like"},
      {HfFamily::kGlm4vMoe, "glm45_like"},
      {HfFamily::kKimiVl, "deepseek_v3_like"},
      {HfFamily::kKimiK25, "deepseek_v3_like"},
      {HfFamily::kAfmoe, "minimax_m2_like"},
      {HfFamily::kLfm2Moe, "minimax_m2_like"},
      {HfFamily::kExaoneMoe, "deepseek_v3_like"},
      {HfFamily::kPhimoe, "phimoe_like"},
      {HfFamily::kLongcatFlash, "longcat_like"},
      {HfFamily::kCohere2Moe, "cohere2_like"},
      {HfFamily::kJetMoe, "jetmoe_like"},
      {HfFamily::kStep3p5, "step35_like"},
      {HfFamily::kGrok1, "grok1_like"},
      {HfFamily::kHyV3, "glm45_like"},
      {HfFamily::kBailingMoeV3, "step35_like"},
      {HfFamily::kInternS1, "qwen3_moe_like"},
      {HfFamily::kInternVl, "qwen3_moe_like"},
      {HfFamily::kInternVlChat, "qwen3_moe_like"},
      {HfFamily::kOvis26Moe, "qwen3_moe_like"},
      {HfFamily::kMinimaxVl01, "mixtral_like"},
      {HfFamily::kLfm2Vl, "minimax_m2_like"},
      {HfFamily::kMinicpm, "mixtral_like"},
      {HfFamily::kGemma4Text, "gemma4_like"},
  };
  for (const auto& [family, name] : kCases) {
    SCOPED_TRACE(absl::StrCat(HfFamilyName(family), " ", name));
    auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                     ".safetensors");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string dir = testing::MakeTempDir(std::string(name) + "_");
    HfWriteOptions o;
    o.family = family;
    o.layer = 1;
    o.shards = 4;
    ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->family(), family);
    EXPECT_EQ((*ckpt)->info().family, HfFamilyName(family));
    EXPECT_TRUE((*ckpt)->info().HasLayer(1));
    auto out =
        RunCheckpoint(dir, 1, c->x, c->tokens, WeightDType::kF32, c->token_ids);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectGolden(*c, *out, testing::kF32Tol);
    fs::remove_all(dir);
  }
}

// Qwen3.5 as released: keys under text_config, experts packed under
// model.language_model., beside a vision tower and NaN-poisoned MTP
// tensors that must be left alone; every layer is an MoE layer.
TEST(HfCheckpoint, Qwen35MoeSkipsTheVisionTowerAndMtp) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/qwen3_next_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("qwen35_");
  HfWriteOptions o;
  o.family = HfFamily::kQwen35Moe;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  std::ifstream index(dir + "/model.safetensors.index.json");
  std::stringstream text;
  text << index.rdbuf();
  for (const char* name :
       {"\"model.visual.patch_embed.proj.weight\"",
        "\"mtp.layers.0.mlp.experts.gate_up_proj\"",
        "\"model.language_model.layers.1.mlp.experts.gate_up_proj\"",
        "\"model.language_model.layers.1.mlp.shared_expert_gate.weight\""}) {
    EXPECT_NE(text.str().find(name), std::string::npos) << name;
  }
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{0, 1, 2}));
  auto out = RunCheckpoint(dir, 1, c->x, c->tokens, WeightDType::kF32);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectGolden(*c, *out, testing::kF32Tol);
  fs::remove_all(dir);
}

// Qwen3-MoE and Mixtral as transformers v5 saves them: every expert packed
// into mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I], Mixtral's
// block_sparse_moe. renamed mlp.; the layout is told from the tensors.
TEST(HfCheckpoint, TransformersV5PackedExpertsLoad) {
  for (const auto& [family, name] :
       {std::pair{HfFamily::kQwen3Moe, "qwen3_moe_like"},
        std::pair{HfFamily::kMixtral, "mixtral_like"}}) {
    for (DType storage : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(HfFamilyName(family), " ", DTypeName(storage)));
      auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                       ".safetensors");
      ASSERT_TRUE(c.ok()) << c.status();
      const std::string dir = testing::MakeTempDir(std::string(name) + "_v5_");
      HfWriteOptions o;
      o.family = family;
      o.layer = 1;
      o.shards = 4;
      o.storage = storage;
      o.layout = HfExpertLayout::kPacked;
      ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
      std::ifstream index(dir + "/model.safetensors.index.json");
      std::stringstream text;
      text << index.rdbuf();
      EXPECT_NE(text.str().find("\"model.layers.1.mlp.experts.gate_up_proj\""),
                std::string::npos);
      EXPECT_NE(text.str().find("\"model.layers.1.mlp.gate.weight\""),
                std::string::npos);
      EXPECT_EQ(text.str().find("experts.0."), std::string::npos);
      EXPECT_EQ(text.str().find("block_sparse_moe"), std::string::npos);
      const bool bf16 = storage == DType::kBF16;
      auto out = RunCheckpoint(dir, 1, c->x, c->tokens,
                               bf16 ? WeightDType::kBF16 : WeightDType::kF32);
      ASSERT_TRUE(out.ok()) << out.status();
      if (bf16) {
        EXPECT_TRUE(testing::AllClose(out->y, c->y, testing::kBf16Tol));
      } else {
        ExpectGolden(*c, *out, testing::kF32Tol);
      }
      fs::remove_all(dir);
    }
  }
}

// DeepSeek-V4 as released mixes hash-routed first layers (tid2eid, no
// correction bias) with top-k layers (the bias): layers 0-1 hash
// (deepseek_v4_hash's weights at 1), 2-3 top-k (deepseek_v4_like's at 2),
// all loaded in one process, each layer routed by its own config. Unquantised
// and as released (fp4 experts, fp8 shared expert).
TEST(HfCheckpoint, DeepseekV4HashAndTopKLayersInOneModel) {
  for (bool released : {false, true}) {
    SCOPED_TRACE(released ? "released" : "unquantised");
    const std::string dir = testing::MakeTempDir("dsv4_mixed_");
    auto m = testing::WriteDeepseekV4Mixed(dir, released);
    ASSERT_TRUE(m.ok()) << m.status();
    const GoldenCase* hash = &m->hash;
    const GoldenCase* topk = &m->topk;
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const ModelInfo& info = (*ckpt)->info();
    EXPECT_EQ(info.moe_layers, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(info.HashLayers(), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(info.LayerConfig(1), hash->config);
    EXPECT_EQ(info.LayerConfig(2), topk->config);
    // A hash layer has no correction bias, a top-k layer no tid2eid.
    EXPECT_EQ((*ckpt)->Get(0, WeightRole::kExpertBias, -1).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ((*ckpt)->Get(3, WeightRole::kTid2Eid, -1).status().code(),
              absl::StatusCode::kNotFound);
    auto moe = LocalMoe::Create(
        **ckpt, "cpu", released ? WeightDType::kAuto : WeightDType::kF32, 2,
        64);
    ASSERT_TRUE(moe.ok()) << moe.status();
    auto run = [&](int64_t layer, const GoldenCase& c,
                   const std::vector<int64_t>& ids) -> absl::StatusOr<Output> {
      Output out;
      out.y.resize(c.x.size());
      MOE_RETURN_IF_ERROR((*moe)->Forward(layer, c.x.data(),
                                          {.n = c.tokens, .token_ids = ids},
                                          out.y.data(), &out.routing));
      return out;
    };
    auto h = run(1, *hash, hash->token_ids);
    ASSERT_TRUE(h.ok()) << h.status();
    ExpectGolden(*hash, *h, testing::kF32Tol);
    auto t = run(2, *topk, {});
    ASSERT_TRUE(t.ok()) << t.status();
    ExpectGolden(*topk, *t, testing::kF32Tol);
    // A top-k layer ignores token ids it is given.
    auto t_ids = run(2, *topk, std::vector<int64_t>(topk->tokens, 7));
    ASSERT_TRUE(t_ids.ok()) << t_ids.status();
    EXPECT_EQ(t_ids->y, t->y);
    // Layer 0 (filler weights) routes by its own table: row v of the
    // writer's filler tid2eid is (v + j) % E, in stored order.
    auto h0 = run(0, *hash, hash->token_ids);
    ASSERT_TRUE(h0.ok()) << h0.status();
    const int64_t E = hash->config.num_experts, k = hash->config.top_k;
    for (int64_t n = 0; n < hash->tokens; ++n) {
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(h0->routing.expert[n * h0->routing.slots + j],
                  (hash->token_ids[n] + j) % E)
            << "token " << n << " slot " << j;
      }
    }
    EXPECT_TRUE(run(3, *topk, {}).ok());
    // A hash layer without its ids is refused, naming the field.
    auto bad = run(1, *hash, {});
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("token_ids"), std::string::npos)
        << bad.status();
    fs::remove_all(dir);
  }
}

TEST(HfCheckpoint, UnshardedFileWithoutIndex) {
  MoeLayerConfig k;
  k.hidden = 24;
  k.inter = 10;
  k.num_experts = 6;
  k.top_k = 2;
  auto c = testing::RandomCase(k, 13, 1);
  const std::string dir = testing::MakeTempDir("single_");
  HfWriteOptions o;
  o.family = HfFamily::kMixtral;
  o.shards = 1;
  o.write_index = false;
  ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
  ASSERT_TRUE(fs::exists(fs::path(dir) / "model.safetensors"));
  auto out = RunCheckpoint(dir, o.layer, c.x, c.tokens, WeightDType::kF32);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectGolden(c, *out, testing::kF32Tol);
  fs::remove_all(dir);
}

TEST(HfCheckpoint, F16StorageLoads) {
  MoeLayerConfig k;
  k.hidden = 32;
  k.inter = 16;
  k.num_experts = 4;
  k.top_k = 2;
  auto c = testing::RandomCase(k, 9, 2);
  const std::string dir = testing::MakeTempDir("f16_");
  HfWriteOptions o;
  o.family = HfFamily::kQwen3Moe;
  o.storage = DType::kF16;
  ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
  auto out = RunCheckpoint(dir, o.layer, c.x, c.tokens, WeightDType::kF32);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(testing::AllClose(out->y, c.y, {5e-3, 5e-3}));
  fs::remove_all(dir);
}

TEST(HfCheckpoint, MissingTensorIsNamed) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 1;
  auto c = testing::RandomCase(k, 2, 3);
  const std::string dir = testing::MakeTempDir("missing_");
  HfWriteOptions o;
  o.family = HfFamily::kOlmoe;
  o.shards = 1;
  o.write_index = false;
  ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
  // Rewrite the config to claim more experts than the file holds.
  std::string cfg = testing::HfConfigJson(
      [&] {
        auto m = k;
        m.num_experts = 5;
        return m;
      }(),
      HfFamily::kOlmoe, o.layer + 2);
  std::ofstream(fs::path(dir) / "config.json") << cfg;
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto w = LoadLayerWeights(**ckpt, o.layer, {});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("gate.weight"), std::string::npos)
      << w.status();
  fs::remove_all(dir);
}

TEST(HfCheckpoint, NonMoeLayerIsNotFound) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 1;
  auto c = testing::RandomCase(k, 2, 4);
  const std::string dir = testing::MakeTempDir("dense_");
  HfWriteOptions o;
  o.family = HfFamily::kDeepseekV2;
  ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{1, 2}));
  auto w = LoadLayerWeights(**ckpt, 0, {});  // first_k_dense_replace = 1
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(HfCheckpoint, Fp8BlockQuantisedWeightsAreDequantised) {
  // DeepSeek-V3 stores experts as F8_E4M3 with one fp32 scale per 128x128
  // block (weight_scale_inv). Build such a checkpoint by hand.
  MoeLayerConfig k;
  k.hidden = 130;  // two column blocks, the second partial
  k.inter = 20;
  k.num_experts = 2;
  k.top_k = 1;
  k.score_func = ScoreFunc::kSigmoid;
  k.use_bias = true;
  k.route_norm = false;
  auto c = testing::RandomCase(k, 4, 5);
  // Quantise every expert weight: values exactly representable in E4M3
  // times a per-block scale.
  const float scales[2] = {0.01f, 0.002f};
  auto quantise = [&](std::vector<float>& w, int64_t rows, int64_t cols,
                      std::vector<uint8_t>* q, std::vector<float>* s) {
    const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
    s->assign(br * bc, 0);
    for (int64_t i = 0; i < br * bc; ++i) (*s)[i] = scales[i % 2];
    q->resize(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const uint8_t bits = static_cast<uint8_t>((i * 7 + j * 3) % 0x50);
        (*q)[i * cols + j] = bits;
        w[i * cols + j] = F8E4M3ToF32(bits) * (*s)[(i / 128) * bc + j / 128];
      }
    }
  };
  // MiMo-V2-Flash ships the same FP8 layout under its own model_type.
  for (HfFamily family : {HfFamily::kDeepseekV3, HfFamily::kMimoV2Flash}) {
    SCOPED_TRACE(HfFamilyName(family));
    const std::string dir = testing::MakeTempDir("fp8_");
    HfWriteOptions o;
    o.family = family;
    o.shards = 1;
    o.write_index = false;
    ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
    // Replace the file with one whose layer-1 experts are FP8.
    auto f =
        SafetensorsFile::Open((fs::path(dir) / "model.safetensors").string());
    ASSERT_TRUE(f.ok());
    SafetensorsWriter out;
    for (const auto& t : (*f)->header().tensors) {
      auto ref = (*f)->Get(t.name);
      bool replaced = false;
      for (int64_t e = 0; e < k.num_experts; ++e) {
        for (WeightRole r :
             {WeightRole::kW1, WeightRole::kW3, WeightRole::kW2}) {
          if (t.name != HfTensorName(family, 1, r, e)) continue;
          std::vector<float>& src = r == WeightRole::kW1   ? c.w1
                                    : r == WeightRole::kW3 ? c.w3
                                                           : c.w2;
          std::vector<float> w(src.begin() + e * k.inter * k.hidden,
                               src.begin() + (e + 1) * k.inter * k.hidden);
          std::vector<uint8_t> q;
          std::vector<float> s;
          quantise(w, t.shape[0], t.shape[1], &q, &s);
          std::copy(w.begin(), w.end(), src.begin() + e * k.inter * k.hidden);
          out.Add(t.name, DType::kF8E4M3, t.shape, q.data(), q.size());
          out.AddF32(t.name + "_scale_inv",
                     {(t.shape[0] + 127) / 128, (t.shape[1] + 127) / 128}, s);
          replaced = true;
        }
      }
      if (!replaced)
        out.Add(t.name, t.dtype, t.shape, ref->data, ref->nbytes());
    }
    f->reset();
    ASSERT_TRUE(
        out.WriteFile((fs::path(dir) / "model.safetensors").string()).ok());
    testing::RunReferenceMoe(c);
    auto res = RunCheckpoint(dir, 1, c.x, c.tokens, WeightDType::kF32);
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_TRUE(testing::AllClose(res->y, c.y, testing::kF32Tol));
    fs::remove_all(dir);
  }
}

// A DeepSeek-V3 FP8 checkpoint (F8_E4M3 experts with weight_scale_inv,
// blocks at the edges smaller than 128, quantization_config in config.json)
// kept FP8 in memory, or left to auto, gives the dequantised reference's
// routing and y at fp32 tolerance; so does dequantising it to fp32.
TEST(HfCheckpoint, Fp8CheckpointStaysFp8AndMatchesTheDequantisedReference) {
  MoeLayerConfig k;
  k.hidden = 300;  // column blocks 128, 128, 44
  k.inter = 140;   // row blocks 128, 12 of the gate/up weights
  k.num_experts = 4;
  k.top_k = 2;
  k.shared_inter = 280;  // two shared experts of 140
  k.score_func = ScoreFunc::kSigmoid;
  k.use_bias = true;
  k.route_norm = true;
  auto c = testing::RandomCase(k, 9, 13);
  const auto families = testing::FamiliesFor(k);
  ASSERT_NE(std::find(families.begin(), families.end(), HfFamily::kDeepseekV3),
            families.end());
  testing::RoundTripExpertsThroughFp8(&c);
  const std::string dir = testing::MakeTempDir("fp8ckpt_");
  ASSERT_TRUE(testing::WriteFp8Checkpoint(c, 1, dir).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto w1 = (*ckpt)->Get(1, WeightRole::kW1, 0);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(w1->dtype, DType::kF8E4M3);
  EXPECT_EQ(w1->block_scale.size(), 2u * 3u);
  EXPECT_EQ(*ResolveWeightDType(WeightDType::kAuto, **ckpt), WeightDType::kFP8);
  LoadOptions auto_opts;
  auto_opts.dtype = WeightDType::kAuto;
  auto lw = LoadLayerWeights(**ckpt, 1, auto_opts);
  ASSERT_TRUE(lw.ok()) << lw.status();
  EXPECT_EQ((*lw)->dtype, WeightDType::kFP8);
  EXPECT_EQ((*lw)->shared.w2.format, kernels::cpu::WeightFormat::kFP8);
  for (WeightDType d :
       {WeightDType::kFP8, WeightDType::kAuto, WeightDType::kF32}) {
    SCOPED_TRACE(WeightDTypeName(d));
    auto out = RunCheckpoint(dir, 1, c.x, c.tokens, d);
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectGolden(c, *out, testing::kF32Tol);
  }
  fs::remove_all(dir);
}

TEST(HfCheckpoint, BadFp8BlockSizeIsRejected) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 2;
  k.top_k = 1;
  k.score_func = ScoreFunc::kSigmoid;
  k.use_bias = true;
  k.route_norm = false;
  auto c = testing::RandomCase(k, 2, 3);
  const std::string dir = testing::MakeTempDir("fp8bad_");
  ASSERT_TRUE(testing::WriteFp8Checkpoint(c, 1, dir).ok());
  const fs::path config = fs::path(dir) / "config.json";
  std::stringstream text;
  text << std::ifstream(config).rdbuf();
  std::string t = text.str();
  const size_t at = t.find("\"weight_block_size\"");
  ASSERT_NE(at, std::string::npos);
  t.replace(t.find('[', at), t.find(']', at) - t.find('[', at) + 1, "[128]");
  std::ofstream(config) << t;
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("weight_block_size"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(HfCheckpoint, EveryMoeLayerLoadsItsOwnWeights) {
  // Mixtral: every layer is MoE; layer 0 holds filler, layer 1 the case.
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 2;
  auto c = testing::RandomCase(k, 6, 6);
  const std::string dir = testing::MakeTempDir("layers_");
  HfWriteOptions o;
  o.family = HfFamily::kMixtral;
  ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
  auto l1 = RunCheckpoint(dir, 1, c.x, c.tokens, WeightDType::kF32);
  auto l0 = RunCheckpoint(dir, 0, c.x, c.tokens, WeightDType::kF32);
  ASSERT_TRUE(l1.ok() && l0.ok());
  EXPECT_TRUE(testing::AllClose(l1->y, c.y, testing::kF32Tol));
  EXPECT_FALSE(testing::AllClose(l0->y, c.y, testing::kF32Tol));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe
