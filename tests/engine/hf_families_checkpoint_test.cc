// The 2026 families as checkpoints beyond their golden cases: Kimi K2's 384
// experts, Llama 4's fused experts in bf16, MTP layers left alone, Nemotron
// 3's hybrid layer stack, Kimi K3's compressed-tensors MXFP4 experts, and
// bad checkpoints refused naming what is wrong.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/hf_checkpoint.h"
#include "core/safetensors.h"
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
      (*moe)->Forward(layer, c.x.data(), {.n = c.tokens}, y.data(), routing);
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

// transformers v5's packed experts (qwen3_5_moe always, qwen3_moe when
// saved so): a mis-shaped gate_up_proj or down_proj is refused naming it
// and the shape expected, and a checkpoint with neither layout's experts is
// refused when opened, naming the tensor of each.
TEST(HfFamilyCheckpoint, PackedExpertsMisShapedOrMissingAreNamed) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 2;
  k.route_norm = true;
  auto plain = testing::RandomCase(k, 4, 9);
  k.shared_inter = 8;
  k.shared_gate = true;
  auto shared = testing::RandomCase(k, 4, 10);
  struct Bad {
    HfFamily family;
    const GoldenCase* c;
    std::string name;
    std::vector<int64_t> shape;
    const char* expected;
  };
  const Bad bad[] = {
      {HfFamily::kQwen35Moe,
       &shared,
       "model.language_model.layers.1.mlp.experts.gate_up_proj",
       {4, 8, 16},
       "expected [4, 16, 16]"},
      {HfFamily::kQwen3Moe,
       &plain,
       "model.layers.1.mlp.experts.gate_up_proj",
       {4, 16, 8},
       "expected [4, 16, 16]"},
      {HfFamily::kMixtral,
       &plain,
       "model.layers.1.mlp.experts.down_proj",
       {4, 8, 16},
       "expected [4, 16, 8]"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    const std::string dir = testing::MakeTempDir("packedshape_");
    HfWriteOptions o;
    o.family = b.family;
    o.layout = HfExpertLayout::kPacked;
    ASSERT_TRUE(testing::WriteHfCheckpoint(*b.c, o, dir).ok());
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, b.name, b.shape).ok());
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto w = LoadLayerWeights(**ckpt, 1, {});
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find(b.name), std::string::npos)
        << w.status();
    EXPECT_NE(w.status().message().find(b.expected), std::string::npos)
        << w.status();
    fs::remove_all(dir);
  }
  // Neither one tensor per expert nor the packed ones.
  const std::string dir = testing::MakeTempDir("packedmiss_");
  HfWriteOptions o;
  o.family = HfFamily::kQwen3Moe;
  o.layout = HfExpertLayout::kPacked;
  ASSERT_TRUE(testing::WriteHfCheckpoint(plain, o, dir).ok());
  ASSERT_TRUE(testing::ReplaceHfTensor(
                  dir, "model.layers.1.mlp.experts.gate_up_proj", {})
                  .ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kNotFound);
  for (const char* name :
       {"model.layers.1.mlp.experts.0.gate_proj.weight",
        "model.layers.1.mlp.experts.gate_up_proj", "[4, 16, 16]"}) {
    EXPECT_NE(ckpt.status().message().find(name), std::string::npos)
        << ckpt.status();
  }
  fs::remove_all(dir);
}

// A one-file checkpoint of `config` holding `tensors` (F32 unless given).
struct RawTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  DType dtype = DType::kF32;
};

std::string WriteRaw(const char* prefix, const std::string& config,
                     const std::vector<RawTensor>& tensors) {
  const std::string dir = testing::MakeTempDir(prefix);
  SafetensorsWriter w;
  for (const auto& t : tensors) {
    if (t.dtype == DType::kI32) {
      std::vector<int32_t> v(t.values.begin(), t.values.end());
      w.Add(t.name, DType::kI32, t.shape, v.data(), v.size() * 4);
    } else if (t.dtype == DType::kU8) {
      std::vector<uint8_t> v(t.values.size(), 0);
      w.Add(t.name, DType::kU8, t.shape, v.data(), v.size());
    } else {
      w.AddF32(t.name, t.shape, t.values);
    }
  }
  EXPECT_TRUE(w.WriteFile(dir + "/model.safetensors").ok());
  std::ofstream(dir + "/config.json") << config;
  return dir;
}

std::vector<float> Iota(int64_t n, float base) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

std::vector<float> AsF32(const WeightTensor& t) {
  std::vector<float> v(t.numel());
  EXPECT_TRUE(ConvertToF32(t.dtype, t.data, v.size(), v.data()));
  return v;
}

constexpr char kGptOssConfig[] =
    R"({"architectures":["GptOssForCausalLM"],"model_type":"gpt_oss",
  "hidden_size":4,"num_hidden_layers":1,"intermediate_size":2,
  "num_local_experts":3,"num_experts_per_tok":2,"swiglu_limit":7.0})";

