// params.json (Mistral's own layout) read as the Hugging Face family whose
// math it has: Mixtral, or Mistral-Large-3 as deepseek_v3; its tensors by
// the consolidated names; missing keys and unserved structures refused by
// name.
#include "core/mistral_params.h"

#include <string>

#include "core/hf_config.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

// Mixtral-8x7B's params.json, its widths shrunk.
json Mixtral() {
  return json::parse(R"({
    "dim": 64, "n_layers": 4, "head_dim": 16, "hidden_dim": 32,
    "n_heads": 4, "n_kv_heads": 2, "norm_eps": 1e-05, "vocab_size": 32000,
    "rope_theta": 1000000.0,
    "moe": {"num_experts": 8, "num_experts_per_tok": 2}})");
}

// A Mistral-Large-3 params.json (the moe keys vLLM's adapter maps), small.
json Large3() {
  return json::parse(R"({
    "dim": 64, "n_layers": 5, "head_dim": 16, "hidden_dim": 128,
    "n_heads": 4, "n_kv_heads": 4, "norm_eps": 1e-06, "vocab_size": 32000,
    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16,
    "llama_4_scaling": {"original_max_position_embeddings": 8192, "beta": 0.1},
    "moe": {"num_experts": 16, "num_experts_per_tok": 4,
            "expert_hidden_dim": 24, "num_shared_experts": 1,
            "routed_scale": 2.5, "num_expert_groups": 4,
            "num_expert_groups_per_tok": 2, "first_k_dense_replace": 2,
            "route_every_n": 1, "renorm_strategy": "WEIGHTS",
            "use_load_balancing_bias": false}})");
}

absl::StatusOr<HfModelSpec> Parse(const json& j) {
  return ParseMistralParams(j.dump(), "/ckpt/params.json");
}

bool Mentions(const absl::Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

TEST(MistralParams, MixtralIsReadAsMixtral) {
  auto spec = Parse(Mixtral());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->family, HfFamily::kMixtral);
  EXPECT_EQ(spec->info.family, "mixtral");
  EXPECT_EQ(spec->layout, HfExpertLayout::kConsolidated);
  EXPECT_EQ(spec->info.num_layers, 4);
  EXPECT_EQ(spec->info.moe_layers, (std::vector<int64_t>{0, 1, 2, 3}));
  const MoeLayerConfig& c = spec->info.layer;
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.inter, 32);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.top_k, 2);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(c.route_norm);
  EXPECT_FALSE(c.has_shared());
  EXPECT_FALSE(c.use_bias);
  EXPECT_EQ(c.route_scale, 1.0f);
}

TEST(MistralParams, Large3IsReadAsDeepseekV3WithItsOwnGate) {
  auto spec = Parse(Large3());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->family, HfFamily::kDeepseekV3);
  EXPECT_EQ(spec->info.family, "deepseek_v3");
  EXPECT_EQ(spec->layout, HfExpertLayout::kConsolidated);
  EXPECT_EQ(spec->info.moe_layers, (std::vector<int64_t>{2, 3, 4}));
  const MoeLayerConfig& c = spec->info.layer;
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(c.inter, 24);
  EXPECT_EQ(c.shared_inter, 24);
  // vLLM's Mistral-Large-3: softmax, renorm, then the routed scale; groups
  // scored by their best expert; no correction bias.
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(c.route_norm);
  EXPECT_FLOAT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.n_groups, 4);
  EXPECT_EQ(c.topk_groups, 2);
  EXPECT_EQ(c.group_score, GroupScore::kMax);
  EXPECT_FALSE(c.use_bias);
  EXPECT_FALSE(c.shared_gate);

  // One group is no group limit; route_every_n is DeepSeek's stride.
  json j = Large3();
  j["moe"]["num_expert_groups"] = 1;
  j["moe"]["num_expert_groups_per_tok"] = 1;
  j["moe"]["route_every_n"] = 2;
  j["moe"]["first_k_dense_replace"] = 0;
  auto one = Parse(j);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->info.layer.n_groups, 0);
  EXPECT_EQ(one->info.moe_layers, (std::vector<int64_t>{0, 2, 4}));
}

