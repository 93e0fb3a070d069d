// config.json mapping for each family, including the subtle ones: which
// layers are MoE layers, and DeepSeek-V2's renorm-or-scale rule.
#include "core/hf_config.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

absl::StatusOr<HfModelSpec> Parse(const std::string& json) {
  return ParseHfConfig(json, "config.json");
}

TEST(HfConfig, Mixtral) {
  auto s = Parse(
      R"({"model_type":"mixtral","hidden_size":4096,"num_hidden_layers":32,
    "intermediate_size":14336,"num_local_experts":8,"num_experts_per_tok":2})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->info.moe_layers.size(), 32u);
  EXPECT_EQ(s->info.layer.inter, 14336);
  EXPECT_TRUE(s->info.layer.route_norm);
  EXPECT_EQ(HfTensorName(HfFamily::kMixtral, 3, WeightRole::kW2, 5),
            "model.layers.3.block_sparse_moe.experts.5.w2.weight");
}

TEST(HfConfig, Qwen2MoeSparseStepAndDenseLayers) {
  auto s = Parse(
      R"({"model_type":"qwen2_moe","hidden_size":2048,"num_hidden_layers":6,
    "moe_intermediate_size":1408,"shared_expert_intermediate_size":5632,"num_experts":60,
    "num_experts_per_tok":4,"norm_topk_prob":false,"decoder_sparse_step":2,
    "mlp_only_layers":[3]})");
  ASSERT_TRUE(s.ok()) << s.status();
  // (L+1) % 2 == 0 -> 1, 3, 5; minus mlp_only 3.
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{1, 5}));
  EXPECT_TRUE(s->info.layer.shared_gate);
  EXPECT_EQ(s->info.layer.shared_inter, 5632);
  EXPECT_FALSE(s->info.layer.route_norm);
  EXPECT_EQ(HfTensorName(HfFamily::kQwen2Moe, 1, WeightRole::kSharedGate, -1),
            "model.layers.1.mlp.shared_expert_gate.weight");
}

TEST(HfConfig, OlmoeAndQwen3) {
  auto o =
      Parse(R"({"model_type":"olmoe","hidden_size":2048,"num_hidden_layers":16,
    "intermediate_size":1024,"num_experts":64,"num_experts_per_tok":8})");
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->info.layer.route_norm);
  EXPECT_EQ(o->info.layer.inter, 1024);
  auto q = Parse(
      R"({"model_type":"qwen3_moe","hidden_size":2048,"num_hidden_layers":4,
    "moe_intermediate_size":768,"num_experts":128,"num_experts_per_tok":8,
    "norm_topk_prob":true,"intermediate_size":6144})");
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->info.layer.route_norm);
  EXPECT_FALSE(q->info.layer.has_shared());
  EXPECT_EQ(q->info.moe_layers.size(), 4u);
}

TEST(HfConfig, DeepseekV2RenormsOrScalesNeverBoth) {
  const char* base =
      R"({"model_type":"deepseek_v2","hidden_size":5120,"num_hidden_layers":4,
    "moe_intermediate_size":1536,"n_routed_experts":160,"n_shared_experts":2,
    "num_experts_per_tok":6,"routed_scaling_factor":16.0,"topk_method":"group_limited_greedy",
    "n_group":8,"topk_group":3,"first_k_dense_replace":1,"moe_layer_freq":1,)";
  auto scaled = Parse(std::string(base) + R"("norm_topk_prob":false})");
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_FALSE(scaled->info.layer.route_norm);
  EXPECT_EQ(scaled->info.layer.route_scale, 16.0f);
  EXPECT_EQ(scaled->info.layer.group_score, GroupScore::kMax);
  EXPECT_EQ(scaled->info.layer.shared_inter, 2 * 1536);
  EXPECT_EQ(scaled->info.moe_layers, (std::vector<int64_t>{1, 2, 3}));
  auto normed = Parse(std::string(base) + R"("norm_topk_prob":true})");
  ASSERT_TRUE(normed.ok());
  EXPECT_TRUE(normed->info.layer.route_norm);
  EXPECT_EQ(normed->info.layer.route_scale, 1.0f);
}