std::vector<RawTensor> GptOssTensors() {
  const int64_t E = 3, H = 4, I = 2;
  const std::string m = "model.layers.0.mlp.";
  return {
      {m + "router.weight", {E, H}, Iota(E * H, 0)},
      {m + "router.bias", {E}, Iota(E, 50)},
      {m + "experts.gate_up_proj", {E, H, 2 * I}, Iota(E * H * 2 * I, 100)},
      {m + "experts.gate_up_proj_bias", {E, 2 * I}, Iota(E * 2 * I, 300)},
      {m + "experts.down_proj", {E, I, H}, Iota(E * I * H, 400)},
      {m + "experts.down_proj_bias", {E, H}, Iota(E * H, 500)},
      {"model.layers.0.self_attn.sinks", {2}, {0, 0}},
      {"model.embed_tokens.weight", {8, H}, Iota(8 * H, 0)},
  };
}

// gpt-oss (dequantised): gate and up interleaved on the 2I axis of the x·W
// tensor and of its bias; down_proj [E, I, H] transposed to [H, I].
TEST(HfFamilyCheckpoint, GptOssInterleavedExpertsMapToTheirRoles) {
  const std::string dir = WriteRaw("gptoss_", kGptOssConfig, GptOssTensors());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const int64_t H = 4, I = 2;
  const int64_t e = 1;
  auto w1 = (*ckpt)->Get(0, WeightRole::kW1, e);
  auto w3 = (*ckpt)->Get(0, WeightRole::kW3, e);
  auto w2 = (*ckpt)->Get(0, WeightRole::kW2, e);
  auto b1 = (*ckpt)->Get(0, WeightRole::kB1, e);
  auto b3 = (*ckpt)->Get(0, WeightRole::kB3, e);
  auto b2 = (*ckpt)->Get(0, WeightRole::kB2, e);
  ASSERT_TRUE(w1.ok() && w3.ok() && w2.ok() && b1.ok() && b3.ok() && b2.ok())
      << w1.status() << b1.status();
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{I, H}));
  EXPECT_EQ(w2->shape, (std::vector<int64_t>{H, I}));
  EXPECT_EQ(b1->shape, (std::vector<int64_t>{I}));
  EXPECT_EQ(b2->shape, (std::vector<int64_t>{H}));
  const auto g = AsF32(*w1), u = AsF32(*w3), d = AsF32(*w2);
  const auto gb = AsF32(*b1), ub = AsF32(*b3), db = AsF32(*b2);
  for (int64_t j = 0; j < I; ++j) {
    for (int64_t h = 0; h < H; ++h) {
      const float base = 100 + static_cast<float>((e * H + h) * 2 * I);
      EXPECT_EQ(g[j * H + h], base + 2 * j);
      EXPECT_EQ(u[j * H + h], base + 2 * j + 1);
      EXPECT_EQ(d[h * I + j], 400 + static_cast<float>((e * I + j) * H + h));
    }
    EXPECT_EQ(gb[j], 300 + static_cast<float>(e * 2 * I + 2 * j));
    EXPECT_EQ(ub[j], 300 + static_cast<float>(e * 2 * I + 2 * j + 1));
  }
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_EQ(db[h], 500 + static_cast<float>(e * H + h));
  }
  auto lw = LoadLayerWeights(**ckpt, 0, {});
  ASSERT_TRUE(lw.ok()) << lw.status();
  EXPECT_EQ((*lw)->router_bias, (std::vector<float>{50, 51, 52}));
  ASSERT_EQ((*lw)->experts.size(), 3u);
  EXPECT_EQ((*lw)->experts[2].b3,
            (std::vector<float>{300 + 2 * 4 + 1, 300 + 2 * 4 + 3}));
  fs::remove_all(dir);
}

// The test writer's gpt-oss layout read back: every role of every expert
// is the case's weight (what the golden test relies on once the 2026 math
// computes gptoss_like).
TEST(HfFamilyCheckpoint, GptOssWriterRoundTripsEveryRole) {
  MoeLayerConfig k;
  k.hidden = 8;
  k.inter = 4;
  k.num_experts = 4;
  k.top_k = 2;
  auto c = testing::RandomCase(k, 2, 31);
  c.config.score_func = ScoreFunc::kTopkSoftmax;
  c.config.route_norm = false;
  c.config.router_bias = true;
  c.config.expert_bias = true;
  c.config.act = Activation::kGptOss;
  c.router_bias = Iota(4, 0.5f);
  c.b1 = Iota(16, 10);
  c.b3 = Iota(16, 30);
  c.b2 = Iota(32, 50);
  const std::string dir = Write(c, HfFamily::kGptOss, "gptoss_rt_");
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().layer, c.config);
  auto rb = (*ckpt)->Get(1, WeightRole::kRouterBias, -1);
  ASSERT_TRUE(rb.ok()) << rb.status();
  EXPECT_EQ(AsF32(*rb), c.router_bias);
  auto slice = [](const std::vector<float>& v, int64_t e, int64_t n) {
    return std::vector<float>(v.begin() + e * n, v.begin() + (e + 1) * n);
  };
  for (int64_t e = 0; e < 4; ++e) {
    SCOPED_TRACE(e);
    const std::pair<WeightRole, std::vector<float>> want[] = {
        {WeightRole::kW1, slice(c.w1, e, 32)},
        {WeightRole::kW3, slice(c.w3, e, 32)},
        {WeightRole::kW2, slice(c.w2, e, 32)},
        {WeightRole::kB1, slice(c.b1, e, 4)},
        {WeightRole::kB3, slice(c.b3, e, 4)},
        {WeightRole::kB2, slice(c.b2, e, 8)},
    };
    for (const auto& [role, values] : want) {
      auto t = (*ckpt)->Get(1, role, e);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(AsF32(*t), values) << WeightRoleName(role);
    }
  }
  fs::remove_all(dir);
}