TEST(MistralParams, MissingKeyIsNamedWithTheFile) {
  struct Missing {
    json (*params)();
    const char* path;  // "moe.x" below moe
  };
  const Missing cases[] = {
      {Mixtral, "dim"},
      {Mixtral, "n_layers"},
      {Mixtral, "hidden_dim"},
      {Mixtral, "moe.num_experts"},
      {Mixtral, "moe.num_experts_per_tok"},
      {Large3, "dim"},
      {Large3, "moe.num_experts"},
      {Large3, "moe.expert_hidden_dim"},
      {Large3, "moe.routed_scale"},
      {Large3, "moe.num_expert_groups"},
      {Large3, "moe.num_expert_groups_per_tok"},
      {Large3, "moe.first_k_dense_replace"},
      {Large3, "moe.route_every_n"},
  };
  for (const Missing& m : cases) {
    json j = m.params();
    const std::string path = m.path;
    SCOPED_TRACE(path);
    if (path.rfind("moe.", 0) == 0) {
      j["moe"].erase(path.substr(4));
    } else {
      j.erase(path);
    }
    auto s = Parse(j);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Mentions(s.status(), "/ckpt/params.json")) << s.status();
    EXPECT_TRUE(Mentions(s.status(), "'" + path + "' is missing"))
        << s.status();
  }
  // A mistyped one is named too.
  json j = Large3();
  j["moe"]["num_experts"] = "16";
  auto s = Parse(j);
  EXPECT_TRUE(Mentions(s.status(), "'moe.num_experts' must be an integer"))
      << s.status();
}

TEST(MistralParams, UnservedStructuresAreRefusedByName) {
  struct Bad {
    json params;
    const char* names;
  };
  json no_shared_deepseek = Large3();  // DeepSeek's keys, no shared expert
  no_shared_deepseek["moe"]["num_shared_experts"] = 0;
  json dense = Mixtral();
  dense.erase("moe");
  json mamba = Mixtral();
  mamba["model_type"] = "mamba";
  json fp8 = Large3();
  fp8["quantization"] = {{"qformat_weight", "fp8_e4m3"},
                         {"qscheme_act", "TENSOR"}};
  json renorm = Large3();
  renorm["moe"]["renorm_strategy"] = "NONE";
  json lb_bias = Large3();
  lb_bias["moe"]["use_load_balancing_bias"] = true;
  json unknown = Large3();
  unknown["moe"]["capacity_factor"] = 1.25;
  json mixtral_extra = Mixtral();
  mixtral_extra["moe"]["routed_scale"] = 2.0;
  const Bad cases[] = {
      {no_shared_deepseek, "'moe.expert_hidden_dim' is not read by Mixtral"},
      {dense, "'moe' is missing: a dense Mistral model"},
      {mamba, "'model_type' is \"mamba\""},
      {fp8, "'quantization'"},
      {renorm, "'moe.renorm_strategy' is \"NONE\""},
      {lb_bias, "'moe.use_load_balancing_bias' is set"},
      {unknown, "'moe.capacity_factor' is not read by Mistral-Large-3"},
      {mixtral_extra, "'moe.routed_scale' is not read by Mixtral"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.names);
    auto s = Parse(b.params);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Mentions(s.status(), b.names)) << s.status();
    EXPECT_TRUE(Mentions(s.status(), "/ckpt/params.json")) << s.status();
  }
  // Not JSON at all.
  EXPECT_FALSE(ParseMistralParams("[1, 2]", "p.json").ok());
}

TEST(MistralParams, ConsolidatedNamesAreMistralsOwn) {
  const auto name = [](HfFamily f, WeightRole r, int64_t e) {
    return HfTensorName(f, 3, r, e, HfExpertLayout::kConsolidated);
  };
  EXPECT_EQ(name(HfFamily::kMixtral, WeightRole::kGate, -1),
            "layers.3.feed_forward.gate.weight");
  EXPECT_EQ(name(HfFamily::kMixtral, WeightRole::kW1, 5),
            "layers.3.feed_forward.experts.5.w1.weight");
  EXPECT_EQ(name(HfFamily::kMixtral, WeightRole::kW3, 5),
            "layers.3.feed_forward.experts.5.w3.weight");
  EXPECT_EQ(name(HfFamily::kMixtral, WeightRole::kW2, 5),
            "layers.3.feed_forward.experts.5.w2.weight");
  EXPECT_EQ(name(HfFamily::kDeepseekV3, WeightRole::kGate, -1),
            "layers.3.gate.weight");
  EXPECT_EQ(name(HfFamily::kDeepseekV3, WeightRole::kW1, 7),
            "layers.3.experts.7.w1.weight");
  EXPECT_EQ(name(HfFamily::kDeepseekV3, WeightRole::kW2, 7),
            "layers.3.experts.7.w2.weight");
  EXPECT_EQ(name(HfFamily::kDeepseekV3, WeightRole::kSharedW1, -1),
            "layers.3.shared_experts.w1.weight");
  EXPECT_EQ(name(HfFamily::kDeepseekV3, WeightRole::kSharedW3, -1),
            "layers.3.shared_experts.w3.weight");
  EXPECT_EQ(name(HfFamily::kDeepseekV3, WeightRole::kSharedW2, -1),
            "layers.3.shared_experts.w2.weight");
  // No correction bias in Mistral-Large-3's names; no consolidated names
  // for a family Mistral does not release.
  EXPECT_EQ(name(HfFamily::kDeepseekV3, WeightRole::kExpertBias, -1), "");
  EXPECT_EQ(name(HfFamily::kQwen3Moe, WeightRole::kW1, 0), "");
}

}  // namespace
}  // namespace moe