TEST(HfConfig, DeepseekV3) {
  auto s = Parse(
      R"({"model_type":"deepseek_v3","hidden_size":7168,"num_hidden_layers":61,
    "moe_intermediate_size":2048,"n_routed_experts":256,"n_shared_experts":1,
    "num_experts_per_tok":8,"routed_scaling_factor":2.5,"topk_method":"noaux_tc",
    "scoring_func":"sigmoid","n_group":8,"topk_group":4,"norm_topk_prob":true,
    "first_k_dense_replace":3,"moe_layer_freq":1,"num_nextn_predict_layers":1})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.group_score, GroupScore::kTop2Sum);
  EXPECT_EQ(s->info.moe_layers.front(), 3);
  EXPECT_EQ(s->info.moe_layers.back(), 60);  // never the MTP layer 61
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseekV3, 3, WeightRole::kExpertBias, -1),
            "model.layers.3.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseekV3, 3, WeightRole::kSharedW2, -1),
            "model.layers.3.mlp.shared_experts.down_proj.weight");
}

TEST(HfConfig, ExtensionKeys) {
  auto s =
      Parse(R"({"model_type":"mixtral","hidden_size":64,"num_hidden_layers":1,
    "intermediate_size":32,"num_local_experts":4,"num_experts_per_tok":2,
    "moe_capacity_factor":1.25,"moe_routing":"expert_choice","moe_score_before_experts":true})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->info.layer.capacity_factor, 1.25);
  EXPECT_EQ(s->info.layer.routing, RoutingMode::kExpertChoice);
  EXPECT_TRUE(s->info.layer.score_before_experts);
}

TEST(HfConfig, Errors) {
  auto unknown = Parse(R"({"model_type":"llama","hidden_size":64})");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'llama'"), std::string::npos);
  auto missing =
      Parse(R"({"model_type":"mixtral","hidden_size":64,"num_hidden_layers":1,
    "num_local_experts":4,"num_experts_per_tok":2})");
  EXPECT_NE(missing.status().message().find("'intermediate_size'"),
            std::string::npos);
  auto wrong_type = Parse(R"({"model_type":"mixtral","hidden_size":"64"})");
  EXPECT_NE(wrong_type.status().message().find("'hidden_size'"),
            std::string::npos);
  EXPECT_FALSE(Parse("not json").ok());
  auto method = Parse(
      R"({"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":1,
    "moe_intermediate_size":8,"n_routed_experts":8,"num_experts_per_tok":2,"topk_method":"magic"})");
  EXPECT_NE(method.status().message().find("'topk_method'"), std::string::npos);
}

// A key that may only name some values is refused quoting what it said and
// listing what it may say (the family descriptions' StringKey / ScoreKey).
TEST(HfConfig, ChoiceKeysNameTheValueAndTheChoices) {
  auto scoring = Parse(
      R"({"model_type":"deepseek_v3","hidden_size":64,"num_hidden_layers":1,
    "moe_intermediate_size":8,"n_routed_experts":8,"num_experts_per_tok":2,
    "scoring_func":"relu"})");
  EXPECT_NE(scoring.status().message().find(
                "'scoring_func' 'relu' is not softmax or sigmoid"),
            std::string::npos)
      << scoring.status();
  auto dtype = Parse(
      R"({"model_type":"deepseek_v4","hidden_size":64,"num_hidden_layers":1,
    "moe_intermediate_size":8,"n_routed_experts":8,"num_experts_per_tok":2,
    "expert_dtype":"int4"})");
  EXPECT_NE(
      dtype.status().message().find("'expert_dtype' 'int4' is not fp4, fp8 "
                                    "or bf16"),
      std::string::npos)
      << dtype.status();
}

// DeepSeek-V4's hash-layer rule sizes a table by the layer count: a negative
// one is refused by name, in every family, before any rule reads it.
TEST(HfConfig, NegativeOrHugeLayerCountIsRefused) {
  for (const std::string model_type : {"deepseek_v4", "mixtral"}) {
    for (const char* layers : {"-1", "1000000000000"}) {
      auto s = Parse(absl::StrCat(R"({"model_type":")", model_type,
                                  R"(","hidden_size":32,"num_hidden_layers":)",
                                  layers, R"(,
      "intermediate_size":16,"moe_intermediate_size":16,"n_routed_experts":4,
      "num_local_experts":4,"num_experts_per_tok":2,"vocab_size":32})"));
      EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument)
          << model_type << " " << layers;
      EXPECT_NE(s.status().message().find(absl::StrCat(
                    "'num_hidden_layers' must be in [0, 65536], got ", layers)),
                std::string::npos)
          << s.status();
    }
  }
}

}  // namespace
}  // namespace moe