// gpt-oss as released reads its MXFP4 *_blocks with their *_scales
// (tests/core/hf_released_test.cc); blocks without scales are refused when
// the experts load, naming the missing tensor.
TEST(HfFamilyCheckpoint, GptOssMxfp4BlocksWithoutScalesAreRefusedByName) {
  const int64_t E = 3, H = 64, I = 32;
  const std::string m = "model.layers.0.mlp.";
  std::string config = kGptOssConfig;
  config.replace(config.find("\"hidden_size\":4"), 15, "\"hidden_size\":64");
  config.replace(config.find("\"intermediate_size\":2"), 21,
                 "\"intermediate_size\":32");
  config.insert(config.size() - 1,
                R"(,"quantization_config":{"quant_method":"mxfp4"})");
  const std::string dir = WriteRaw(
      "gptoss_mxfp4_", config,
      {{m + "router.weight", {E, H}, Iota(E * H, 0)},
       {m + "router.bias", {E}, Iota(E, 0)},
       {m + "experts.gate_up_proj_blocks",
        {E, 2 * I, H / 32, 16},
        std::vector<float>(E * 2 * I * H / 2, 0),
        DType::kU8},
       {m + "experts.gate_up_proj_bias", {E, 2 * I}, Iota(E * 2 * I, 0)}});
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto lw = LoadLayerWeights(**ckpt, 0, {});
  ASSERT_FALSE(lw.ok());
  EXPECT_NE(lw.status().message().find("gate_up_proj_scales"),
            std::string::npos)
      << lw.status();
  fs::remove_all(dir);
}

std::string DeepseekV4Config(int64_t hash_layers) {
  return absl::StrCat(
      R"({"model_type":"deepseek_v4","architectures":["DeepseekV4ForCausalLM"],
  "hidden_size":4,"num_hidden_layers":1,"vocab_size":5,"n_routed_experts":3,
  "num_experts_per_tok":2,"moe_intermediate_size":2,"n_shared_experts":1,
  "scoring_func":"sqrtsoftplus","routed_scaling_factor":1.5,"swiglu_limit":10.0,
  "num_hash_layers":)",
      hash_layers, "}");
}

std::vector<RawTensor> DeepseekV4Tensors(bool hash) {
  const int64_t E = 3, H = 4, I = 2;
  std::vector<RawTensor> t = {
      {"layers.0.ffn.gate.weight", {E, H}, Iota(E * H, 0)},
      {"layers.0.ffn.shared_experts.w1.weight", {I, H}, Iota(I * H, 10)},
      {"layers.0.ffn.shared_experts.w3.weight", {I, H}, Iota(I * H, 20)},
      {"layers.0.ffn.shared_experts.w2.weight", {H, I}, Iota(I * H, 30)},
      {"layers.0.attn.wq.weight", {H, H}, Iota(H * H, 0)},
      {"embed.weight", {5, H}, Iota(5 * H, 0)},
      // The MTP module: never an MoE layer of the model.
      {"mtp.0.ffn.gate.weight", {E, H}, Iota(E * H, 0)},
  };
  if (hash) {
    t.push_back({"layers.0.ffn.gate.tid2eid",
                 {5, 2},
                 {0, 1, 1, 2, 2, 0, 0, 2, 1, 0},
                 DType::kI32});
  } else {
    t.push_back({"layers.0.ffn.gate.bias", {E}, {0.5f, -0.5f, 0.0f}});
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = absl::StrCat("layers.0.ffn.experts.", e, ".");
    t.push_back({p + "w1.weight", {I, H}, Iota(I * H, 100 * e)});
    t.push_back({p + "w3.weight", {I, H}, Iota(I * H, 100 * e + 10)});
    t.push_back({p + "w2.weight", {H, I}, Iota(I * H, 100 * e + 20)});
  }
  return t;
}

// DeepSeek-V4's upstream names (no "model." prefix), top-k and hash models.
TEST(HfFamilyCheckpoint, DeepseekV4UpstreamNamesLoad) {
  for (bool hash : {false, true}) {
    SCOPED_TRACE(hash ? "hash" : "top-k");
    const std::string dir = WriteRaw("dsv4_", DeepseekV4Config(hash ? 1 : 0),
                                     DeepseekV4Tensors(hash));
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{0}));
    auto lw = LoadLayerWeights(**ckpt, 0, {});
    ASSERT_TRUE(lw.ok()) << lw.status();
    EXPECT_TRUE((*lw)->has_shared);
    if (hash) {
      EXPECT_EQ((*lw)->tid2eid,
                (std::vector<int32_t>{0, 1, 1, 2, 2, 0, 0, 2, 1, 0}));
    } else {
      EXPECT_EQ((*lw)->expert_bias, (std::vector<float>{0.5f, -0.5f, 0.0f}));
    }
    fs::remove_all(dir);
  }
}

// DeepSeek-V4's `.scale` belongs to an I8 (fp4) or F8_E4M3 weight
// (tests/core/hf_released_test.cc reads both); beside an f32 weight it is
// refused when the experts load, naming the weight and the scale.
TEST(HfFamilyCheckpoint, DeepseekV4ScaleOfAnUnquantisedWeightIsRefused) {
  auto tensors = DeepseekV4Tensors(false);
  tensors.push_back(
      {"layers.0.ffn.experts.0.w1.scale", {2, 1}, {0, 0}, DType::kU8});
  const std::string dir = WriteRaw("dsv4_fp4_", DeepseekV4Config(0), tensors);
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto lw = LoadLayerWeights(**ckpt, 0, {});
  ASSERT_FALSE(lw.ok());
  EXPECT_NE(lw.status().message().find("layers.0.ffn.experts.0.w1.scale"),
            std::string::npos)
      << lw.status();
  EXPECT_NE(lw.status().message().find("expected I8 (fp4) or F8_E4M3"),
            std::string::npos)
      << lw.status();
  fs::remove_all(dir);
}

// ERNIE 4.5's layout (moe_k, moe_statics bias [1, E], shared experts,
// layer 0 dense) with norm_min 0, which the pre-2026 math computes.
TEST(HfFamilyCheckpoint, Ernie45LayoutLoadsAndMatches) {
  MoeLayerConfig k;
  k.hidden = 32;
  k.inter = 16;
  k.num_experts = 8;
  k.top_k = 3;
  k.use_bias = true;
  k.route_norm = true;
  k.shared_inter = 32;
  auto c = testing::RandomCase(k, 12, 21);
  const std::string dir = Write(c, HfFamily::kErnie45Moe, "ernie_");
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{1, 2}));
  auto bias = (*ckpt)->Get(1, WeightRole::kExpertBias, -1);
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias->shape, (std::vector<int64_t>{1, 8}));
  Routing routing;
  auto y = RunLayer(dir, 1, c, WeightDType::kF32, &routing);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, c.y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, routing.expert,
                                        routing.weight, c.tokens, k.top_k,
                                        routing.slots));
  fs::remove_all(dir);
}

TEST(HfFamilyCheckpoint, UnknownModelTypeAndQuantisationAreRefusedAtOpen) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 2;
  auto c = testing::RandomCase(k, 4, 9);
  const std::string dir = Write(c, HfFamily::kMixtral, "unknown_");
  ASSERT_TRUE(testing::SetHfConfigKey(dir, "model_type", R"("nllb-moe")").ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("'nllb-moe'"), std::string::npos);
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

absl::StatusOr<GoldenCase> Golden(const char* name) {
  return testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                 ".safetensors");
}

// Nemotron 3 as released: backbone.layers.{L}.mixer.*, MoE layers from
// hybrid_override_pattern among Mamba, attention and dense MLP layers (and
// from transformers v5's layers_block_type), MTP under mtp.* not read.
TEST(HfFamilyCheckpoint, NemotronHMoeLayersFromTheHybridPattern) {
  auto c = Golden("nemotron3_latent");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("nemotron_h_");
  HfWriteOptions o;
  o.family = HfFamily::kNemotronH;
  o.layer = 5;  // 7 layers: M E * E - E M
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  for (const char* key : {"hybrid_override_pattern", "layers_block_type"}) {
    SCOPED_TRACE(key);
    if (std::string(key) == "layers_block_type") {
      ASSERT_TRUE(
          testing::SetHfConfigKey(dir, "hybrid_override_pattern", "null").ok());
      ASSERT_TRUE(testing::SetHfConfigKey(
                      dir, "layers_block_type",
                      R"(["mamba", "moe", "full_attention", "moe", "mlp", "moe",
                  "mamba"])")
                      .ok());
    }
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{1, 3, 5}));
    EXPECT_EQ((*ckpt)->info().layer, c->config);
    Routing routing;
    auto y = RunLayer(dir, 5, *c, WeightDType::kF32, &routing);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(testing::AllClose(*y, c->y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, routing.expert,
                                          routing.weight, c->tokens,
                                          c->config.top_k, routing.slots));
  }
  fs::remove_all(dir);
}

// mlp_bias also puts biases on the experts' and the shared expert's up /
// down projections, which the engine has no role for: zeros load, anything
// else is refused naming the tensor.
TEST(HfFamilyCheckpoint, NemotronHSharedExpertBiasMustBeZero) {
  auto c = Golden("nemotron3_latent");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = Write(*c, HfFamily::kNemotronH, "nemotron_bias_");
  const std::string bias =
      "backbone.layers.1.mixer.shared_experts.up_proj.bias";
  std::vector<uint8_t> zero(48 * 4, 0);
  // Index the bias beside the gate, in the gate's shard, then write it
  // there: an all-zero bias changes nothing.
  {
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::ifstream in(index);
    std::string text((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
    const std::string gate = "\"backbone.layers.1.mixer.gate.weight\": ";
    const size_t at = text.find(gate);
    ASSERT_NE(at, std::string::npos);
    const size_t q0 = text.find('"', at + gate.size());
    const size_t q1 = text.find('"', q0 + 1);
    const std::string shard = text.substr(q0, q1 - q0 + 1);
    text.insert(at, "\"" + bias + "\": " + shard + ",\n    ");
    std::ofstream(index) << text;
  }
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(dir, bias, DType::kF32, {48}, zero).ok());
  Routing routing;
  auto y = RunLayer(dir, 1, *c, WeightDType::kF32, &routing);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, c->y, testing::kF32Tol));
  std::vector<uint8_t> one = zero;
  const float v = 0.5f;
  std::memcpy(one.data() + 4 * 7, &v, 4);
  ASSERT_TRUE(
      testing::ReplaceHfTensorBytes(dir, bias, DType::kF32, {48}, one).ok());
  auto bad = RunLayer(dir, 1, *c, WeightDType::kF32, &routing);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(bias), std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("mlp_bias"), std::string::npos);
  fs::remove_all(dir);
}

// Kimi K3 as released: routed experts compressed-tensors MXFP4
// (weight_packed + weight_scale), kept 4-bit (auto resolves MXFP4), about a
// quarter of bf16's bytes, at the fp32 tolerance (the golden weights are
// exactly MXFP4); the shared experts, router and latent projections bf16.
TEST(HfFamilyCheckpoint, KimiK3CompressedTensorsMxfp4StaysFourBit) {
  auto c = Golden("kimi_k3_like");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("kimi_k3_mx_");
  HfWriteOptions o;
  o.family = HfFamily::kKimiK3;
  o.released = true;
  o.shards = 4;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ((*ckpt)->info().layer, c->config);
  EXPECT_EQ(*ResolveWeightDType(WeightDType::kAuto, **ckpt),
            WeightDType::kMXFP4);
  auto w1 = (*ckpt)->Get(1, WeightRole::kW1, 3);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_TRUE(w1->is_mxfp4());
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{32, 32}));  // [I, Lt]
  LoadOptions resolved, bf16;
  resolved.dtype = *ResolveWeightDType(WeightDType::kAuto, **ckpt);
  bf16.dtype = WeightDType::kBF16;
  auto mx = LoadLayerWeights(**ckpt, 1, resolved);
  auto b = LoadLayerWeights(**ckpt, 1, bf16);
  ASSERT_TRUE(mx.ok() && b.ok()) << mx.status() << " " << b.status();
  EXPECT_EQ((*mx)->dtype, WeightDType::kMXFP4);
  // 17/32 bytes a weight against bf16's 2: 0.27.
  EXPECT_EQ((*mx)->expert_bytes() * 64, (*b)->expert_bytes() * 17);
  Routing routing;
  auto y = RunLayer(dir, 1, *c, WeightDType::kAuto, &routing);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, c->y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, routing.expert,
                                        routing.weight, c->tokens,
                                        c->config.top_k, routing.slots));
  fs::remove_all(dir);
}

// Nemotron 3 as released in NVFP4 (NVIDIA ModelOpt): routed experts as
// code pairs, E4M3 scales per 16 inputs and a global scale, kept 4-bit
// (auto resolves NVFP4), about 0.28x of bf16's bytes, at the fp32
// tolerance (nemotron3_nvfp4's weights are exactly NVFP4); the router,
// shared expert and latent projections unquantised.
TEST(HfFamilyCheckpoint, Nemotron3ModelOptNvfp4StaysFourBit) {
  auto c = Golden("nemotron3_nvfp4");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("nemotron_nv_");
  HfWriteOptions o;
  o.family = HfFamily::kNemotronH;
  o.nvfp4_experts = true;
  o.shards = 3;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().layer, c->config);
  const int64_t layer = (*ckpt)->info().moe_layers.front();
  EXPECT_EQ(*ResolveWeightDType(WeightDType::kAuto, **ckpt),
            WeightDType::kNVFP4);
  auto w3 = (*ckpt)->Get(layer, WeightRole::kW3, 5);
  ASSERT_TRUE(w3.ok()) << w3.status();
  EXPECT_TRUE(w3->is_nvfp4());
  EXPECT_EQ(w3->shape, (std::vector<int64_t>{32, 32}));  // [I, Lt]
  LoadOptions resolved, bf16;
  resolved.dtype = WeightDType::kAuto;
  bf16.dtype = WeightDType::kBF16;
  auto nv = LoadLayerWeights(**ckpt, layer, resolved);
  auto b = LoadLayerWeights(**ckpt, layer, bf16);
  ASSERT_TRUE(nv.ok() && b.ok()) << nv.status() << " " << b.status();
  EXPECT_EQ((*nv)->dtype, WeightDType::kNVFP4);
  const double ratio = static_cast<double>((*nv)->expert_bytes()) /
                       static_cast<double>((*b)->expert_bytes());
  EXPECT_GT(ratio, 0.25);
  EXPECT_LT(ratio, 0.35) << "NVFP4 experts take " << ratio << " of bf16";
  Routing routing;
  auto y = RunLayer(dir, layer, *c, WeightDType::kAuto, &routing);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, c->y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, routing.expert,
                                        routing.weight, c->tokens,
                                        c->config.top_k, routing.slots));
  fs::remove_all(dir);
}

TEST(HfFamilyCheckpoint, KimiK3BadMxfp4ScaleIsRefusedByName) {
  auto c = Golden("kimi_k3_like");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string m =
      "language_model.model.layers.1.block_sparse_moe.experts.2.w3.";
  struct Bad {
    const char* what;
    DType dtype;
    std::vector<int64_t> shape;
  };
  for (const Bad& bad : {Bad{"shape", DType::kU8, {32, 2}},
                         Bad{"dtype", DType::kF32, {32, 1}}}) {
    SCOPED_TRACE(bad.what);
    const std::string dir = testing::MakeTempDir("kimi_k3_bad_");
    HfWriteOptions o;
    o.family = HfFamily::kKimiK3;
    o.released = true;
    ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
    const size_t bytes = 32 * (bad.dtype == DType::kF32 ? 4 : 2);
    ASSERT_TRUE(testing::ReplaceHfTensorBytes(dir, m + "weight_scale",
                                              bad.dtype, bad.shape,
                                              std::vector<uint8_t>(bytes, 127))
                    .ok());
    Routing routing;
    auto y = RunLayer(dir, 1, *c, WeightDType::kAuto, &routing);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find(m + "weight_scale"), std::string::npos)
        << y.status();
    fs::remove_all(dir);
  }
}

// Bad checkpoints of the three families fail at load, saying what is
// wrong: a missing tensor by name, a latent projection of the wrong shape
// with the shape expected and the config key of the latent width, an
// unknown model_type with the supported ones.
TEST(HfFamilyCheckpoint, LatentFamiliesBadInputIsNamed) {
  {
    auto c = Golden("nemotron3_latent");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string dir = Write(*c, HfFamily::kNemotronH, "nemotron_miss_");
    const std::string gone = "backbone.layers.1.mixer.fc2_latent_proj.weight";
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, gone, {}).ok());
    Routing routing;
    auto y = RunLayer(dir, 1, *c, WeightDType::kF32, &routing);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find(gone), std::string::npos) << y.status();
    fs::remove_all(dir);
  }
  {
    auto c = Golden("kimi_k3_like");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string dir = Write(*c, HfFamily::kKimiK3, "kimi_shape_");
    const std::string proj =
        "language_model.model.layers.1.block_sparse_moe."
        "routed_expert_down_proj.weight";
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, proj, {33, 64}).ok());
    Routing routing;
    auto y = RunLayer(dir, 1, *c, WeightDType::kF32, &routing);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find(proj), std::string::npos) << y.status();
    EXPECT_NE(y.status().message().find("[32, 64]"), std::string::npos)
        << y.status();
    // The rows of the H -> latent projection are the configured latent
    // width: the refusal names the key that gives it and what was found.
    EXPECT_NE(y.status().message().find(
                  "config key 'routed_expert_hidden_size' is 32"),
              std::string::npos)
        << y.status();
    EXPECT_NE(y.status().message().find("found latent width 33"),
              std::string::npos)
        << y.status();
    fs::remove_all(dir);
  }
  {
    auto c = Golden("gemma4_like");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string dir = Write(*c, HfFamily::kGemma4, "gemma_type_");
    ASSERT_TRUE(testing::SetHfConfigKey(dir, "model_type", "\"gemma5\"").ok());
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_NE(ckpt.status().message().find("'gemma5'"), std::string::npos);
    EXPECT_NE(ckpt.status().message().find("gemma4"), std::string::npos)
        << ckpt.status();
    fs::remove_all(dir);
  }
}

// The Mixtral / Qwen-style families with layouts of their own, each from a
// checkpoint in that layout against the reference MoE: Aria (x·W fc1 / fc2,
// shared experts), Granite (packed input_linear / output_linear, the fused
// shared input_linear), Jamba (no renorm), Arctic (every second layer MoE
// beside its residual MLP), DBRX (per-role rows [E*I, H]), Hunyuan (its
// shared MLP, per-layer lists) and Qwen3-VL-MoE's fused experts in bf16.
MoeLayerConfig SharedSoftmaxConfig(int64_t shared_inter) {
  MoeLayerConfig k;
  k.hidden = 24;
  k.inter = 16;
  k.num_experts = 6;
  k.top_k = 2;
  k.score_func = ScoreFunc::kSoftmax;
  k.route_norm = true;
  k.shared_inter = shared_inter;
  return k;
}

TEST(HfFamilyCheckpoint, SharedExpertFamiliesLoadAndMatch) {
  struct Run {
    HfFamily family;
    int64_t shared_inter;
    bool route_norm = true;
  };
  for (const Run& run :
       {Run{HfFamily::kAria, 32}, Run{HfFamily::kGraniteMoeShared, 40},
        Run{HfFamily::kGraniteMoeHybrid, 40}, Run{HfFamily::kGraniteMoe, 0},
        Run{HfFamily::kJamba, 0, false}, Run{HfFamily::kArctic, 0},
        Run{HfFamily::kDbrx, 0}, Run{HfFamily::kHunyuanV1Moe, 16}}) {
    SCOPED_TRACE(HfFamilyName(run.family));
    MoeLayerConfig k = SharedSoftmaxConfig(run.shared_inter);
    k.route_norm = run.route_norm;
    auto c = testing::RandomCase(k, 12, 21);
    const std::string dir = Write(c, run.family, "sharedfam_");
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->info().layer, c.config);
    if (run.shared_inter > 0) {
      // Shared up row 3, column 5 as written.
      auto up = (*ckpt)->Get(1, WeightRole::kSharedW3, -1);
      ASSERT_TRUE(up.ok()) << up.status();
      EXPECT_EQ(up->shape, (std::vector<int64_t>{run.shared_inter, 24}));
      EXPECT_EQ(reinterpret_cast<const float*>(up->data)[3 * 24 + 5],
                c.sw3[3 * 24 + 5]);
    }
    Routing routing;
    auto y = RunLayer(dir, 1, c, WeightDType::kF32, &routing);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(testing::AllClose(*y, c.y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, routing.expert,
                                          routing.weight, c.tokens, 2,
                                          routing.slots));
    fs::remove_all(dir);
  }
}
// The router-side families' bad input: LongCat-Flash's router with E rows
// instead of E + Z (the zero experts' missing) named with the shape
// expected, JetMoE's missing output bias named, PhiMoE's missing router
// named.
TEST(HfFamilyCheckpoint, RouterPieceFamiliesBadInputIsNamed) {
  {
    auto c = Golden("longcat_like");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string dir =
        Write(*c, HfFamily::kLongcatFlash, "longcat_shape_");
    const std::string gate = "model.layers.1.mlp.router.classifier.weight";
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, gate, {16, 64}).ok());
    Routing routing;
    auto y = RunLayer(dir, 1, *c, WeightDType::kF32, &routing);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find(gate), std::string::npos) << y.status();
    EXPECT_NE(y.status().message().find("[24, 64]"), std::string::npos)
        << y.status();
    fs::remove_all(dir);
  }
  {
    auto c = Golden("jetmoe_like");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string dir = Write(*c, HfFamily::kJetMoe, "jetmoe_miss_");
    const std::string gone = "model.layers.1.mlp.bias";
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, gone, {}).ok());
    Routing routing;
    auto y = RunLayer(dir, 1, *c, WeightDType::kF32, &routing);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find(gone), std::string::npos) << y.status();
    fs::remove_all(dir);
  }
  {
    auto c = Golden("phimoe_like");
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string dir = Write(*c, HfFamily::kPhimoe, "phimoe_miss_");
    const std::string gone = "model.layers.1.block_sparse_moe.gate.weight";
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, gone, {}).ok());
    Routing routing;
    auto y = RunLayer(dir, 1, *c, WeightDType::kF32, &routing);
    ASSERT_FALSE(y.ok());
    EXPECT_NE(y.status().message().find(gone), std::string::npos) << y.status();
    fs::remove_all(dir);
  }
}

TEST(HfFamilyCheckpoint, Qwen3VlMoeFusedExpertsInBf16) {
  auto c = testing::RandomCase(SharedSoftmaxConfig(0), 12, 22);
  const std::string dir =
      Write(c, HfFamily::kQwen3VlMoe, "qwen3vl_", DType::kBF16);
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto w1 = (*ckpt)->Get(1, WeightRole::kW1, 4);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(w1->dtype, DType::kBF16);
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(reinterpret_cast<const uint16_t*>(w1->data)[2 * 24 + 9],
            F32ToBf16(c.w1[(4 * 16 + 2) * 24 + 9]));
  Routing routing;
  auto y = RunLayer(dir, 1, c, WeightDType::kAuto, &routing);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, c.y, testing::kBf16Tol));
  fs::remove_all(dir);
}

// A mis-shaped or missing tensor of these layouts is refused naming it
// (and the shape it must have).
TEST(HfFamilyCheckpoint, SharedExpertFamiliesBadTensorsAreNamed) {
  struct Bad {
    HfFamily family;
    std::string name;
    std::vector<int64_t> shape;  // empty: dropped
    std::string expected;
  };
  const Bad bad[] = {
      {HfFamily::kGraniteMoeShared,
       "model.layers.1.shared_mlp.input_linear.weight",
       {40, 24},
       "[80, 24]"},
      {HfFamily::kGraniteMoeHybrid,
       "model.layers.1.shared_mlp.output_linear.weight",
       {},
       ""},
      {HfFamily::kGraniteMoe,
       "model.layers.1.block_sparse_moe.input_linear.weight",
       {6, 16, 24},
       "[6, 32, 24]"},
      {HfFamily::kAria,
       "language_model.model.layers.1.mlp.experts.fc1.weight",
       {6, 24, 16},
       "[6, 24, 32]"},
      {HfFamily::kAria,
       "language_model.model.layers.1.mlp.experts.fc2.weight",
       {},
       ""},
      {HfFamily::kJamba, "model.layers.1.feed_forward.router.weight", {}, ""},
      {HfFamily::kDbrx,
       "transformer.blocks.1.ffn.experts.mlp.w2",
       {6, 16, 24},
       "[96, 24]"},
      {HfFamily::kDbrx, "transformer.blocks.1.ffn.experts.mlp.v1", {}, ""},
      {HfFamily::kHunyuanV1Moe, "model.layers.1.mlp.gate.wg.weight", {}, ""},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    const int64_t shared = b.family == HfFamily::kAria           ? 32
                           : b.family == HfFamily::kHunyuanV1Moe ? 16
                           : b.family == HfFamily::kGraniteMoeShared ||
                                   b.family == HfFamily::kGraniteMoeHybrid
                               ? 40
                               : 0;
    MoeLayerConfig k = SharedSoftmaxConfig(shared);
    if (b.family == HfFamily::kJamba) k.route_norm = false;
    auto c = testing::RandomCase(k, 4, 23);
    const std::string dir = Write(c, b.family, "sharedbad_");
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, b.name, b.shape).ok());
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto w = LoadLayerWeights(**ckpt, 1, {});
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find(b.name), std::string::npos)
        << w.status();
    if (!b.expected.empty()) {
      EXPECT_NE(w.status().message().find(b.expected), std::string::npos)
          << w.status();
    }
    fs::remove_all(dir);
  }
}
// The DeepSeek-style families added by description: a missing or
// mis-shaped tensor of each is refused naming it under the family's own
// names and prefix (Ling 2.0's gate.expert_bias, AFMoE's router.gate,
// LFM2-MoE's feed_forward expert, Kimi-VL's language_model.model. shared
// expert, GLM-4.5V's model.language_model. correction bias, Hy3's
// expert_bias and shared_mlp, Ling-3.0's shared expert), and Ling's two
// classes under one model_type each read their own.
TEST(HfFamilyCheckpoint, DescribedDeepseekStyleFamiliesNameBadTensors) {
  MoeLayerConfig k;
  k.hidden = 16;
  k.inter = 8;
  k.num_experts = 4;
  k.top_k = 2;
  k.score_func = ScoreFunc::kSigmoid;
  k.use_bias = true;
  k.route_norm = true;
  struct Bad {
    HfFamily family;
    int64_t shared_inter;
    std::string name;
    std::vector<int64_t> shape;  // empty: dropped
    std::string expected;        // the shape the message names, if any
  };
  const Bad bad[] = {
      {HfFamily::kBailingMoeV2,
       8,
       "model.layers.1.mlp.gate.expert_bias",
       {},
       ""},
      {HfFamily::kAfmoe, 8, "model.layers.1.mlp.router.gate.weight", {}, ""},
      {HfFamily::kLfm2Moe,
       0,
       "model.layers.1.feed_forward.experts.2.w1.weight",
       {8, 15},
       "[8, 16]"},
      {HfFamily::kKimiVl,
       8,
       "language_model.model.layers.1.mlp.shared_experts.up_proj.weight",
       {16, 16},
       "[8, 16]"},
      {HfFamily::kGlm4vMoe,
       8,
       "model.language_model.layers.1.mlp.gate.e_score_correction_bias",
       {5},
       ""},
      {HfFamily::kKimiLinear,
       8,
       "model.layers.1.block_sparse_moe.experts.0.w2.weight",
       {},
       ""},
      {HfFamily::kHyV3, 8, "model.layers.1.mlp.expert_bias", {}, ""},
      {HfFamily::kHyV3,
       8,
       "model.layers.1.mlp.shared_mlp.gate_proj.weight",
       {8, 15},
       "[8, 16]"},
      {HfFamily::kBailingMoeV3,
       8,
       "model.layers.1.mlp.shared_experts.down_proj.weight",
       {16, 16},
       "[16, 8]"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    MoeLayerConfig kc = k;
    kc.shared_inter = b.shared_inter;
    if (b.family == HfFamily::kGlm4vMoe || b.family == HfFamily::kKimiVl) {
      kc.route_scale = 2.5f;
      kc.n_groups = 1;
      kc.topk_groups = 1;
    }
    auto c = testing::RandomCase(kc, 4, 11);
    const std::string dir = Write(c, b.family, "described_bad_");
    {
      // Written whole, it loads and matches the reference.
      auto ckpt = HfCheckpoint::Open(dir);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status();
      EXPECT_EQ((*ckpt)->family(), b.family);
      ASSERT_TRUE(LoadLayerWeights(**ckpt, 1, {}).ok());
    }
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, b.name, b.shape).ok());
    auto ckpt = HfCheckpoint::Open(dir);
    absl::Status s = ckpt.status();
    if (ckpt.ok()) s = LoadLayerWeights(**ckpt, 1, {}).status();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(b.name), std::string::npos) << s;
    if (!b.expected.empty()) {
      EXPECT_NE(s.message().find(b.expected), std::string::npos) << s;
    }
    fs::remove_all(dir);
  }
  // Ling V1's checkpoint with its class renamed V2's is read as Ling 2.0,
  // which wants the gate.expert_bias V1 does not have: refused naming it.
  MoeLayerConfig v1;
  v1.hidden = 16;
  v1.inter = 8;
  v1.num_experts = 4;
  v1.top_k = 2;
  v1.route_norm = true;
  auto c = testing::RandomCase(v1, 4, 12);
  const std::string dir = Write(c, HfFamily::kBailingMoe, "ling_v1_");
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->family(), HfFamily::kBailingMoe);
  ASSERT_TRUE(testing::SetHfConfigKey(dir, "architectures",
                                      R"(["BailingMoeV2ForCausalLM"])")
                  .ok());
  auto renamed = HfCheckpoint::Open(dir);
  absl::Status s = renamed.status();
  if (renamed.ok()) {
    EXPECT_EQ((*renamed)->family(), HfFamily::kBailingMoeV2);
    s = LoadLayerWeights(**renamed, 1, {}).status();
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("mlp.gate.expert_bias"), std::string::npos) << s;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe
