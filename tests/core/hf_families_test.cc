// config.json of the 2026 families (GLM-4.5, Kimi K2, Qwen3-Next,
// MiniMax-M2, Llama 4, GLM-5, MiMo-V2-Flash, Nemotron 3, Gemma 4, Kimi K3),
// read as their release configs are written, and the refusal of what the
// loader does not know.
#include <algorithm>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/hf_config.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

absl::StatusOr<HfModelSpec> Parse(const std::string& json) {
  return ParseHfConfig(json, "config.json");
}

bool Mentions(const absl::Status& s, const std::string& what) {
  return s.message().find(what) != absl::string_view::npos;
}

TEST(HfFamilies, Glm4MoeDenseFirstLayersNoMtp) {
  auto s = Parse(
      R"({"architectures":["Glm4MoeForCausalLM"],"model_type":"glm4_moe",
    "hidden_size":5120,"num_hidden_layers":92,"intermediate_size":12288,
    "moe_intermediate_size":1536,"n_routed_experts":160,"n_shared_experts":1,
    "num_experts_per_tok":8,"n_group":1,"topk_group":1,"norm_topk_prob":true,
    "routed_scaling_factor":2.5,"first_k_dense_replace":3,
    "num_nextn_predict_layers":1})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kGlm4Moe);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.n_groups, 1);
  EXPECT_EQ(c.shared_inter, 1536);
  EXPECT_EQ(s->info.moe_layers.size(), 89u);
  EXPECT_EQ(s->info.moe_layers.front(), 3);
  EXPECT_EQ(s->info.moe_layers.back(), 91);  // the MTP layer 92 is skipped
  EXPECT_EQ(HfTensorName(HfFamily::kGlm4Moe, 3, WeightRole::kExpertBias, -1),
            "model.layers.3.mlp.gate.e_score_correction_bias");
}

TEST(HfFamilies, KimiK2IsReadAsDeepseekV3With384Experts) {
  const std::string body =
      R"("hidden_size":7168,"num_hidden_layers":61,
    "moe_intermediate_size":2048,"n_routed_experts":384,"n_shared_experts":1,
    "num_experts_per_tok":8,"routed_scaling_factor":2.827,"topk_method":"noaux_tc",
    "scoring_func":"sigmoid","n_group":1,"topk_group":1,"norm_topk_prob":true,
    "first_k_dense_replace":1,"moe_layer_freq":1,"num_nextn_predict_layers":0,
    "architectures":["DeepseekV3ForCausalLM"],
    "auto_map":{"AutoConfig":"configuration_deepseek.DeepseekV3Config"}})";
  auto kimi = Parse(R"({"model_type":"kimi_k2",)" + body);
  auto v3 = Parse(R"({"model_type":"deepseek_v3",)" + body);
  ASSERT_TRUE(kimi.ok()) << kimi.status();
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(kimi->family, HfFamily::kKimiK2);
  EXPECT_EQ(kimi->info.layer, v3->info.layer);
  EXPECT_EQ(kimi->info.moe_layers, v3->info.moe_layers);
  EXPECT_EQ(kimi->info.layer.num_experts, 384);
  EXPECT_FLOAT_EQ(kimi->info.layer.route_scale, 2.827f);
  EXPECT_EQ(kimi->info.moe_layers.front(), 1);
  EXPECT_EQ(HfTensorName(HfFamily::kKimiK2, 5, WeightRole::kW1, 383),
            "model.layers.5.mlp.experts.383.gate_proj.weight");
}

TEST(HfFamilies, Qwen3NextGatedSharedExpertAndSparseStep) {
  auto s = Parse(
      R"({"architectures":["Qwen3NextForCausalLM"],"model_type":"qwen3_next",
    "hidden_size":2048,"num_hidden_layers":48,"num_experts":512,
    "num_experts_per_tok":10,"moe_intermediate_size":512,
    "shared_expert_intermediate_size":512,"norm_topk_prob":true,
    "decoder_sparse_step":1,"mlp_only_layers":[]})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_TRUE(c.route_norm && c.shared_gate);
  EXPECT_EQ(c.shared_inter, 512);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_EQ(s->info.moe_layers.size(), 48u);
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3Next, 0, WeightRole::kSharedW1, -1),
            "model.layers.0.mlp.shared_expert.gate_proj.weight");
  auto no_shared = Parse(
      R"({"model_type":"qwen3_next","hidden_size":64,"num_hidden_layers":2,
    "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16,
    "shared_expert_intermediate_size":0})");
  EXPECT_TRUE(Mentions(no_shared.status(), "shared_expert_intermediate_size"));
}

TEST(HfFamilies, MinimaxM2) {
  auto s = Parse(
      R"({"architectures":["MiniMaxM2ForCausalLM"],"model_type":"minimax_m2",
    "hidden_size":3072,"num_hidden_layers":62,"intermediate_size":1536,
    "num_local_experts":256,"num_experts_per_tok":8,"scoring_func":"sigmoid",
    "use_routing_bias":true})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 1.0f);
  EXPECT_FALSE(c.has_shared());
  EXPECT_EQ(s->info.moe_layers.size(), 62u);
  EXPECT_EQ(HfTensorName(HfFamily::kMinimaxM2, 2, WeightRole::kExpertBias, -1),
            "model.layers.2.block_sparse_moe.e_score_correction_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kMinimaxM2, 2, WeightRole::kW3, 7),
            "model.layers.2.block_sparse_moe.experts.7.w3.weight");
}

TEST(HfFamilies, Llama4MultimodalReadsTextConfig) {
  auto s = Parse(
      R"({"architectures":["Llama4ForConditionalGeneration"],"model_type":"llama4",
    "vision_config":{"hidden_size":1408},
    "text_config":{"model_type":"llama4_text","hidden_size":5120,
      "num_hidden_layers":48,"intermediate_size":8192,"intermediate_size_mlp":16384,
      "num_local_experts":128,"num_experts_per_tok":1,"interleave_moe_layer_step":2}})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kLlama4);
  EXPECT_EQ(c.hidden, 5120);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_FALSE(c.route_norm);
  EXPECT_TRUE(c.score_before_experts);
  EXPECT_EQ(c.shared_inter, 8192);
  EXPECT_FALSE(c.shared_gate);
  ASSERT_EQ(s->info.moe_layers.size(), 24u);
  EXPECT_EQ(s->info.moe_layers.front(), 1);  // L % 2 == 1
  EXPECT_EQ(s->info.moe_layers.back(), 47);
  const auto loc = HfLocate(HfFamily::kLlama4, c, 1, WeightRole::kW3, 5);
  EXPECT_EQ(loc.name,
            "language_model.model.layers.1.feed_forward.experts.gate_up_proj");
  EXPECT_TRUE(loc.fused);
  EXPECT_EQ(loc.fused_shape, (std::vector<int64_t>{128, 5120, 2 * 8192}));
  EXPECT_EQ(loc.col0, 8192);  // up is the second half
  EXPECT_EQ(loc.expert, 5);
  auto no_text = Parse(R"({"model_type":"llama4","hidden_size":64})");
  EXPECT_TRUE(Mentions(no_text.status(), "text_config"));
}

// Qwen3.5 / 3.6 MoE: the language model's keys under text_config, every
// layer sparse, always renormalised (no norm_topk_prob), a gated shared
// expert; experts packed as nn.Linear weights under model.language_model.
TEST(HfFamilies, Qwen35MoeReadsTextConfigAndPackedExperts) {
  auto s = Parse(
      R"({"architectures":["Qwen3_5MoeForConditionalGeneration"],
    "model_type":"qwen3_5_moe","vision_config":{"hidden_size":1152},
    "text_config":{"model_type":"qwen3_5_moe_text","hidden_size":2048,
      "num_hidden_layers":40,"num_experts":256,"num_experts_per_tok":8,
      "moe_intermediate_size":512,"shared_expert_intermediate_size":512}})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kQwen35Moe);
  EXPECT_EQ(s->info.family, "qwen3_5_moe");
  EXPECT_EQ(c.hidden, 2048);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(c.shared_inter, 512);
  EXPECT_TRUE(c.shared_gate);
  ASSERT_EQ(s->info.moe_layers.size(), 40u);
  EXPECT_EQ(s->info.moe_layers.front(), 0);
  const auto packed = HfExpertLayout::kPacked;
  const auto up =
      HfLocate(HfFamily::kQwen35Moe, c, 3, WeightRole::kW3, 5, packed);
  EXPECT_EQ(up.name, "model.language_model.layers.3.mlp.experts.gate_up_proj");
  EXPECT_TRUE(up.fused);
  EXPECT_TRUE(up.linear);
  EXPECT_EQ(up.fused_shape, (std::vector<int64_t>{256, 1024, 2048}));
  EXPECT_EQ(up.col0, 512);  // up rows follow the gate rows
  EXPECT_EQ(up.out, 512);
  const auto down =
      HfLocate(HfFamily::kQwen35Moe, c, 3, WeightRole::kW2, 5, packed);
  EXPECT_EQ(down.name, "model.language_model.layers.3.mlp.experts.down_proj");
  EXPECT_EQ(down.fused_shape, (std::vector<int64_t>{256, 2048, 512}));
  EXPECT_EQ(HfTensorName(HfFamily::kQwen35Moe, 3, WeightRole::kSharedGate, -1,
                         packed),
            "model.language_model.layers.3.mlp.shared_expert_gate.weight");
  EXPECT_EQ(
      HfTensorName(HfFamily::kQwen35Moe, 3, WeightRole::kSharedW2, -1, packed),
      "model.language_model.layers.3.mlp.shared_expert.down_proj.weight");
  auto no_text = Parse(R"({"model_type":"qwen3_5_moe","hidden_size":64})");
  EXPECT_TRUE(Mentions(no_text.status(), "text_config"));
}

// Qwen3.5 is described as Qwen3-Next: the keys its config does not have
// (norm_topk_prob, decoder_sparse_step, mlp_only_layers) keep Qwen3-Next's
// defaults even when a config carries them, its shared expert is still
// required, and its names are Qwen3-Next's under its own prefix.
TEST(HfFamilies, Qwen35MoeIsQwen3NextUnderItsOwnPrefix) {
  const std::string text =
      R"("hidden_size":2048,"num_hidden_layers":8,"num_experts":64,
      "num_experts_per_tok":4,"moe_intermediate_size":256,
      "norm_topk_prob":false,"decoder_sparse_step":2,"mlp_only_layers":[0])";
  auto next = Parse(R"({"model_type":"qwen3_next",)" + text +
                    R"(,"shared_expert_intermediate_size":256})");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(next->info.layer.route_norm);
  EXPECT_EQ(next->info.moe_layers, (std::vector<int64_t>{1, 3, 5, 7}));
  auto s = Parse(R"({"model_type":"qwen3_5_moe","text_config":{)" + text +
                 R"(,"shared_expert_intermediate_size":256}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(HfBaseFamily(s->family), HfFamily::kQwen3Next);
  EXPECT_TRUE(s->info.layer.route_norm);
  EXPECT_EQ(s->info.moe_layers.size(), 8u);
  EXPECT_EQ(HfLayerPrefix(HfFamily::kQwen35Moe, 7),
            "model.language_model.layers.7.");
  for (WeightRole role : {WeightRole::kGate, WeightRole::kW1,
                          WeightRole::kSharedW3, WeightRole::kSharedGate}) {
    // Qwen3-Next's model.layers.7.<rest> becomes
    // model.language_model.layers.7.<rest>.
    const std::string next_name =
        HfTensorName(HfFamily::kQwen3Next, 7, role, 3);
    ASSERT_EQ(next_name.rfind("model.layers.7.", 0), 0u) << next_name;
    EXPECT_EQ(
        HfTensorName(HfFamily::kQwen35Moe, 7, role, 3),
        absl::StrCat("model.language_model.layers.7.", next_name.substr(15)));
  }
  auto unshared = Parse(R"({"model_type":"qwen3_5_moe","text_config":{)" +
                        text + R"(,"shared_expert_intermediate_size":0}})");
  ASSERT_FALSE(unshared.ok());
  EXPECT_TRUE(Mentions(unshared.status(), "shared_expert_intermediate_size"));
  EXPECT_TRUE(Mentions(unshared.status(), "qwen3_5_moe"));
}

// transformers v5 packs the older families' experts too; Mixtral's
// block_sparse_moe. becomes mlp.
TEST(HfFamilies, PackedLayoutNamesOfOlderFamilies) {
  const auto packed = HfExpertLayout::kPacked;
  EXPECT_EQ(HfTensorName(HfFamily::kMixtral, 2, WeightRole::kGate, -1, packed),
            "model.layers.2.mlp.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kMixtral, 2, WeightRole::kW2, 7, packed),
            "model.layers.2.mlp.experts.down_proj");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3Moe, 2, WeightRole::kW1, 7, packed),
            "model.layers.2.mlp.experts.gate_up_proj");
  // Fused x·W families keep their one layout.
  EXPECT_EQ(HfTensorName(HfFamily::kLlama4Text, 2, WeightRole::kW1, 7, packed),
            "model.layers.2.feed_forward.experts.gate_up_proj");
}

TEST(HfFamilies, Llama4TextMoeLayersList) {
  auto s = Parse(
      R"({"architectures":["Llama4ForCausalLM"],"model_type":"llama4_text",
    "hidden_size":64,"num_hidden_layers":6,"intermediate_size":32,
    "num_local_experts":16,"num_experts_per_tok":1,"moe_layers":[5,0,3]})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(HfTensorName(HfFamily::kLlama4Text, 3, WeightRole::kGate, -1),
            "model.layers.3.feed_forward.router.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kLlama4Text, 3, WeightRole::kSharedW2, -1),
            "model.layers.3.feed_forward.shared_expert.down_proj.weight");
  auto bad = Parse(
      R"({"model_type":"llama4_text","hidden_size":64,"num_hidden_layers":6,
    "intermediate_size":32,"num_local_experts":16,"num_experts_per_tok":1,
    "moe_layers":[6]})");
  EXPECT_TRUE(Mentions(bad.status(), "moe_layers"));
}

TEST(HfFamilies, Ernie45MoeLayerRangeAndNormMin) {
  auto s = Parse(
      R"({"architectures":["Ernie4_5_MoeForCausalLM"],"model_type":"ernie4_5_moe",
    "hidden_size":2560,"num_hidden_layers":28,"intermediate_size":12288,
    "moe_num_experts":64,"moe_k":6,"moe_intermediate_size":1536,
    "moe_num_shared_experts":2,"moe_norm_min":1e-12,"moe_layer_start_index":1,
    "moe_layer_end_index":26,"moe_layer_interval":1,"use_bias":false})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(c.top_k, 6);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 1.0f);
  EXPECT_FLOAT_EQ(c.norm_min, 1e-12f);
  EXPECT_EQ(c.shared_inter, 2 * 1536);
  EXPECT_EQ(s->info.moe_layers.front(), 1);
  EXPECT_EQ(s->info.moe_layers.back(), 26);
  EXPECT_EQ(s->info.moe_layers.size(), 26u);
  EXPECT_EQ(HfTensorName(HfFamily::kErnie45Moe, 1, WeightRole::kExpertBias, -1),
            "model.layers.1.mlp.moe_statics.e_score_correction_bias");
  auto every_second = Parse(
      R"({"model_type":"ernie4_5_moe","hidden_size":64,"num_hidden_layers":6,
    "moe_num_experts":8,"moe_k":2,"moe_intermediate_size":16,"moe_norm_min":0.45,
    "moe_layer_start_index":0,"moe_layer_end_index":-1,"moe_layer_interval":2})");
  ASSERT_TRUE(every_second.ok()) << every_second.status();
  EXPECT_EQ(every_second->info.moe_layers, (std::vector<int64_t>{1, 3, 5}));
  EXPECT_FALSE(every_second->info.layer.has_shared());
  auto linear_bias = Parse(
      R"({"model_type":"ernie4_5_moe","hidden_size":64,"num_hidden_layers":2,
    "moe_num_experts":8,"moe_k":2,"moe_intermediate_size":16,"use_bias":true})");
  EXPECT_TRUE(Mentions(linear_bias.status(), "'use_bias'"));
}

// k comes from the first of a family's top-k keys present: gpt-oss's
// transformers key wins over its release key, and a config with neither is
// refused naming the release key; ERNIE's moe_k is its only one.
TEST(HfFamilies, TopKFromTheFamilysKeys) {
  const std::string gpt =
      R"({"model_type":"gpt_oss","hidden_size":64,"num_hidden_layers":2,
      "intermediate_size":32,"num_local_experts":8)";
  auto both = Parse(gpt + R"(,"num_experts_per_tok":3,"experts_per_token":2})");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->info.layer.top_k, 3);
  auto neither = Parse(gpt + "}");
  ASSERT_FALSE(neither.ok());
  EXPECT_TRUE(Mentions(neither.status(), "'experts_per_token' is missing"))
      << neither.status();
  auto ernie = Parse(
      R"({"model_type":"ernie4_5_moe","hidden_size":64,"num_hidden_layers":2,
      "moe_num_experts":8,"num_experts_per_tok":2,
      "moe_intermediate_size":16})");
  ASSERT_FALSE(ernie.ok());
  EXPECT_TRUE(Mentions(ernie.status(), "'moe_k' is missing")) << ernie.status();
}

TEST(HfFamilies, GptOss) {
  auto s = Parse(
      R"({"architectures":["GptOssForCausalLM"],"model_type":"gpt_oss",
    "hidden_size":2880,"num_hidden_layers":24,"intermediate_size":2880,
    "num_local_experts":32,"experts_per_token":4,"swiglu_limit":7.0,
    "quantization_config":{"quant_method":"mxfp4",
      "modules_to_not_convert":["model.layers.*.self_attn","model.layers.*.mlp.router"]}})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(c.score_func, ScoreFunc::kTopkSoftmax);
  EXPECT_FALSE(c.route_norm);
  EXPECT_TRUE(c.router_bias && c.expert_bias);
  EXPECT_FALSE(c.use_bias || c.has_shared());
  EXPECT_EQ(c.act, Activation::kGptOss);
  EXPECT_FLOAT_EQ(c.act_alpha, 1.702f);
  EXPECT_FLOAT_EQ(c.act_limit, 7.0f);
  EXPECT_EQ(s->quant_method, "mxfp4");
  EXPECT_EQ(s->info.moe_layers.size(), 24u);
  const auto up = HfLocate(HfFamily::kGptOss, c, 2, WeightRole::kW3, 7);
  EXPECT_EQ(up.name, "model.layers.2.mlp.experts.gate_up_proj");
  EXPECT_EQ(up.fused_shape, (std::vector<int64_t>{32, 2880, 5760}));
  EXPECT_EQ(up.col0, 1);  // interleaved: 2j gate, 2j+1 up
  EXPECT_EQ(up.col_step, 2);
  const auto b2 = HfLocate(HfFamily::kGptOss, c, 2, WeightRole::kB2, 7);
  EXPECT_EQ(b2.name, "model.layers.2.mlp.experts.down_proj_bias");
  EXPECT_EQ(b2.fused_shape, (std::vector<int64_t>{32, 2880}));
  EXPECT_EQ(HfTensorName(HfFamily::kGptOss, 2, WeightRole::kRouterBias, -1),
            "model.layers.2.mlp.router.bias");
  // MXFP4 is gpt-oss's own format: under another family it is refused.
  auto other = Parse(
      R"({"model_type":"mixtral","hidden_size":64,"num_hidden_layers":1,
    "intermediate_size":32,"num_local_experts":4,"num_experts_per_tok":2,
    "quantization_config":{"quant_method":"mxfp4"}})");
  EXPECT_TRUE(Mentions(other.status(), "'mxfp4'"));
}

// A 4-layer DeepSeek-V4 config.json up to its layer-type keys.
const char* const kDeepseekV4Body =
    R"("model_type":"deepseek_v4","architectures":["DeepseekV4ForCausalLM"],
    "hidden_size":64,"num_hidden_layers":4,"vocab_size":129280,
    "n_routed_experts":32,"num_experts_per_tok":6,"moe_intermediate_size":32,
    "n_shared_experts":1,"scoring_func":"sqrtsoftplus","routed_scaling_factor":1.5,
    "swiglu_limit":10.0,)";

TEST(HfFamilies, DeepseekV4TopKAndHashModels) {
  const std::string body = kDeepseekV4Body;
  auto topk = Parse("{" + body + R"("num_hash_layers":0})");
  ASSERT_TRUE(topk.ok()) << topk.status();
  const auto& c = topk->info.layer;
  EXPECT_EQ(c.score_func, ScoreFunc::kSqrtSoftplus);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_FALSE(c.hash_routed());
  EXPECT_FLOAT_EQ(c.route_scale, 1.5f);
  EXPECT_EQ(c.act, Activation::kSiluClamp);
  EXPECT_FLOAT_EQ(c.act_limit, 10.0f);
  EXPECT_EQ(c.shared_inter, 32);
  EXPECT_EQ(topk->info.moe_layers.size(), 4u);
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseekV4, 2, WeightRole::kExpertBias, -1),
            "layers.2.ffn.gate.bias");
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseekV4, 2, WeightRole::kW2, 31),
            "layers.2.ffn.experts.31.w2.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseekV4, 2, WeightRole::kSharedW3, -1),
            "layers.2.ffn.shared_experts.w3.weight");
  auto hash = Parse(
      "{" + body +
      R"("mlp_layer_types":["hash_moe","hash_moe","hash_moe","hash_moe"]})");
  ASSERT_TRUE(hash.ok()) << hash.status();
  EXPECT_EQ(hash->info.layer.hash_vocab, 129280);
  EXPECT_FALSE(hash->info.layer.use_bias);
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseekV4, 0, WeightRole::kTid2Eid, -1),
            "layers.0.ffn.gate.tid2eid");
  EXPECT_TRUE(hash->info.layer_overrides.empty());
  // The released fp4 form parses (its tensors are read by the checkpoint);
  // an expert dtype of no release is refused.
  auto fp4 = Parse("{" + body + R"("expert_dtype":"fp4"})");
  EXPECT_TRUE(fp4.ok()) << fp4.status();
  auto int2 = Parse("{" + body + R"("expert_dtype":"int2"})");
  EXPECT_TRUE(Mentions(int2.status(), "'expert_dtype'")) << int2.status();
  auto sigmoid = Parse("{" + body + R"("scoring_func":"sigmoid"})");
  EXPECT_FALSE(sigmoid.ok());
}

// DeepSeek-V4 as released: the first layers hash-routed, the rest top-k
// with the correction bias. The top-k config is the model's; each hash
// layer has its own, differing in the routing options only.
TEST(HfFamilies, DeepseekV4HashAndTopKLayersEachHaveTheirConfig) {
  const std::string body = kDeepseekV4Body;
  for (const std::string keys :
       {R"("num_hash_layers":3)",
        R"("mlp_layer_types":["hash_moe","hash_moe","hash_moe","moe"])"}) {
    SCOPED_TRACE(keys);
    auto s = Parse("{" + body + keys + "}");
    ASSERT_TRUE(s.ok()) << s.status();
    const ModelInfo& m = s->info;
    EXPECT_EQ(m.moe_layers, (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(m.HashLayers(), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(m.MaxHashVocab(), 129280);
    EXPECT_EQ(m.layer_overrides.size(), 3u);
    const MoeLayerConfig& topk = m.LayerConfig(3);
    EXPECT_EQ(&topk, &m.layer);
    EXPECT_TRUE(topk.use_bias);
    EXPECT_FALSE(topk.hash_routed());
    for (int64_t l = 0; l < 3; ++l) {
      const MoeLayerConfig& h = m.LayerConfig(l);
      EXPECT_EQ(h.hash_vocab, 129280) << l;
      EXPECT_FALSE(h.use_bias) << l;
      // Everything else is the top-k layers'.
      MoeLayerConfig rest = h;
      rest.hash_vocab = 0;
      rest.use_bias = true;
      EXPECT_EQ(rest, topk) << l;
    }
  }
  // The generic key for every layer's hash vocabulary cannot join it.
  auto generic =
      Parse("{" + body + R"("num_hash_layers":2,"moe_hash_vocab":0})");
  EXPECT_TRUE(Mentions(generic.status(), "'moe_hash_vocab'"))
      << generic.status();
  // Hash layers need the vocabulary that sizes tid2eid.
  std::string no_vocab = "{" + body + R"("num_hash_layers":2})";
  no_vocab.erase(no_vocab.find(R"("vocab_size":129280,)"), 20);
  EXPECT_TRUE(Mentions(Parse(no_vocab).status(), "'vocab_size' is missing"))
      << Parse(no_vocab).status();
}

TEST(HfFamilies, LayerOverridesDifferOnlyInWhatALayerMaySet) {
  ModelInfo m;
  m.moe_layers = {0, 1};
  m.layer.hidden = 64;
  m.layer.inter = 32;
  m.layer.num_experts = 8;
  m.layer.top_k = 2;
  m.layer.use_bias = true;
  MoeLayerConfig hashed = m.layer;
  hashed.use_bias = false;
  hashed.hash_vocab = 100;
  m.layer_overrides[0] = hashed;
  EXPECT_TRUE(CheckLayerOverrides(m).ok()) << CheckLayerOverrides(m);
  EXPECT_EQ(m.LayerConfig(0).hash_vocab, 100);
  EXPECT_EQ(m.LayerConfig(1).hash_vocab, 0);
  // A layer may have its own top_k and widths...
  m.layer_overrides[0].inter = 16;
  m.layer_overrides[0].top_k = 3;
  EXPECT_TRUE(CheckLayerOverrides(m).ok()) << CheckLayerOverrides(m);
  EXPECT_EQ(m.MaxTopK(), 3);
  EXPECT_EQ(FirstLayerOfOwnShape(m), std::optional<int64_t>(0));
  // ...but not its own expert count or hidden width, named with the keys.
  m.layer_overrides[0].num_experts = 16;
  m.layer_overrides[0].hidden = 32;
  EXPECT_TRUE(Mentions(CheckLayerOverrides(m), "layer 0"));
  EXPECT_TRUE(Mentions(CheckLayerOverrides(m), "in experts, hidden,"))
      << CheckLayerOverrides(m);
  // An override of a layer that is not an MoE layer.
  m.layer_overrides.clear();
  m.layer_overrides[5] = hashed;
  EXPECT_TRUE(Mentions(CheckLayerOverrides(m), "layer 5"));
  // An override that does not validate on its own.
  m.layer_overrides.clear();
  hashed.top_k = 0;
  m.layer_overrides[1] = hashed;
  EXPECT_TRUE(Mentions(CheckLayerOverrides(m), "layer 1: "));
  EXPECT_TRUE(Mentions(CheckLayerOverrides(m), "top_k"));
}

// GLM-5 (glm_moe_dsa) as released: GLM-4.5's MoE, 256 experts k 8, one
// shared, the DSA indexer's keys beside it. MoE layers come from
// mlp_layer_types when given, else from first_k_dense_replace on; the MTP
// layer 78 is never one.
TEST(HfFamilies, GlmMoeDsaIsReadAsGlm4MoeWithItsLayerList) {
  const std::string body =
      R"("model_type":"glm_moe_dsa","architectures":["GlmMoeDsaForCausalLM"],
    "hidden_size":6144,"num_hidden_layers":78,"intermediate_size":12288,
    "moe_intermediate_size":2048,"n_routed_experts":256,"n_shared_experts":1,
    "num_experts_per_tok":8,"n_group":1,"topk_group":1,"norm_topk_prob":true,
    "routed_scaling_factor":2.5,"first_k_dense_replace":3,
    "num_nextn_predict_layers":1,"index_topk":2048,"index_n_heads":32,
    "kv_lora_rank":512,"q_lora_rank":2048)";
  auto s = Parse("{" + body + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kGlmMoeDsa);
  EXPECT_EQ(s->info.family, "glm_moe_dsa");
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.shared_inter, 2048);
  // first_k_dense_replace: layers 3..77.
  EXPECT_EQ(s->info.moe_layers.size(), 75u);
  EXPECT_EQ(s->info.moe_layers.front(), 3);
  EXPECT_EQ(s->info.moe_layers.back(), 77);
  // mlp_layer_types overrides it.
  std::string types;
  for (int l = 0; l < 78; ++l) {
    types += std::string(l == 0 ? "" : ",") +
             (l < 2 || l == 40 ? "\"dense\"" : "\"sparse\"");
  }
  auto listed = Parse("{" + body + R"(,"mlp_layer_types":[)" + types + "]}");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->info.layer, c);
  EXPECT_EQ(listed->info.moe_layers.size(), 75u);
  EXPECT_EQ(listed->info.moe_layers.front(), 2);
  EXPECT_FALSE(listed->info.HasLayer(40));
  EXPECT_TRUE(listed->info.HasLayer(41));
  EXPECT_EQ(HfTensorName(HfFamily::kGlmMoeDsa, 3, WeightRole::kExpertBias, -1),
            "model.layers.3.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kGlmMoeDsa, 3, WeightRole::kSharedW2, -1),
            "model.layers.3.mlp.shared_experts.down_proj.weight");
  auto short_list =
      Parse("{" + body + R"(,"mlp_layer_types":["dense","sparse"]})");
  ASSERT_FALSE(short_list.ok());
  EXPECT_TRUE(Mentions(short_list.status(), "mlp_layer_types"))
      << short_list.status();
  auto odd = Parse("{" + body + R"(,"mlp_layer_types":[)" + types.substr(8) +
                   R"(,"moe"]})");
  ASSERT_FALSE(odd.ok());
  EXPECT_TRUE(Mentions(odd.status(), "\"moe\"")) << odd.status();
}

// MiMo-V2-Flash's Hub config: DeepSeek-V3's gate, no shared expert and no
// scale (both null), moe_layer_freq a per-layer 0 / 1 list; transformers'
// own config names the layers in mlp_layer_types instead.
TEST(HfFamilies, MimoV2FlashIsReadAsDeepseekV3WithoutSharedExpert) {
  std::string freq, types;
  for (int l = 0; l < 48; ++l) {
    freq += std::string(l == 0 ? "" : ",") + (l == 0 ? "0" : "1");
    types +=
        std::string(l == 0 ? "" : ",") + (l == 0 ? "\"dense\"" : "\"sparse\"");
  }
  const std::string body =
      R"("model_type":"mimo_v2_flash","architectures":["MiMoV2FlashForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":48,"intermediate_size":16384,
    "moe_intermediate_size":2048,"n_routed_experts":256,"n_shared_experts":null,
    "num_experts_per_tok":8,"scoring_func":"sigmoid","topk_method":"noaux_tc",
    "n_group":1,"topk_group":1,"norm_topk_prob":true,
    "routed_scaling_factor":null,
    "quantization_config":{"quant_method":"fp8","fmt":"e4m3",
      "activation_scheme":"dynamic","weight_block_size":[128,128]})";
  auto hub = Parse("{" + body + R"(,"moe_layer_freq":[)" + freq + "]}");
  ASSERT_TRUE(hub.ok()) << hub.status();
  const auto& c = hub->info.layer;
  EXPECT_EQ(hub->family, HfFamily::kMimoV2Flash);
  EXPECT_EQ(hub->quant_method, "fp8");
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 1.0f);
  EXPECT_EQ(c.shared_inter, 0);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(hub->info.moe_layers.size(), 47u);
  EXPECT_EQ(hub->info.moe_layers.front(), 1);
  auto native = Parse("{" + body + R"(,"mlp_layer_types":[)" + types + "]}");
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(native->info.layer, c);
  EXPECT_EQ(native->info.moe_layers, hub->info.moe_layers);
  // Without a list, DeepSeek's rule: from first_k_dense_replace, every
  // moe_layer_freq-th.
  auto strided =
      Parse("{" + body + R"(,"first_k_dense_replace":2,"moe_layer_freq":2})");
  ASSERT_TRUE(strided.ok()) << strided.status();
  EXPECT_EQ(strided->info.moe_layers.front(), 2);
  EXPECT_EQ(strided->info.moe_layers.size(), 23u);
  // The remote code renormalises only when k > 1.
  auto k1 = Parse("{" + body.substr(0, body.find("\"num_experts_per_tok\"")) +
                  R"("num_experts_per_tok":1,)" +
                  body.substr(body.find("\"scoring_func\"")) + "}");
  ASSERT_TRUE(k1.ok()) << k1.status();
  EXPECT_FALSE(k1->info.layer.route_norm);
  EXPECT_EQ(HfTensorName(HfFamily::kMimoV2Flash, 1, WeightRole::kW2, 255),
            "model.layers.1.mlp.experts.255.down_proj.weight");
  EXPECT_EQ(
      HfTensorName(HfFamily::kMimoV2Flash, 1, WeightRole::kExpertBias, -1),
      "model.layers.1.mlp.gate.e_score_correction_bias");
  // deepseek_v3 itself takes no per-layer list.
  auto v3 =
      Parse("{" + body.substr(body.find("\"hidden_size\"")) +
            R"(,"model_type":"deepseek_v3","moe_layer_freq":[)" + freq + "]}");
  ASSERT_FALSE(v3.ok());
  EXPECT_TRUE(Mentions(v3.status(), "moe_layer_freq")) << v3.status();
}

TEST(HfFamilies, UnknownModelTypeListsTheSupportedFamilies) {
  // SwitchTransformers is encoder-decoder: out of scope, never a family.
  auto s = Parse(R"({"model_type":"switch_transformers","hidden_size":64})");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s.status(), "'switch_transformers'"));
  for (HfFamily f : AllHfFamilies()) {
    EXPECT_TRUE(Mentions(s.status(), HfFamilyName(f))) << HfFamilyName(f);
  }
}

TEST(HfFamilies, ArchitectureOfAnotherModelIsRefused) {
  auto s = Parse(
      R"({"model_type":"mixtral","architectures":["MixtralForSequenceClassification"],
    "hidden_size":64,"num_hidden_layers":1,"intermediate_size":32,
    "num_local_experts":4,"num_experts_per_tok":2})");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Mentions(s.status(), "MixtralForSequenceClassification"));
  EXPECT_TRUE(Mentions(s.status(), "MixtralForCausalLM"));
  // Llama 4's text-only class under the multimodal model_type.
  auto l4 = Parse(
      R"({"model_type":"llama4","architectures":["Llama4ForCausalLM"],
    "text_config":{"hidden_size":64,"num_hidden_layers":2,"intermediate_size":32,
    "num_local_experts":4,"num_experts_per_tok":1}})");
  EXPECT_TRUE(Mentions(l4.status(), "Llama4ForCausalLM"));
}

TEST(HfFamilies, UnknownQuantisationIsRefused) {
  const std::string body =
      R"("model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":1,
    "moe_intermediate_size":32,"num_experts":4,"num_experts_per_tok":2,)";
  for (const char* method : {"awq", "gptq", "compressed-tensors", "mxfp4"}) {
    auto s = Parse("{" + body + R"("quantization_config":{"quant_method":")" +
                   method + R"(","bits":4}})");
    ASSERT_FALSE(s.ok()) << method;
    EXPECT_TRUE(Mentions(s.status(), std::string("'") + method + "'"))
        << s.status();
    EXPECT_TRUE(Mentions(s.status(), "quant_method")) << s.status();
  }
  auto fp8 = Parse("{" + body +
                   R"("quantization_config":{"quant_method":"fp8",
      "weight_block_size":[128,128]}})");
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_EQ(fp8->quant_method, "fp8");
  auto no_method = Parse("{" + body + R"("quantization_config":{"bits":4}})");
  EXPECT_TRUE(Mentions(no_method.status(), "quant_method"));
}

// Nemotron 3 Super's shape of config (LatentMoE, hybrid layer pattern) and
// Nano's (no latent, mlp_bias false): DeepSeek-V3 routing over non-gated
// relu2 experts, MoE layers where the pattern says E.
TEST(HfFamilies, NemotronHPatternLatentAndRouting) {
  const std::string body =
      R"("architectures":["NemotronHForCausalLM"],"model_type":"nemotron_h",
    "hidden_size":4096,"num_hidden_layers":8,"n_routed_experts":512,
    "num_experts_per_tok":22,"moe_intermediate_size":2688,
    "moe_shared_expert_intermediate_size":5376,"mlp_hidden_act":"relu2",
    "n_group":1,"topk_group":1,"norm_topk_prob":true,
    "routed_scaling_factor":5.0,"hybrid_override_pattern":"ME*EM-EE",)";
  auto super = Parse("{" + body + R"("moe_latent_size":1024,"mlp_bias":true})");
  ASSERT_TRUE(super.ok()) << super.status();
  const auto& c = super->info.layer;
  EXPECT_EQ(super->family, HfFamily::kNemotronH);
  EXPECT_EQ(super->info.moe_layers, (std::vector<int64_t>{1, 3, 6, 7}));
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm && !c.gated);
  EXPECT_EQ(c.act, Activation::kRelu2);
  EXPECT_EQ(c.route_scale, 5.0f);
  EXPECT_EQ(c.latent, 1024);
  EXPECT_TRUE(c.latent_bias);
  EXPECT_EQ(c.shared_inter, 5376);
  auto nano = Parse("{" + body + R"("moe_latent_size":null,"mlp_bias":false})");
  ASSERT_TRUE(nano.ok()) << nano.status();
  EXPECT_EQ(nano->info.layer.latent, 0);
  EXPECT_FALSE(nano->info.layer.latent_bias);
  EXPECT_EQ(HfTensorName(HfFamily::kNemotronH, 3, WeightRole::kW3, 7),
            "backbone.layers.3.mixer.experts.7.up_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kNemotronH, 3, WeightRole::kLatentB1, -1),
            "backbone.layers.3.mixer.fc1_latent_proj.bias");
  // transformers v5's layers_block_type says the same.
  auto v5 = Parse(
      R"({"model_type":"nemotron_h","hidden_size":64,"num_hidden_layers":4,
    "n_routed_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,
    "layers_block_type":["mamba","moe","full_attention","moe"]})");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(v5->info.moe_layers, (std::vector<int64_t>{1, 3}));
  // A pattern of the wrong length, an unknown layer kind, another
  // activation, or no pattern at all are refused naming the key.
  auto short_pattern = Parse(
      R"({"model_type":"nemotron_h","hidden_size":64,"num_hidden_layers":4,
    "n_routed_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,
    "hybrid_override_pattern":"MEM"})");
  EXPECT_TRUE(Mentions(short_pattern.status(), "hybrid_override_pattern"))
      << short_pattern.status();
  auto bad_kind = Parse(
      R"({"model_type":"nemotron_h","hidden_size":64,"num_hidden_layers":4,
    "n_routed_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,
    "hybrid_override_pattern":"MEXE"})");
  EXPECT_TRUE(Mentions(bad_kind.status(), "'X'")) << bad_kind.status();
  auto silu = Parse("{" + body + R"("mlp_hidden_act":"silu"})");
  EXPECT_TRUE(Mentions(silu.status(), "mlp_hidden_act")) << silu.status();
  auto none = Parse(
      R"({"model_type":"nemotron_h","hidden_size":64,"num_hidden_layers":4,
    "n_routed_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32})");
  EXPECT_TRUE(Mentions(none.status(), "hybrid_override_pattern"))
      << none.status();
}

TEST(HfFamilies, Gemma4ReadsTextConfigAndItsMoeBlock) {
  const std::string text =
      R"("model_type":"gemma4_text","hidden_size":2816,"num_hidden_layers":30,
    "num_experts":128,"top_k_experts":8,"moe_intermediate_size":704,
    "intermediate_size":2112,"hidden_activation":"gelu_pytorch_tanh",
    "rms_norm_eps":1e-06,)";
  auto s = Parse(
      R"({"model_type":"gemma4","architectures":["Gemma4ForConditionalGeneration"],
    "text_config":{)" +
      text + R"("enable_moe_block":true},"vision_config":{"hidden_size":48}})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kGemma4);
  EXPECT_EQ(s->info.moe_layers.size(), 30u);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.shared_inter, 2112);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(c.route_norm && c.router_prenorm && c.per_expert_scale &&
              c.branch_norms);
  EXPECT_EQ(c.act, Activation::kGeluTanh);
  EXPECT_EQ(
      HfTensorName(HfFamily::kGemma4, 2, WeightRole::kExpertsOutNorm, -1),
      "model.language_model.layers.2.post_feedforward_layernorm_2.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kGemma4, 2, WeightRole::kSharedInNorm, -1),
            "model.language_model.layers.2.pre_feedforward_layernorm.weight");
  // A dense Gemma 4 has no MoE layer to serve.
  auto dense = Parse(R"({"model_type":"gemma4","text_config":{)" + text +
                     R"("enable_moe_block":false}})");
  EXPECT_TRUE(Mentions(dense.status(), "enable_moe_block")) << dense.status();

  // Saved text-only (Gemma4ForCausalLM): the same text config at the top
  // level, its layers under model.layers.
  auto text_only = Parse(R"({"architectures":["Gemma4ForCausalLM"],)" + text +
                         R"("enable_moe_block":true})");
  ASSERT_TRUE(text_only.ok()) << text_only.status();
  EXPECT_EQ(text_only->family, HfFamily::kGemma4Text);
  EXPECT_EQ(text_only->info.layer, c);
  EXPECT_EQ(HfTensorName(HfFamily::kGemma4Text, 2, WeightRole::kGate, -1),
            "model.layers.2.router.proj.weight");
  auto text_dense = Parse(R"({"architectures":["Gemma4ForCausalLM"],)" + text +
                          R"("enable_moe_block":false})");
  EXPECT_TRUE(Mentions(text_dense.status(), "enable_moe_block"))
      << text_dense.status();
}

TEST(HfFamilies, KimiK3ReadsTextConfigLatentSituAndCompressedTensors) {
  const std::string text =
      R"("model_type":"kimi_linear","hidden_size":7168,"num_hidden_layers":8,
    "num_experts":896,"num_experts_per_token":16,"num_shared_experts":2,
    "moe_intermediate_size":1024,"routed_expert_hidden_size":3584,
    "latent_moe_use_norm":true,"moe_router_activation_func":"sigmoid",
    "moe_renormalize":true,"routed_scaling_factor":2.827,
    "num_expert_group":1,"topk_group":1,"hidden_act":"situ",
    "activation_situ_beta":4.0,"activation_situ_linear_beta":25.0,
    "rms_norm_eps":1e-05,"first_k_dense_replace":1,"moe_layer_freq":1)";
  const std::string top =
      R"({"model_type":"kimi_k3","architectures":["KimiK3ForConditionalGeneration"],
    "text_config":{)" +
      text + "}";
  auto s = Parse(top + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kKimiK3);
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(c.num_experts, 896);
  EXPECT_EQ(c.top_k, 16);
  EXPECT_EQ(c.shared_inter, 2048);
  EXPECT_EQ(c.latent, 3584);
  EXPECT_TRUE(c.latent_norm && !c.latent_bias && c.gated);
  EXPECT_EQ(c.act, Activation::kSitu);
  EXPECT_EQ(c.act_beta, 4.0f);
  EXPECT_EQ(c.act_linear_beta, 25.0f);
  EXPECT_EQ(c.norm_eps, 1e-5f);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.n_groups, 1);
  EXPECT_FLOAT_EQ(c.route_scale, 2.827f);
  EXPECT_EQ(HfTensorName(HfFamily::kKimiK3, 1, WeightRole::kLatentW1, -1),
            "language_model.model.layers.1.block_sparse_moe."
            "routed_expert_down_proj.weight");
  // The release's compressed-tensors MXFP4 is read; another format is not.
  auto mx = Parse(top + R"(,"quantization_config":{"quant_method":
    "compressed-tensors","format":"mxfp4-pack-quantized"}})");
  ASSERT_TRUE(mx.ok()) << mx.status();
  EXPECT_EQ(mx->quant_method, "compressed-tensors");
  auto int4 = Parse(top + R"(,"quantization_config":{"quant_method":
    "compressed-tensors","format":"pack-quantized"}})");
  EXPECT_TRUE(Mentions(int4.status(), "'pack-quantized'")) << int4.status();
  // Groups count only when there are more than the kept ones.
  std::string grouped_text = text;
  const std::string one_group = R"("num_expert_group":1,"topk_group":1)";
  grouped_text.replace(grouped_text.find(one_group), one_group.size(),
                       R"("num_expert_group":8,"topk_group":4)");
  auto grouped =
      Parse(R"({"model_type":"kimi_k3","text_config":{)" + grouped_text + "}}");
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_EQ(grouped->info.layer.n_groups, 8);
  EXPECT_EQ(grouped->info.layer.topk_groups, 4);
}

// FlexOlmo and MiniMax-Text-01 are OLMoE's and Mixtral's MoE under their
// own model_type: the same layer config and names as the family they are
// described by.
TEST(HfFamilies, FlexOlmoAndMinimaxAreReadAsOlmoeAndMixtral) {
  auto flex = Parse(
      R"({"model_type":"flex_olmo","architectures":["FlexOlmoForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":32,"intermediate_size":11008,
    "num_experts":7,"num_experts_per_tok":7,"norm_topk_prob":false})");
  auto olmoe = Parse(
      R"({"model_type":"olmoe","hidden_size":4096,"num_hidden_layers":32,
    "intermediate_size":11008,"num_experts":7,"num_experts_per_tok":7,
    "norm_topk_prob":false})");
  ASSERT_TRUE(flex.ok()) << flex.status();
  ASSERT_TRUE(olmoe.ok()) << olmoe.status();
  EXPECT_EQ(flex->family, HfFamily::kFlexOlmo);
  EXPECT_EQ(flex->info.layer, olmoe->info.layer);
  EXPECT_EQ(flex->info.moe_layers.size(), 32u);
  EXPECT_FALSE(flex->info.layer.route_norm);
  EXPECT_EQ(HfTensorName(HfFamily::kFlexOlmo, 3, WeightRole::kW2, 6),
            "model.layers.3.mlp.experts.6.down_proj.weight");
  auto mm = Parse(
      R"({"model_type":"minimax","architectures":["MiniMaxText01ForCausalLM"],
    "hidden_size":6144,"num_hidden_layers":80,"intermediate_size":9216,
    "num_local_experts":32,"num_experts_per_tok":2,
    "attn_type_list":[0,0,0,0,0,0,0,1]})");
  ASSERT_TRUE(mm.ok()) << mm.status();
  EXPECT_EQ(mm->family, HfFamily::kMinimax);
  const auto& c = mm->info.layer;
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(c.num_experts, 32);
  EXPECT_EQ(c.inter, 9216);
  EXPECT_EQ(mm->info.moe_layers.size(), 80u);
  EXPECT_EQ(HfTensorName(HfFamily::kMinimax, 79, WeightRole::kGate, -1),
            "model.layers.79.block_sparse_moe.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kMinimax, 0, WeightRole::kW1, 31),
            "model.layers.0.block_sparse_moe.experts.31.w1.weight");
  for (const char* arch : {"MiniMaxForCausalLM", "MiniMaxM1ForCausalLM"}) {
    auto other = Parse(absl::StrCat(
        R"({"model_type":"minimax","architectures":[")", arch,
        R"("],"hidden_size":64,"num_hidden_layers":2,"intermediate_size":16,
    "num_local_experts":4,"num_experts_per_tok":2})"));
    EXPECT_TRUE(other.ok()) << arch << ": " << other.status();
  }
}

// Mellum: Qwen3-MoE's block; mlp_layer_types names the sparse layers.
TEST(HfFamilies, MellumSparseLayersFromMlpLayerTypes) {
  auto s = Parse(
      R"({"model_type":"mellum","architectures":["MellumForCausalLM"],
    "hidden_size":2304,"num_hidden_layers":4,"intermediate_size":7168,
    "num_experts":64,"num_experts_per_tok":8,"moe_intermediate_size":896,
    "norm_topk_prob":true,
    "mlp_layer_types":["dense","sparse","sparse","dense"],
    "layer_types":["sliding_attention","full_attention","sliding_attention",
                   "full_attention"]})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kMellum);
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s->info.layer.inter, 896);
  EXPECT_TRUE(s->info.layer.route_norm);
  EXPECT_EQ(HfTensorName(HfFamily::kMellum, 1, WeightRole::kW1, 63),
            "model.layers.1.mlp.experts.63.gate_proj.weight");
  auto all = Parse(
      R"({"model_type":"mellum","hidden_size":64,"num_hidden_layers":3,
    "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16})");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->info.moe_layers, (std::vector<int64_t>{0, 1, 2}));
  auto short_list = Parse(
      R"({"model_type":"mellum","hidden_size":64,"num_hidden_layers":3,
    "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16,
    "mlp_layer_types":["sparse","sparse"]})");
  EXPECT_TRUE(Mentions(short_list.status(), "mlp_layer_types"))
      << short_list.status();
}

// Qwen3-VL-MoE: Qwen3-MoE's keys under text_config, experts fused for x·W
// under model.language_model.
TEST(HfFamilies, Qwen3VlMoeReadsTextConfigAndFusedExperts) {
  auto s = Parse(
      R"({"model_type":"qwen3_vl_moe",
    "architectures":["Qwen3VLMoeForConditionalGeneration"],
    "vision_config":{"depth":27,"hidden_size":1152},
    "text_config":{"model_type":"qwen3_vl_moe_text","hidden_size":2048,
      "num_hidden_layers":48,"intermediate_size":6144,"num_experts":128,
      "num_experts_per_tok":8,"moe_intermediate_size":768,
      "norm_topk_prob":true,"decoder_sparse_step":1,"mlp_only_layers":[]}})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kQwen3VlMoe);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.inter, 768);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(s->info.moe_layers.size(), 48u);
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3VlMoe, 4, WeightRole::kGate, -1),
            "model.language_model.layers.4.mlp.gate.weight");
  MoeLayerConfig k;
  k.hidden = 2048;
  k.inter = 768;
  k.num_experts = 128;
  const HfTensorLocation up =
      HfLocate(HfFamily::kQwen3VlMoe, k, 4, WeightRole::kW3, 5);
  EXPECT_EQ(up.name, "model.language_model.layers.4.mlp.experts.gate_up_proj");
  EXPECT_TRUE(up.fused && !up.linear);
  EXPECT_EQ(up.fused_shape, (std::vector<int64_t>{128, 2048, 1536}));
  EXPECT_EQ(up.col0, 768);  // the up columns follow the gate's
  const HfTensorLocation down =
      HfLocate(HfFamily::kQwen3VlMoe, k, 4, WeightRole::kW2, 5);
  EXPECT_EQ(down.name, "model.language_model.layers.4.mlp.experts.down_proj");
  EXPECT_EQ(down.fused_shape, (std::vector<int64_t>{128, 768, 2048}));
  auto flat = Parse(
      R"({"model_type":"qwen3_vl_moe","hidden_size":64,"num_hidden_layers":2,
    "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16})");
  EXPECT_TRUE(Mentions(flat.status(), "text_config")) << flat.status();
}

// GraniteMoe and its shared forms: the router's layer, nn.Linear experts
// packed in input_linear / output_linear, and the fused shared MLP.
TEST(HfFamilies, GraniteMoeFamiliesRouterLayerAndPackedLinears) {
  auto g = Parse(
      R"({"model_type":"granitemoe","architectures":["GraniteMoeForCausalLM"],
    "hidden_size":1536,"num_hidden_layers":32,"intermediate_size":512,
    "num_local_experts":40,"num_experts_per_tok":8,
    "embedding_multiplier":12.0,"residual_multiplier":0.22})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->family, HfFamily::kGraniteMoe);
  EXPECT_EQ(g->info.layer.num_experts, 40);
  EXPECT_TRUE(g->info.layer.route_norm);
  EXPECT_FALSE(g->info.layer.has_shared());
  EXPECT_EQ(g->info.moe_layers.size(), 32u);
  EXPECT_EQ(HfTensorName(HfFamily::kGraniteMoe, 2, WeightRole::kGate, -1),
            "model.layers.2.block_sparse_moe.router.layer.weight");
  MoeLayerConfig k;
  k.hidden = 1536;
  k.inter = 512;
  k.num_experts = 40;
  k.shared_inter = 1024;
  const HfTensorLocation up =
      HfLocate(HfFamily::kGraniteMoe, k, 2, WeightRole::kW3, 7);
  EXPECT_EQ(up.name, "model.layers.2.block_sparse_moe.input_linear.weight");
  EXPECT_TRUE(up.fused && up.linear);
  EXPECT_EQ(up.fused_shape, (std::vector<int64_t>{40, 1024, 1536}));
  EXPECT_EQ(up.col0, 512);
  const HfTensorLocation down =
      HfLocate(HfFamily::kGraniteMoe, k, 2, WeightRole::kW2, 7);
  EXPECT_EQ(down.name, "model.layers.2.block_sparse_moe.output_linear.weight");
  EXPECT_EQ(down.fused_shape, (std::vector<int64_t>{40, 1536, 512}));

  const std::string hybrid =
      R"({"model_type":"granitemoehybrid",
    "architectures":["GraniteMoeHybridForCausalLM"],
    "hidden_size":1536,"num_hidden_layers":4,"intermediate_size":512,
    "num_local_experts":64,"num_experts_per_tok":6,
    "shared_intermediate_size":1024,
    "layers_block_type":["mamba","attention","mamba","mamba"]})";
  auto h = Parse(hybrid);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->family, HfFamily::kGraniteMoeHybrid);
  EXPECT_EQ(h->info.moe_layers, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(h->info.layer.shared_inter, 1024);
  EXPECT_FALSE(h->info.layer.shared_gate);
  for (HfFamily f :
       {HfFamily::kGraniteMoeShared, HfFamily::kGraniteMoeHybrid}) {
    SCOPED_TRACE(HfFamilyName(f));
    // The shared MLP's gate rows over its up rows in one [2S, H] tensor.
    const HfTensorLocation sg = HfLocate(f, k, 1, WeightRole::kSharedW1, -1);
    const HfTensorLocation su = HfLocate(f, k, 1, WeightRole::kSharedW3, -1);
    EXPECT_EQ(sg.name, "model.layers.1.shared_mlp.input_linear.weight");
    EXPECT_EQ(su.name, sg.name);
    EXPECT_EQ(sg.stored_shape, (std::vector<int64_t>{2048, 1536}));
    EXPECT_EQ(sg.col0, 0);
    EXPECT_EQ(su.col0, 1024);
    EXPECT_EQ(su.out, 1024);
    EXPECT_EQ(HfTensorName(f, 1, WeightRole::kSharedW2, -1),
              "model.layers.1.shared_mlp.output_linear.weight");
  }
  auto shared = Parse(
      R"({"model_type":"granitemoeshared",
    "architectures":["GraniteMoeSharedForCausalLM"],"hidden_size":1024,
    "num_hidden_layers":24,"intermediate_size":512,"num_local_experts":32,
    "num_experts_per_tok":8,"shared_intermediate_size":1024})");
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(shared->info.layer.shared_inter, 1024);
}

// Snowflake Arctic: Mixtral's block every moe_layer_frequency-th layer.
TEST(HfFamilies, ArcticMoeLayersByFrequency) {
  const std::string body =
      R"("model_type":"arctic","architectures":["ArcticForCausalLM"],
    "hidden_size":7168,"num_hidden_layers":6,"intermediate_size":4864,
    "num_local_experts":128,"num_experts_per_tok":2,"parallel_attn_mlp_res":true)";
  auto every = Parse("{" + body + R"(,"moe_layer_frequency":1})");
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_EQ(every->family, HfFamily::kArctic);
  EXPECT_EQ(every->info.moe_layers, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(every->info.layer.route_norm);
  auto second = Parse("{" + body + R"(,"moe_layer_frequency":2})");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->info.moe_layers, (std::vector<int64_t>{1, 3, 5}));
  auto bad = Parse("{" + body + R"(,"moe_layer_frequency":0})");
  EXPECT_TRUE(Mentions(bad.status(), "moe_layer_frequency")) << bad.status();
  // The DeepSpeed-FP quantised release is no format the loader reads.
  auto dsfp = Parse("{" + body + R"(,"moe_layer_frequency":1,
    "quantization_config":{"quant_method":"deepspeedfp","bits":8}})");
  EXPECT_TRUE(Mentions(dsfp.status(), "'deepspeedfp'")) << dsfp.status();
  // Top-1 routing is not renormalised (a renorm of one weight is none).
  auto top1 = Parse(R"({"model_type":"arctic","hidden_size":64,
    "num_hidden_layers":2,"intermediate_size":16,"num_local_experts":4,
    "num_experts_per_tok":1,"moe_layer_frequency":1})");
  ASSERT_TRUE(top1.ok()) << top1.status();
  EXPECT_FALSE(top1->info.layer.route_norm);
  EXPECT_EQ(HfTensorName(HfFamily::kArctic, 1, WeightRole::kW3, 127),
            "model.layers.1.block_sparse_moe.experts.127.w3.weight");
}

// Aria: text_config, moe_topk, shared experts of the routed width, fused
// x·W fc1 / fc2 under language_model.model.
TEST(HfFamilies, AriaTextConfigSharedExpertsAndFusedFc) {
  auto s = Parse(
      R"({"model_type":"aria","architectures":["AriaForConditionalGeneration"],
    "vision_config":{"model_type":"idefics3_vision","hidden_size":1152},
    "text_config":{"model_type":"aria_text","hidden_size":2560,
      "num_hidden_layers":28,"intermediate_size":1664,"moe_num_experts":64,
      "moe_topk":6,"moe_num_shared_experts":2}})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kAria);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.top_k, 6);
  EXPECT_EQ(c.inter, 1664);
  EXPECT_EQ(c.shared_inter, 2 * 1664);
  EXPECT_FALSE(c.shared_gate);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(s->info.moe_layers.size(), 28u);
  EXPECT_EQ(HfTensorName(HfFamily::kAria, 3, WeightRole::kGate, -1),
            "language_model.model.layers.3.mlp.router.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kAria, 3, WeightRole::kSharedW3, -1),
            "language_model.model.layers.3.mlp.shared_experts.up_proj.weight");
  MoeLayerConfig k = c;
  const HfTensorLocation gate =
      HfLocate(HfFamily::kAria, k, 3, WeightRole::kW1, 9);
  EXPECT_EQ(gate.name, "language_model.model.layers.3.mlp.experts.fc1.weight");
  EXPECT_EQ(gate.fused_shape, (std::vector<int64_t>{64, 2560, 3328}));
  EXPECT_EQ(gate.col0, 0);
  EXPECT_EQ(HfLocate(HfFamily::kAria, k, 3, WeightRole::kW2, 9).name,
            "language_model.model.layers.3.mlp.experts.fc2.weight");
  auto no_topk = Parse(
      R"({"model_type":"aria","text_config":{"hidden_size":64,
    "num_hidden_layers":2,"intermediate_size":16,"moe_num_experts":4}})");
  EXPECT_TRUE(Mentions(no_topk.status(), "moe_topk")) << no_topk.status();
}

// Jamba: feed_forward.*, softmax top-k without renorm, MoE layers by
// expert_layer_period / expert_layer_offset.
TEST(HfFamilies, JambaExpertLayerPeriodAndOffset) {
  const std::string body =
      R"("model_type":"jamba","architectures":["JambaForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":8,"intermediate_size":14336,
    "num_experts":16,"num_experts_per_tok":2,"attn_layer_period":8,
    "attn_layer_offset":4)";
  auto s = Parse("{" + body +
                 R"(,"expert_layer_period":2,"expert_layer_offset":1})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kJamba);
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_FALSE(s->info.layer.route_norm);
  EXPECT_EQ(s->info.layer.score_func, ScoreFunc::kSoftmax);
  auto third = Parse("{" + body +
                     R"(,"expert_layer_period":3,"expert_layer_offset":0})");
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->info.moe_layers, (std::vector<int64_t>{0, 3, 6}));
  auto bad = Parse("{" + body +
                   R"(,"expert_layer_period":2,"expert_layer_offset":2})");
  EXPECT_TRUE(Mentions(bad.status(), "expert_layer_offset")) << bad.status();
  EXPECT_EQ(HfTensorName(HfFamily::kJamba, 1, WeightRole::kGate, -1),
            "model.layers.1.feed_forward.router.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kJamba, 1, WeightRole::kW3, 15),
            "model.layers.1.feed_forward.experts.15.up_proj.weight");
}

// DBRX: d_model / n_layers, the MoE keys in ffn_config, per-role expert
// parameters [E*I, H] under transformer.blocks.{L}.ffn.
TEST(HfFamilies, DbrxFfnConfigAndPackedRows) {
  const std::string head =
      R"({"model_type":"dbrx","architectures":["DbrxForCausalLM"],
    "d_model":6144,"n_layers":40,"n_heads":48,
    "attn_config":{"kv_n_heads":8,"clip_qkv":8},
    "ffn_config":{"moe_num_experts":16,"moe_top_k":4,"ffn_hidden_size":10752,
      "ffn_act_fn":{"name":"silu"},"moe_jitter_eps":0,)";
  auto s = Parse(head + R"("moe_normalize_expert_weights":1}})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kDbrx);
  EXPECT_EQ(c.hidden, 6144);
  EXPECT_EQ(s->info.num_layers, 40);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(c.inter, 10752);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(s->info.moe_layers.size(), 40u);
  EXPECT_EQ(HfTensorName(HfFamily::kDbrx, 7, WeightRole::kGate, -1),
            "transformer.blocks.7.ffn.router.layer.weight");
  MoeLayerConfig k;
  k.hidden = 6144;
  k.inter = 10752;
  k.num_experts = 16;
  const HfTensorLocation up =
      HfLocate(HfFamily::kDbrx, k, 7, WeightRole::kW3, 2);
  EXPECT_EQ(up.name, "transformer.blocks.7.ffn.experts.mlp.v1");
  EXPECT_TRUE(up.linear);
  EXPECT_EQ(up.stored_shape, (std::vector<int64_t>{16 * 10752, 6144}));
  const HfTensorLocation down =
      HfLocate(HfFamily::kDbrx, k, 7, WeightRole::kW2, 2);
  EXPECT_EQ(down.name, "transformer.blocks.7.ffn.experts.mlp.w2");
  EXPECT_FALSE(down.linear);  // x·W: each expert's [I, H] as stored
  EXPECT_EQ(down.fused_shape, (std::vector<int64_t>{16, 10752, 6144}));
  auto none = Parse(head + R"("moe_normalize_expert_weights":null}})");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->info.layer.route_norm);
  auto l2 = Parse(head + R"("moe_normalize_expert_weights":2}})");
  EXPECT_TRUE(Mentions(l2.status(), "moe_normalize_expert_weights"))
      << l2.status();
  auto gelu = Parse(
      R"({"model_type":"dbrx","d_model":64,"n_layers":2,"ffn_config":{
    "moe_num_experts":4,"moe_top_k":2,"ffn_hidden_size":16,
    "ffn_act_fn":{"name":"gelu"}}})");
  EXPECT_TRUE(Mentions(gelu.status(), "ffn_act_fn")) << gelu.status();
  auto flat = Parse(R"({"model_type":"dbrx","d_model":64,"n_layers":2})");
  EXPECT_TRUE(Mentions(flat.status(), "ffn_config")) << flat.status();
}

// ERNIE-4.5-VL as released (28B-A3B's keys): the [text, vision] pairs give
// the text experts as the model's layer config and each MoE layer's vision
// experts (512 wide, the text width's shared experts) as layer 28 + L; a
// layer range where one modality has experts and the other not, and a pair
// of another length, are refused by name.
TEST(HfFamilies, Ernie45VlReadsItsTextAndVisionExpertSets) {
  auto body = [](const std::string& end) {
    return absl::StrCat(
        R"({"model_type":"ernie4_5_moe_vl",
    "architectures":["Ernie4_5_VLMoeForConditionalGeneration"],
    "hidden_size":2560,"intermediate_size":12288,"num_hidden_layers":28,
    "moe_num_experts":[64,64],"moe_intermediate_size":[1536,512],"moe_k":6,
    "moe_layer_start_index":[1,1],"moe_layer_end_index":)",
        end, R"(,"moe_layer_interval":1,"moe_num_shared_experts":2,
    "moe_norm_min":1e-12,"use_bias":false,"vision_config":{"depth":32}})");
  };
  auto s = Parse(body("[29,28]"));
  ASSERT_TRUE(s.ok()) << s.status();
  const ModelInfo& m = s->info;
  EXPECT_EQ(s->family, HfFamily::kErnie45VlMoe);
  EXPECT_EQ(m.layer.num_experts, 64);
  EXPECT_EQ(m.layer.inter, 1536);
  EXPECT_EQ(m.layer.top_k, 6);
  EXPECT_EQ(m.layer.shared_inter, 2 * 1536);
  EXPECT_TRUE(m.layer.use_bias);
  EXPECT_EQ(m.RequestLayers().size(), 27u);
  EXPECT_EQ(m.RequestLayers().front(), 1);
  ASSERT_EQ(m.vision_layers.size(), 27u);
  EXPECT_EQ(m.vision_layers.at(1), 29);
  EXPECT_EQ(m.vision_layers.at(27), 55);
  EXPECT_EQ(m.VisionOwner(55), std::optional<int64_t>(27));
  EXPECT_EQ(m.VisionOwner(27), std::nullopt);
  EXPECT_TRUE(m.HasLayer(29));
  const MoeLayerConfig& v = m.LayerConfig(29);
  EXPECT_EQ(v.inter, 512);
  EXPECT_EQ(v.shared_inter, 2 * 1536);
  EXPECT_EQ(WithPerLayerOptionsOf(v, m.layer), m.layer);
  auto apart = Parse(body("[29,20]"));
  EXPECT_TRUE(Mentions(apart.status(), "moe_layer_end_index"))
      << apart.status();
  EXPECT_TRUE(Mentions(apart.status(), "dense MLP")) << apart.status();
  auto three = Parse(body("[29,28,27]"));
  EXPECT_TRUE(Mentions(three.status(), "'moe_layer_end_index'"))
      << three.status();
  EXPECT_TRUE(Mentions(three.status(), "[text, vision] pair"))
      << three.status();
}

// Hunyuan-A13B: per-layer lists of one value are that value; a list whose
// layers differ gives each layer its own config, one of another length is
// refused naming the key.
TEST(HfFamilies, HunyuanUniformPerLayerLists) {
  auto body = [](const std::string& topk, const std::string& inter) {
    return absl::StrCat(
        R"({"model_type":"hunyuan_v1_moe",
    "architectures":["HunYuanMoEV1ForCausalLM"],"hidden_size":4096,
    "num_hidden_layers":4,"intermediate_size":3072,"num_experts":64,
    "use_mixed_mlp_moe":true,"num_shared_expert":[1,1,1,1],"moe_topk":)",
        topk, R"(,"moe_intermediate_size":)", inter, "}");
  };
  auto s = Parse(body("[8,8,8,8]", "[3072,3072,3072,3072]"));
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kHunyuanV1Moe);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.inter, 3072);
  EXPECT_EQ(c.shared_inter, 3072);
  EXPECT_FALSE(c.shared_gate);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(s->info.moe_layers.size(), 4u);
  auto scalar = Parse(body("8", "3072"));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->info.layer, c);
  // A per-layer top_k: layer 2 routes to 4 experts, the others to 8.
  auto mixed = Parse(body("[8,8,4,8]", "[3072,3072,3072,3072]"));
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->info.layer, c);
  ASSERT_EQ(mixed->info.layer_overrides.size(), 1u);
  EXPECT_EQ(mixed->info.LayerConfig(2).top_k, 4);
  EXPECT_EQ(mixed->info.LayerConfig(3).top_k, 8);
  EXPECT_EQ(mixed->info.MaxTopK(), 8);
  EXPECT_EQ(FirstLayerOfOwnShape(mixed->info), std::optional<int64_t>(2));
  EXPECT_EQ(FirstLayerOfOwnShape(s->info), std::nullopt);
  // transformers reads num_experts per layer too; the engine's expert
  // count is one per model, so a list that changes it is refused by name.
  auto experts = Parse(absl::StrReplaceAll(
      body("8", "3072"),
      {{R"("num_experts":64)", R"("num_experts":[64,64,32,64])"}}));
  EXPECT_TRUE(Mentions(experts.status(), "layer 2")) << experts.status();
  EXPECT_TRUE(Mentions(experts.status(), "experts")) << experts.status();
  EXPECT_TRUE(Mentions(experts.status(), "num_experts")) << experts.status();
  // A layer's moe_intermediate_size other than intermediate_size is refused
  // as on every layer (transformers' experts are intermediate_size wide).
  auto wide_one = Parse(body("8", "[3072,3072,2048,3072]"));
  EXPECT_TRUE(Mentions(wide_one.status(), "moe_intermediate_size"))
      << wide_one.status();
  auto short_list = Parse(body("[8,8,8]", "3072"));
  EXPECT_TRUE(Mentions(short_list.status(), "'moe_topk'"))
      << short_list.status();
  EXPECT_TRUE(Mentions(short_list.status(), "num_hidden_layers 4"))
      << short_list.status();
  auto wide = Parse(body("8", "[2048,2048,2048,2048]"));
  EXPECT_TRUE(Mentions(wide.status(), "moe_intermediate_size"))
      << wide.status();
  EXPECT_EQ(HfTensorName(HfFamily::kHunyuanV1Moe, 2, WeightRole::kGate, -1),
            "model.layers.2.mlp.gate.wg.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kHunyuanV1Moe, 2, WeightRole::kSharedW2, -1),
            "model.layers.2.mlp.shared_mlp.down_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kHunyuanV1Moe, 2, WeightRole::kW1, 63),
            "model.layers.2.mlp.experts.63.gate_proj.weight");
}

// Qwen3-Omni: the thinker's Qwen3-MoE two levels down
// (thinker_config.text_config), tensors under thinker.model.
TEST(HfFamilies, Qwen3OmniMoeReadsTheThinkersNestedConfig) {
  const std::string text =
      R"({"model_type":"qwen3_omni_moe_text","hidden_size":2048,
    "num_hidden_layers":48,"num_experts":128,"num_experts_per_tok":8,
    "moe_intermediate_size":768,"norm_topk_prob":true,
    "decoder_sparse_step":1,"mlp_only_layers":[]})";
  auto s = Parse(
      R"({"model_type":"qwen3_omni_moe",
    "architectures":["Qwen3OmniMoeForConditionalGeneration"],
    "talker_config":{"text_config":{"num_experts":128,"hidden_size":1024}},
    "thinker_config":{"model_type":"qwen3_omni_moe_thinker","text_config":)" +
      text + "}}");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kQwen3OmniMoe);
  EXPECT_EQ(s->info.layer.hidden, 2048);
  EXPECT_EQ(s->info.layer.num_experts, 128);
  EXPECT_EQ(s->info.layer.inter, 768);
  EXPECT_EQ(s->info.moe_layers.size(), 48u);
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3OmniMoe, 5, WeightRole::kW2, 127),
            "thinker.model.layers.5.mlp.experts.127.down_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kQwen3OmniMoe, 5, WeightRole::kW1, 0,
                         HfExpertLayout::kPacked),
            "thinker.model.layers.5.mlp.experts.gate_up_proj");
  auto flat =
      Parse(R"({"model_type":"qwen3_omni_moe","text_config":)" + text + "}");
  EXPECT_TRUE(Mentions(flat.status(), "thinker_config")) << flat.status();
  auto shallow = Parse(
      R"({"model_type":"qwen3_omni_moe","thinker_config":{"hidden_size":64}})");
  EXPECT_TRUE(Mentions(shallow.status(), "thinker_config.text_config"))
      << shallow.status();
}

// --- DeepSeek-style families described by difference or by their keys ---

// A layer list "dense" for the first `dense` layers, then "sparse".
std::string LayerTypes(int layers, int dense) {
  std::string types;
  for (int l = 0; l < layers; ++l) {
    types += std::string(l == 0 ? "" : ",") +
             (l < dense ? "\"dense\"" : "\"sparse\"");
  }
  return "[" + types + "]";
}

// deepseek-moe-16b as released: DeepSeek-V2's names and layer rule, softmax
// top-6 of 64 without renorm, two shared experts; keys its model code does
// not read (groups, a scale, another scoring_func) change nothing.
TEST(HfFamilies, DeepseekMoe16bIsV2WithoutGroupsOrScale) {
  const std::string body =
      R"("architectures":["DeepseekForCausalLM"],"model_type":"deepseek",
    "hidden_size":2048,"num_hidden_layers":28,"intermediate_size":10944,
    "moe_intermediate_size":1408,"n_routed_experts":64,"n_shared_experts":2,
    "num_experts_per_tok":6,"norm_topk_prob":false,"first_k_dense_replace":1,
    "moe_layer_freq":1,"scoring_func":"softmax","aux_loss_alpha":0.001,
    "seq_aux":true)";
  auto s = Parse("{" + body + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kDeepseek);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_FALSE(c.route_norm || c.use_bias);
  EXPECT_EQ(c.route_scale, 1.0f);
  EXPECT_EQ(c.n_groups, 0);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.shared_inter, 2816);
  EXPECT_EQ(s->info.moe_layers.size(), 27u);
  EXPECT_EQ(s->info.moe_layers.front(), 1);
  auto extra = Parse("{" + body +
                     R"(,"topk_method":"group_limited_greedy","n_group":8,
    "topk_group":3,"routed_scaling_factor":16.0})");
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(extra->info.layer, c);
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseek, 1, WeightRole::kW1, 63),
            "model.layers.1.mlp.experts.63.gate_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kDeepseek, 1, WeightRole::kSharedW2, -1),
            "model.layers.1.mlp.shared_experts.down_proj.weight");
}

// DeepSeek-V3.2 is DeepSeek-V3's MoE under its own model_type; its DSA
// indexer keys are attention's.
TEST(HfFamilies, DeepseekV32IsReadAsDeepseekV3) {
  const std::string body =
      R"("hidden_size":7168,"num_hidden_layers":61,
    "moe_intermediate_size":2048,"n_routed_experts":256,"n_shared_experts":1,
    "num_experts_per_tok":8,"routed_scaling_factor":2.5,"topk_method":"noaux_tc",
    "scoring_func":"sigmoid","n_group":8,"topk_group":4,"norm_topk_prob":true,
    "first_k_dense_replace":3,"moe_layer_freq":1,"num_nextn_predict_layers":1,
    "index_topk":2048,"index_n_heads":64,"index_head_dim":128)";
  auto v32 = Parse(
      R"({"model_type":"deepseek_v32","architectures":["DeepseekV32ForCausalLM"],)" +
      body + "}");
  auto v3 = Parse(R"({"model_type":"deepseek_v3",)" + body + "}");
  ASSERT_TRUE(v32.ok()) << v32.status();
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v32->family, HfFamily::kDeepseekV32);
  EXPECT_EQ(v32->info.layer, v3->info.layer);
  EXPECT_EQ(v32->info.moe_layers, v3->info.moe_layers);
  EXPECT_EQ(v32->info.layer.n_groups, 8);
  EXPECT_EQ(v32->info.moe_layers.back(), 60);  // the MTP layer 61 is not
  EXPECT_EQ(
      HfTensorName(HfFamily::kDeepseekV32, 3, WeightRole::kExpertBias, -1),
      "model.layers.3.mlp.gate.e_score_correction_bias");
}

// dots.llm1 as released: sigmoid, the correction bias, groups null (one),
// renorm, scale 2.5 on the routed experts; transformers' block ignores
// scoring_func and topk_method, and so does the reader.
TEST(HfFamilies, Dots1IsDeepseekV3sBlockWhateverItsScoringKeysSay) {
  const std::string body =
      R"("model_type":"dots1","architectures":["Dots1ForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":62,"intermediate_size":10944,
    "first_k_dense_replace":1,"moe_intermediate_size":1408,
    "n_routed_experts":128,"n_shared_experts":2,"num_experts_per_tok":6,
    "norm_topk_prob":true,"routed_scaling_factor":2.5,"n_group":null,
    "topk_group":null,"scoring_func":"sigmoid")";
  auto s = Parse("{" + body + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kDots1);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.n_groups, 1);
  EXPECT_EQ(c.shared_inter, 2816);
  EXPECT_EQ(s->info.moe_layers.size(), 61u);
  EXPECT_EQ(s->info.moe_layers.front(), 1);
  auto other =
      Parse("{" + body + R"(,"topk_method":"greedy","moe_layer_freq":2})");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->info.layer, c);
  EXPECT_EQ(other->info.moe_layers, s->info.moe_layers);
  EXPECT_EQ(HfTensorName(HfFamily::kDots1, 1, WeightRole::kSharedW1, -1),
            "model.layers.1.mlp.shared_experts.gate_proj.weight");
}

// GLM-4.7-Flash: GLM-4.5's MoE, 64 experts k 4, one shared, scale 1.8;
// mlp_layer_types says which layers are MoE, the MTP layer 47 never.
TEST(HfFamilies, Glm4MoeLiteReadsItsLayerList) {
  const std::string body =
      R"("model_type":"glm4_moe_lite","architectures":["Glm4MoeLiteForCausalLM"],
    "hidden_size":2048,"num_hidden_layers":47,"intermediate_size":10240,
    "moe_intermediate_size":1536,"n_routed_experts":64,"n_shared_experts":1,
    "num_experts_per_tok":4,"n_group":1,"topk_group":1,"norm_topk_prob":true,
    "routed_scaling_factor":1.8,"first_k_dense_replace":1,
    "num_nextn_predict_layers":1,"kv_lora_rank":512,"q_lora_rank":768)";
  auto listed =
      Parse("{" + body + R"(,"mlp_layer_types":)" + LayerTypes(47, 2) + "}");
  ASSERT_TRUE(listed.ok()) << listed.status();
  const auto& c = listed->info.layer;
  EXPECT_EQ(listed->family, HfFamily::kGlm4MoeLite);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_FLOAT_EQ(c.route_scale, 1.8f);
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(listed->info.moe_layers.size(), 45u);
  EXPECT_EQ(listed->info.moe_layers.front(), 2);
  EXPECT_EQ(listed->info.moe_layers.back(), 46);
  auto plain = Parse("{" + body + "}");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->info.moe_layers.front(), 1);
  auto bad = Parse("{" + body + R"(,"mlp_layer_types":["dense"]})");
  EXPECT_TRUE(Mentions(bad.status(), "mlp_layer_types")) << bad.status();
  EXPECT_EQ(HfTensorName(HfFamily::kGlm4MoeLite, 2, WeightRole::kW3, 7),
            "model.layers.2.mlp.experts.7.up_proj.weight");
}

// Solar Open: GLM-4.5's MoE on every layer, 128 experts k 8, one shared; a
// first_k_dense_replace its config does not have is not read.
TEST(HfFamilies, SolarOpenIsGlm4MoeOnEveryLayer) {
  auto s = Parse(
      R"({"model_type":"solar_open","architectures":["SolarOpenForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":48,"moe_intermediate_size":1280,
    "n_routed_experts":128,"n_shared_experts":1,"num_experts_per_tok":8,
    "n_group":1,"topk_group":1,"norm_topk_prob":true,
    "routed_scaling_factor":1.0,"first_k_dense_replace":3,"head_dim":128})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kSolarOpen);
  EXPECT_EQ(s->info.layer.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(s->info.layer.use_bias);
  EXPECT_EQ(s->info.layer.shared_inter, 1280);
  EXPECT_EQ(s->info.moe_layers.size(), 48u);
  EXPECT_EQ(s->info.moe_layers.front(), 0);
  EXPECT_EQ(HfTensorName(HfFamily::kSolarOpen, 0, WeightRole::kGate, -1),
            "model.layers.0.mlp.gate.weight");
}

// Kimi Linear as released: Kimi K3's gate keys (sigmoid, correction bias,
// renorm, scale 2.446, one group) over SiLU experts, one shared expert, MoE
// layers from first_k_dense_replace; names under block_sparse_moe.
TEST(HfFamilies, KimiLinearReadsKimiGateKeys) {
  const std::string body =
      R"("model_type":"kimi_linear","architectures":["KimiLinearForCausalLM"],
    "hidden_size":2304,"num_hidden_layers":27,"intermediate_size":9216,
    "moe_intermediate_size":1024,"num_experts":256,"num_experts_per_token":8,
    "num_shared_experts":1,"moe_router_activation_func":"sigmoid",
    "moe_renormalize":true,"routed_scaling_factor":2.446,
    "use_grouped_topk":true,"num_expert_group":1,"topk_group":1,
    "first_k_dense_replace":1,"moe_layer_freq":1,"hidden_act":"silu",
    "linear_attn_config":{"full_attn_layers":[4,8],"kda_layers":[1,2,3]})";
  auto s = Parse("{" + body + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kKimiLinear);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_FLOAT_EQ(c.route_scale, 2.446f);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.shared_inter, 1024);
  EXPECT_EQ(c.act, Activation::kSilu);
  EXPECT_EQ(c.latent, 0);
  EXPECT_EQ(s->info.moe_layers.size(), 26u);
  auto situ = Parse("{" + body + R"(,"hidden_act":"situ"})");
  EXPECT_TRUE(Mentions(situ.status(), "hidden_act")) << situ.status();
  EXPECT_EQ(HfTensorName(HfFamily::kKimiLinear, 1, WeightRole::kW1, 5),
            "model.layers.1.block_sparse_moe.experts.5.w1.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kKimiLinear, 1, WeightRole::kW2, 5),
            "model.layers.1.block_sparse_moe.experts.5.w2.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kKimiLinear, 1, WeightRole::kExpertBias, -1),
            "model.layers.1.block_sparse_moe.gate.e_score_correction_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kKimiLinear, 1, WeightRole::kSharedW1, -1),
            "model.layers.1.block_sparse_moe.shared_experts.gate_proj.weight");
}

// Ling V1 and Ling 2.0 both say model_type bailing_moe: the model class
// decides, and a config that names neither is refused naming both.
TEST(HfFamilies, BailingMoeV1AndV2AreToldApartByArchitectures) {
  const std::string v1 =
      R"("model_type":"bailing_moe","hidden_size":2048,"num_hidden_layers":28,
    "intermediate_size":5632,"moe_intermediate_size":1408,"num_experts":64,
    "num_shared_experts":2,"num_experts_per_tok":6,"norm_topk_prob":true,
    "use_qkv_bias":false)";
  auto lite =
      Parse(R"({"architectures":["BailingMoeForCausalLM"],)" + v1 + "}");
  ASSERT_TRUE(lite.ok()) << lite.status();
  EXPECT_EQ(lite->family, HfFamily::kBailingMoe);
  EXPECT_EQ(lite->info.family, "bailing_moe");
  EXPECT_EQ(lite->info.layer.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(lite->info.layer.route_norm);
  EXPECT_FALSE(lite->info.layer.use_bias);
  EXPECT_EQ(lite->info.layer.n_groups, 0);
  EXPECT_EQ(lite->info.layer.shared_inter, 2816);
  EXPECT_EQ(lite->info.moe_layers.size(), 28u);
  EXPECT_EQ(HfTensorName(HfFamily::kBailingMoe, 0, WeightRole::kW1, 3),
            "model.layers.0.mlp.experts.3.gate_proj.weight");
  auto sigmoid = Parse(R"({"architectures":["BailingMoeForCausalLM"],)" + v1 +
                       R"(,"score_function":"sigmoid"})");
  EXPECT_TRUE(Mentions(sigmoid.status(), "score_function")) << sigmoid.status();

  const std::string v2 =
      R"("model_type":"bailing_moe","hidden_size":2048,"num_hidden_layers":20,
    "intermediate_size":5120,"moe_intermediate_size":512,"num_experts":256,
    "num_shared_experts":1,"num_experts_per_tok":8,"score_function":"sigmoid",
    "moe_router_enable_expert_bias":true,"n_group":8,"topk_group":4,
    "routed_scaling_factor":2.5,"norm_topk_prob":true,
    "first_k_dense_replace":1,"num_nextn_predict_layers":0)";
  auto mini =
      Parse(R"({"architectures":["BailingMoeV2ForCausalLM"],)" + v2 + "}");
  ASSERT_TRUE(mini.ok()) << mini.status();
  const auto& c = mini->info.layer;
  EXPECT_EQ(mini->family, HfFamily::kBailingMoeV2);
  EXPECT_EQ(mini->info.family, "bailing_moe");
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.n_groups, 8);
  EXPECT_EQ(c.topk_groups, 4);
  EXPECT_EQ(c.group_score, GroupScore::kTop2Sum);
  EXPECT_EQ(c.shared_inter, 512);
  EXPECT_EQ(mini->info.moe_layers.size(), 19u);
  EXPECT_EQ(mini->info.moe_layers.front(), 1);
  EXPECT_EQ(
      HfTensorName(HfFamily::kBailingMoeV2, 1, WeightRole::kExpertBias, -1),
      "model.layers.1.mlp.gate.expert_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kBailingMoeV2, 1, WeightRole::kSharedW3, -1),
            "model.layers.1.mlp.shared_experts.up_proj.weight");

  auto unnamed = Parse("{" + v2 + "}");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_TRUE(Mentions(unnamed.status(), "'architectures'"))
      << unnamed.status();
  EXPECT_TRUE(Mentions(unnamed.status(),
                       "BailingMoeForCausalLM, "
                       "BailingMoeV2ForCausalLM"))
      << unnamed.status();
  auto other =
      Parse(R"({"architectures":["BailingMoeV3ForCausalLM"],)" + v2 + "}");
  ASSERT_FALSE(other.ok());
  EXPECT_TRUE(Mentions(other.status(), "\"BailingMoeV3ForCausalLM\""))
      << other.status();
  // The supported list names the shared model_type once.
  const std::vector<std::string> supported =
      absl::StrSplit(SupportedHfFamilies(), ", ");
  EXPECT_EQ(std::count(supported.begin(), supported.end(), "bailing_moe"), 1);
}

// GLM-4.5V, Kimi-VL and Kimi K2.5: their language model's config under
// text_config is read as GLM-4.5's or DeepSeek-V3's, under their prefixes.
TEST(HfFamilies, MultimodalWrappersReadTheirTextConfig) {
  const std::string glm =
      R"("hidden_size":4096,"num_hidden_layers":46,"intermediate_size":10944,
    "moe_intermediate_size":1408,"n_routed_experts":128,"n_shared_experts":1,
    "num_experts_per_tok":8,"n_group":1,"topk_group":1,"norm_topk_prob":true,
    "routed_scaling_factor":1.0,"first_k_dense_replace":1)";
  auto glm4v = Parse(
      R"({"model_type":"glm4v_moe","architectures":["Glm4vMoeForConditionalGeneration"],
    "text_config":{"model_type":"glm4v_moe_text",)" +
      glm + R"(},"vision_config":{"depth":24}})");
  auto glm45 = Parse(R"({"model_type":"glm4_moe",)" + glm + "}");
  ASSERT_TRUE(glm4v.ok()) << glm4v.status();
  ASSERT_TRUE(glm45.ok()) << glm45.status();
  EXPECT_EQ(glm4v->family, HfFamily::kGlm4vMoe);
  EXPECT_EQ(glm4v->info.layer, glm45->info.layer);
  EXPECT_EQ(glm4v->info.moe_layers, glm45->info.moe_layers);
  EXPECT_EQ(HfTensorName(HfFamily::kGlm4vMoe, 1, WeightRole::kExpertBias, -1),
            "model.language_model.layers.1.mlp.gate.e_score_correction_bias");
  auto flat = Parse(
      R"({"model_type":"glm4v_moe","architectures":["Glm4vMoeForConditionalGeneration"],)" +
      glm + "}");
  EXPECT_TRUE(Mentions(flat.status(), "text_config")) << flat.status();

  const std::string v3 =
      R"("hidden_size":2048,"num_hidden_layers":27,"moe_intermediate_size":1408,
    "n_routed_experts":64,"n_shared_experts":2,"num_experts_per_tok":6,
    "routed_scaling_factor":2.446,"topk_method":"noaux_tc",
    "scoring_func":"sigmoid","n_group":1,"topk_group":1,"norm_topk_prob":true,
    "first_k_dense_replace":1,"moe_layer_freq":1)";
  auto base = Parse(R"({"model_type":"deepseek_v3",)" + v3 + "}");
  ASSERT_TRUE(base.ok()) << base.status();
  for (const auto& [type, cls, text_type, family] :
       {std::tuple{"kimi_vl", "KimiVLForConditionalGeneration", "deepseek_v3",
                   HfFamily::kKimiVl},
        std::tuple{"kimi_k25", "KimiK25ForConditionalGeneration", "kimi_k2",
                   HfFamily::kKimiK25}}) {
    SCOPED_TRACE(type);
    auto s = Parse(absl::StrCat(
        R"({"model_type":")", type, R"(","architectures":[")", cls,
        R"("],"text_config":{"model_type":")", text_type, R"(",)", v3, "}}"));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->family, family);
    EXPECT_EQ(s->info.layer, base->info.layer);
    EXPECT_EQ(s->info.moe_layers, base->info.moe_layers);
    EXPECT_EQ(HfTensorName(family, 2, WeightRole::kW2, 63),
              "language_model.model.layers.2.mlp.experts.63.down_proj.weight");
  }
}

// AFMoE (Trinity) as transformers routes it: sigmoid, mlp.expert_bias for
// the choice, always renormalised, x route_scale, the shared expert; its
// config's score_func / route_norm / groups are not read. MoE layers from
// num_dense_layers on, which must be given.
TEST(HfFamilies, AfmoeRoutesAsTransformersFromNumDenseLayers) {
  const std::string body =
      R"("model_type":"afmoe","architectures":["AfmoeForCausalLM"],
    "hidden_size":2048,"num_hidden_layers":32,"intermediate_size":6144,
    "moe_intermediate_size":1024,"num_experts":128,"num_shared_experts":1,
    "num_experts_per_tok":8,"route_scale":2.826,"score_func":"sigmoid",
    "route_norm":true,"n_group":1,"topk_group":1,"hidden_act":"silu",
    "mup_enabled":true)";
  auto s = Parse("{" + body + R"(,"num_dense_layers":2})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kAfmoe);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_FLOAT_EQ(c.route_scale, 2.826f);
  EXPECT_EQ(c.n_groups, 0);
  EXPECT_EQ(c.shared_inter, 1024);
  EXPECT_EQ(s->info.moe_layers.size(), 30u);
  EXPECT_EQ(s->info.moe_layers.front(), 2);
  auto ignored = Parse("{" + body +
                       R"(,"num_dense_layers":2,"route_norm":false,
    "score_func":"softmax","n_group":8,"topk_group":2})");
  ASSERT_TRUE(ignored.ok()) << ignored.status();
  EXPECT_EQ(ignored->info.layer, c);
  auto missing = Parse("{" + body + "}");
  EXPECT_TRUE(Mentions(missing.status(), "'num_dense_layers' is missing"))
      << missing.status();
  auto negative = Parse("{" + body + R"(,"num_dense_layers":-1})");
  EXPECT_TRUE(Mentions(negative.status(), "num_dense_layers"))
      << negative.status();
  EXPECT_EQ(HfTensorName(HfFamily::kAfmoe, 2, WeightRole::kGate, -1),
            "model.layers.2.mlp.router.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kAfmoe, 2, WeightRole::kExpertBias, -1),
            "model.layers.2.mlp.expert_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kAfmoe, 2, WeightRole::kW1, 9),
            "model.layers.2.mlp.experts.9.gate_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kAfmoe, 2, WeightRole::kSharedW2, -1),
            "model.layers.2.mlp.shared_experts.down_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kAfmoe, 2, WeightRole::kW1, 0,
                         HfExpertLayout::kPacked),
            "model.layers.2.mlp.experts.gate_up_proj");
}

// LFM2-MoE: sigmoid, the feed_forward.expert_bias for the choice only when
// use_expert_bias, renorm, scale, no shared expert, dense layers first.
TEST(HfFamilies, Lfm2MoeReadsUseExpertBiasAndNumDenseLayers) {
  const std::string body =
      R"("model_type":"lfm2_moe","architectures":["Lfm2MoeForCausalLM"],
    "hidden_size":2048,"num_hidden_layers":24,"intermediate_size":7168,
    "moe_intermediate_size":1792,"num_experts":32,"num_experts_per_tok":4,
    "norm_topk_prob":true,"routed_scaling_factor":1.0,"num_dense_layers":2,
    "full_attn_idxs":[2,6,10,14,18,21])";
  auto s = Parse("{" + body + R"(,"use_expert_bias":true})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kLfm2Moe);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.shared_inter, 0);
  EXPECT_EQ(s->info.moe_layers.size(), 22u);
  EXPECT_EQ(s->info.moe_layers.front(), 2);
  auto unbiased = Parse("{" + body + R"(,"use_expert_bias":false})");
  ASSERT_TRUE(unbiased.ok()) << unbiased.status();
  EXPECT_FALSE(unbiased->info.layer.use_bias);
  EXPECT_EQ(HfTensorName(HfFamily::kLfm2Moe, 2, WeightRole::kGate, -1),
            "model.layers.2.feed_forward.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kLfm2Moe, 2, WeightRole::kExpertBias, -1),
            "model.layers.2.feed_forward.expert_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kLfm2Moe, 2, WeightRole::kW3, 31),
            "model.layers.2.feed_forward.experts.31.w3.weight");
}

// K-EXAONE as transformers runs it: DeepSeek-V3's router keys under
// EXAONE's names, layers by mlp_layer_types; swiglu_limits of one value on
// every layer is silu_clamp (min(g, L) before silu, u clamped to +-L), all
// zero is none, limits that differ between layers are each layer's own, and
// a negative one or a short list is refused by name.
TEST(HfFamilies, ExaoneMoeReadsItsRouterAndSwigluLimits) {
  auto limits = [](const std::string& first, const std::string& rest) {
    std::string v = "[" + first;
    for (int l = 1; l < 48; ++l) v += "," + rest;
    return v + "]";
  };
  const std::string body =
      R"("model_type":"exaone_moe","architectures":["ExaoneMoeForCausalLM"],
    "hidden_size":6144,"num_hidden_layers":48,"intermediate_size":18432,
    "moe_intermediate_size":2048,"num_experts":128,"num_shared_experts":1,
    "num_experts_per_tok":8,"norm_topk_prob":true,"routed_scaling_factor":2.5,
    "n_group":1,"topk_group":1,"first_k_dense_replace":1,"hidden_act":"silu",
    "mlp_layer_types":)" +
      LayerTypes(48, 1);
  auto s = Parse("{" + body + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kExaoneMoe);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.shared_inter, 2048);
  EXPECT_EQ(c.act, Activation::kSilu);
  EXPECT_EQ(s->info.moe_layers.size(), 47u);
  EXPECT_EQ(s->info.moe_layers.front(), 1);
  auto zero =
      Parse("{" + body + R"(,"swiglu_limits":)" + limits("0", "0.0") + "}");
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->info.layer, c);
  auto clamped =
      Parse("{" + body + R"(,"swiglu_limits":)" + limits("7.0", "7.0") + "}");
  ASSERT_TRUE(clamped.ok()) << clamped.status();
  EXPECT_EQ(clamped->info.layer.act, Activation::kSiluClamp);
  EXPECT_EQ(clamped->info.layer.act_limit, 7.0f);
  // Layer 0 (dense) has no limit; MoE layer 1 has 5.0 and the rest 7.0:
  // the first MoE layer's is the model's, the others' their own.
  std::string per_layer = "[0,5.0";
  for (int l = 2; l < 48; ++l) per_layer += ",7.0";
  per_layer += "]";
  auto mixed = Parse("{" + body + R"(,"swiglu_limits":)" + per_layer + "}");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->info.layer.act, Activation::kSiluClamp);
  EXPECT_EQ(mixed->info.layer.act_limit, 5.0f);
  EXPECT_EQ(mixed->info.layer_overrides.size(), 46u);
  EXPECT_EQ(mixed->info.LayerConfig(1).act_limit, 5.0f);
  EXPECT_EQ(mixed->info.LayerConfig(2).act_limit, 7.0f);
  EXPECT_EQ(mixed->info.LayerConfig(47).act, Activation::kSiluClamp);
  EXPECT_EQ(WithActivationOf(mixed->info.LayerConfig(47), c), c);
  auto negative =
      Parse("{" + body + R"(,"swiglu_limits":)" + limits("0", "-1") + "}");
  EXPECT_TRUE(Mentions(negative.status(), "'swiglu_limits'"))
      << negative.status();
  EXPECT_TRUE(Mentions(negative.status(), "entry 1")) << negative.status();
  auto short_list = Parse("{" + body + R"(,"swiglu_limits":[7.0,7.0]})");
  EXPECT_TRUE(Mentions(short_list.status(), "must list 48"))
      << short_list.status();
  EXPECT_EQ(HfTensorName(HfFamily::kExaoneMoe, 1, WeightRole::kExpertBias, -1),
            "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kExaoneMoe, 1, WeightRole::kSharedW1, -1),
            "model.layers.1.mlp.shared_experts.gate_proj.weight");
}

TEST(HfFamilies, PhimoeReadsSparsemixerAndItsJitterEpsilon) {
  auto s =
      Parse(R"({"model_type":"phimoe","architectures":["PhimoeForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":32,"num_local_experts":16,
    "num_experts_per_tok":2,"intermediate_size":6400,
    "router_jitter_noise":0.01,"input_jitter_noise":0.0})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kPhimoe);
  EXPECT_EQ(c.score_func, ScoreFunc::kSparsemixer);
  EXPECT_EQ(c.jitter_eps, 0.01f);
  EXPECT_FALSE(c.route_norm);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.inter, 6400);
  EXPECT_EQ(s->info.moe_layers.size(), 32u);
  EXPECT_EQ(HfTensorName(HfFamily::kPhimoe, 3, WeightRole::kW2, 5),
            "model.layers.3.block_sparse_moe.experts.5.w2.weight");
  // sparsemixer is top-2 only.
  auto k4 = Parse(R"({"model_type":"phimoe","hidden_size":64,
    "num_hidden_layers":2,"num_local_experts":16,"num_experts_per_tok":4,
    "intermediate_size":32})");
  EXPECT_TRUE(Mentions(k4.status(), "top_k")) << k4.status();
}

// Grok-1 as hpcai-tech's conversion writes its config: num_experts, the
// router soft-cap (30 when absent), GELU (erf) experts under moe_block;
// Grok-2's residual_moe is refused by name.
TEST(HfFamilies, Grok1SoftCapsItsRouterAndRunsGeluExperts) {
  const std::string base =
      R"({"model_type":"grok-1","architectures":["Grok1ModelForCausalLM"],
    "hidden_size":6144,"num_hidden_layers":64,"num_experts":8,
    "num_experts_per_tok":2,"intermediate_size":32768)";
  auto s = Parse(base + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kGrok1);
  EXPECT_EQ(c.router_softcap, 30.0f);
  EXPECT_EQ(c.act, Activation::kGeluErf);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(c.route_norm);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(s->info.moe_layers.size(), 64u);
  EXPECT_EQ(HfTensorName(HfFamily::kGrok1, 7, WeightRole::kW1, 3),
            "model.layers.7.moe_block.experts.3.linear.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kGrok1, 7, WeightRole::kW3, 3),
            "model.layers.7.moe_block.experts.3.linear_v.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kGrok1, 7, WeightRole::kW2, 3),
            "model.layers.7.moe_block.experts.3.linear_1.weight");
  auto capped = Parse(base + R"(,"router_logit_softcapping":50.0,
    "num_local_experts":8})");
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->info.layer.router_softcap, 50.0f);
  auto local = Parse(R"({"model_type":"grok-1","hidden_size":64,
    "num_hidden_layers":2,"num_local_experts":4,"num_experts_per_tok":2,
    "intermediate_size":32})");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->info.layer.num_experts, 4);
  auto grok2 = Parse(base + R"(,"residual_moe":true})");
  EXPECT_TRUE(Mentions(grok2.status(), "residual_moe")) << grok2.status();
}

TEST(HfFamilies, LongcatFlashReadsZeroExpertsAndItsLayerCount) {
  const std::string base =
      R"({"model_type":"longcat_flash","architectures":["LongcatFlashForCausalLM"],
    "hidden_size":6144,"num_layers":28,"num_hidden_layers":56,
    "n_routed_experts":512,"zero_expert_num":256,"moe_topk":12,
    "expert_ffn_hidden_size":2048,"routed_scaling_factor":6.0)";
  auto s = Parse(base + R"(,"zero_expert_type":"identity"})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kLongcatFlash);
  EXPECT_EQ(s->info.num_layers, 28);
  EXPECT_EQ(s->info.moe_layers.size(), 28u);
  EXPECT_EQ(c.num_experts, 512);
  EXPECT_EQ(c.zero_experts, 256);
  EXPECT_EQ(c.router_rows(), 768);
  EXPECT_EQ(c.top_k, 12);
  EXPECT_EQ(c.inter, 2048);
  EXPECT_TRUE(c.use_bias && !c.route_norm && !c.router_bias);
  EXPECT_EQ(c.route_scale, 6.0f);
  EXPECT_EQ(HfTensorName(HfFamily::kLongcatFlash, 2, WeightRole::kGate, -1),
            "model.layers.2.mlp.router.classifier.weight");
  EXPECT_EQ(
      HfTensorName(HfFamily::kLongcatFlash, 2, WeightRole::kExpertBias, -1),
      "model.layers.2.mlp.router.e_score_correction_bias");
  // The remote code's "drop" zero experts add nothing: not served as
  // identity ones.
  auto drop = Parse(base + R"(,"zero_expert_type":"drop"})");
  EXPECT_TRUE(Mentions(drop.status(), "zero_expert_type")) << drop.status();
  EXPECT_TRUE(Mentions(drop.status(), "'drop'")) << drop.status();
  auto no_count = Parse(
      R"({"model_type":"longcat_flash","hidden_size":64,"num_hidden_layers":4,
    "n_routed_experts":8,"moe_topk":2,"expert_ffn_hidden_size":32})");
  EXPECT_TRUE(Mentions(no_count.status(), "num_layers")) << no_count.status();
}

TEST(HfFamilies, Cohere2MoeReadsSelectionAndCombination) {
  const std::string base =
      R"({"model_type":"cohere2_moe","architectures":["Cohere2MoeForCausalLM"],
    "hidden_size":2048,"num_hidden_layers":4,"num_experts":64,
    "num_experts_per_tok":4,"intermediate_size":512,"num_shared_experts":2,
    "first_k_dense_replace":1,"prefix_dense_intermediate_size":4096)";
  auto avg = Parse(base + "}");  // transformers' defaults: softmax, average
  ASSERT_TRUE(avg.ok()) << avg.status();
  const auto& c = avg->info.layer;
  EXPECT_EQ(avg->family, HfFamily::kCohere2Moe);
  EXPECT_EQ(c.score_func, ScoreFunc::kTopkSoftmax);
  EXPECT_FALSE(c.route_norm);
  EXPECT_EQ(c.shared_inter, 1024);
  EXPECT_EQ(c.output_scale, 0.5f);
  EXPECT_EQ(avg->info.moe_layers, (std::vector<int64_t>{1, 2, 3}));
  auto sum = Parse(base + R"(,"shared_expert_combination_strategy":"sum",
    "expert_selection_fn":"sigmoid","norm_topk_prob":true})");
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->info.layer.output_scale, 1.0f);
  EXPECT_EQ(sum->info.layer.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(sum->info.layer.route_norm);
  auto listed = Parse(
      base + R"(,"mlp_layer_types":["dense","sparse","dense","sparse"]})");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->info.moe_layers, (std::vector<int64_t>{1, 3}));
  auto bad = Parse(base + R"(,"shared_expert_combination_strategy":"max"})");
  EXPECT_TRUE(Mentions(bad.status(), "shared_expert_combination_strategy"))
      << bad.status();
  EXPECT_EQ(HfTensorName(HfFamily::kCohere2Moe, 1, WeightRole::kSharedW3, -1),
            "model.layers.1.mlp.shared_experts.up_proj.weight");
}

TEST(HfFamilies, JetMoeReadsPackedExpertsAndItsOutputBias) {
  auto s =
      Parse(R"({"model_type":"jetmoe","architectures":["JetMoeForCausalLM"],
    "hidden_size":2048,"num_hidden_layers":24,"num_local_experts":8,
    "num_experts_per_tok":2,"intermediate_size":5632,
    "activation_function":"silu","kv_channels":128})");
  ASSERT_TRUE(s.ok()) << s.status();
  const auto& c = s->info.layer;
  EXPECT_EQ(s->family, HfFamily::kJetMoe);
  EXPECT_EQ(c.score_func, ScoreFunc::kTopkSoftmax);
  EXPECT_TRUE(c.output_bias);
  EXPECT_EQ(c.inter, 5632);
  EXPECT_EQ(HfTensorName(HfFamily::kJetMoe, 0, WeightRole::kOutputBias, -1),
            "model.layers.0.mlp.bias");
  EXPECT_EQ(HfTensorName(HfFamily::kJetMoe, 0, WeightRole::kW1, 0),
            "model.layers.0.mlp.input_linear.weight");
  auto gelu = Parse(R"({"model_type":"jetmoe","hidden_size":64,
    "num_hidden_layers":2,"num_local_experts":8,"num_experts_per_tok":2,
    "intermediate_size":32,"activation_function":"gelu"})");
  EXPECT_TRUE(Mentions(gelu.status(), "activation_function")) << gelu.status();
}

// Step-3.5-Flash: moe_* keys, MoE layers by moe_layers_enum, and each MoE
// layer's own swiglustep limits (0 or null: plain silu) as the model's
// config for the first and a per-layer override where another differs.
TEST(HfFamilies, Step3p5ReadsPerLayerLimitsAndItsLayerList) {
  const std::string head =
      R"({"model_type":"step3p5","architectures":["Step3p5ForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":5,"moe_num_experts":288,
    "moe_top_k":8,"moe_intermediate_size":1280,"share_expert_dim":1280,
    "moe_router_activation":"sigmoid","use_moe_router_bias":true,
    "norm_expert_weight":true,"moe_router_scaling_factor":3.0,
    "need_fp32_gate":true,"num_nextn_predict_layers":1,
    "moe_layers_enum":"1,2,3,4")";
  auto s = Parse(head + R"(,"swiglu_limits":[0,0,null,7,7],
    "swiglu_limits_shared":[0,0,0,16,0]})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kStep3p5);
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{1, 2, 3, 4}));
  const MoeLayerConfig& c = s->info.layer;
  EXPECT_EQ(c.num_experts, 288);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.inter, 1280);
  EXPECT_EQ(c.shared_inter, 1280);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm && !c.shared_gate);
  EXPECT_FLOAT_EQ(c.route_scale, 3.0f);
  // Layers 1 and 2: silu everywhere; 3: both stepped; 4: routed only.
  EXPECT_EQ(s->info.LayerConfig(2), c);
  EXPECT_EQ(c.act, Activation::kSilu);
  EXPECT_EQ(c.shared_activation(), Activation::kSilu);
  ASSERT_EQ(s->info.layer_overrides.size(), 2u);
  const MoeLayerConfig& l3 = s->info.LayerConfig(3);
  EXPECT_EQ(l3.act, Activation::kSwigluStep);
  EXPECT_EQ(l3.act_limit, 7.0f);
  EXPECT_EQ(l3.shared_activation(), Activation::kSwigluStep);
  EXPECT_EQ(l3.shared_limit(), 16.0f);
  const MoeLayerConfig& l4 = s->info.LayerConfig(4);
  EXPECT_EQ(l4.act, Activation::kSwigluStep);
  EXPECT_EQ(l4.shared_activation(), Activation::kSilu);
  EXPECT_EQ(HfTensorName(HfFamily::kStep3p5, 3, WeightRole::kW1, 0),
            "model.layers.3.moe.gate_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kStep3p5, 3, WeightRole::kExpertBias, -1),
            "model.layers.3.moe.router_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kStep3p5, 3, WeightRole::kSharedW2, -1),
            "model.layers.3.share_expert.down_proj.weight");
  MoeLayerConfig shape;
  shape.num_experts = 4;
  shape.hidden = 8;
  shape.inter = 6;
  const HfTensorLocation up =
      HfLocate(HfFamily::kStep3p5, shape, 1, WeightRole::kW3, 2);
  EXPECT_TRUE(up.fused && up.linear);
  EXPECT_EQ(up.fused_shape, (std::vector<int64_t>{4, 6, 8}));
  EXPECT_EQ(up.col0, 0);
  EXPECT_EQ(up.out, 6);

  // Without moe_layers_enum every layer but the first; without the lists
  // plain silu; the MTP layer's entry may be listed too.
  std::string no_enum = head;
  no_enum.erase(no_enum.find(R"(,
    "moe_layers_enum")"));
  auto plain = Parse(no_enum + "}");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->info.moe_layers, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_TRUE(plain->info.layer_overrides.empty());
  EXPECT_EQ(plain->info.layer.act, Activation::kSilu);
  EXPECT_TRUE(Parse(head + R"(,"swiglu_limits":[0,0,0,7,7,7]})").ok());

  struct Bad {
    std::string tail, names;
  };
  const Bad bad[] = {
      {R"(,"swiglu_limits":[0,7,7]})", "'swiglu_limits'"},
      {R"(,"swiglu_limits_shared":[0,16,16,16,16,16,16]})",
       "'swiglu_limits_shared'"},
      {R"(,"swiglu_limits":[0,0,-1,7,7]})", "'swiglu_limits'"},
      {R"(,"swiglu_limits":"7"})", "'swiglu_limits'"},
      {R"(,"use_moe_router_bias":false})", "'use_moe_router_bias'"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.tail);
    auto r = Parse(head + b.tail);
    EXPECT_TRUE(Mentions(r.status(), b.names)) << r.status();
  }
  std::string bad_enum = head;
  bad_enum.replace(bad_enum.find(R"("1,2,3,4")"), 9, R"("1,x,9")");
  auto e = Parse(bad_enum + "}");
  EXPECT_TRUE(Mentions(e.status(), "'moe_layers_enum'")) << e.status();
}

// Step-3 (step3_text): Step-3.5's keys and layout with a plain softmax
// router, renormalised only when norm_expert_weight says so; MoE layers by
// moe_layers_enum as a string or a list; no router bias is read.
TEST(HfFamilies, Step3TextIsStep35sLayoutWithASoftmaxRouter) {
  const std::string head =
      R"({"model_type":"step3_text","architectures":["Step3TextForCausalLM"],
    "hidden_size":7168,"num_hidden_layers":6,"moe_num_experts":48,
    "moe_top_k":3,"moe_intermediate_size":5120,"share_expert_dim":5120,
    "share_q_dim":2048,"head_dim":256)";
  auto s = Parse(head + R"(,"moe_layers_enum":"4,5"})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kStep3Text);
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{4, 5}));
  const MoeLayerConfig& c = s->info.layer;
  EXPECT_EQ(c.num_experts, 48);
  EXPECT_EQ(c.top_k, 3);
  EXPECT_EQ(c.inter, 5120);
  EXPECT_EQ(c.shared_inter, 5120);
  EXPECT_EQ(c.score_func, ScoreFunc::kSoftmax);
  EXPECT_FALSE(c.route_norm || c.use_bias || c.shared_gate);
  EXPECT_FLOAT_EQ(c.route_scale, 1.0f);
  EXPECT_EQ(c.act, Activation::kSilu);
  auto listed = Parse(head + R"(,"moe_layers_enum":[1,3],
    "norm_expert_weight":true})");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->info.moe_layers, (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(listed->info.layer.route_norm);
  auto every = Parse(head + "}");
  ASSERT_TRUE(every.ok()) << every.status();
  EXPECT_EQ(every->info.moe_layers, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(HfTensorName(HfFamily::kStep3Text, 2, WeightRole::kGate, -1),
            "model.layers.2.moe.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kStep3Text, 2, WeightRole::kSharedW1, -1),
            "model.layers.2.share_expert.gate_proj.weight");
  auto bad = Parse(head + R"(,"moe_layers_enum":[1,"x"]})");
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(Mentions(bad.status(), "moe_layers_enum")) << bad.status();
  auto missing = Parse(R"({"model_type":"step3_text","hidden_size":64,
    "num_hidden_layers":2,"moe_num_experts":4,"moe_top_k":2,
    "moe_intermediate_size":32})");
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(Mentions(missing.status(), "share_expert_dim"))
      << missing.status();
}

// Hy3 (hy_v3) as its Hub config writes it and as transformers routes it:
// sigmoid, the correction bias mlp.expert_bias, the top-k renormalised
// whatever route_norm says and scaled by router_scaling_factor (2.826 when
// absent), num_shared_experts of the routed width (expert_hidden_dim, or
// transformers' moe_intermediate_size) in mlp.shared_mlp; MoE layers by
// mlp_layer_types, else first_k_dense_replace.
TEST(HfFamilies, HyV3ReadsItsHubKeysAndItsNames) {
  const std::string head =
      R"({"model_type":"hy_v3","architectures":["HYV3ForCausalLM"],
    "hidden_size":4096,"num_hidden_layers":4,"num_experts":192,
    "num_experts_per_tok":8,"intermediate_size":13312,
    "num_shared_experts":1,"route_norm":false,"qk_norm":true,
    "num_nextn_predict_layers":1)";
  auto s = Parse(head + R"(,"expert_hidden_dim":1536,
    "router_scaling_factor":2.5,"first_k_dense_replace":2})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kHyV3);
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{2, 3}));
  const MoeLayerConfig& c = s->info.layer;
  EXPECT_EQ(c.num_experts, 192);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.inter, 1536);
  EXPECT_EQ(c.shared_inter, 1536);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm && !c.shared_gate);
  EXPECT_EQ(c.n_groups, 0);
  EXPECT_FLOAT_EQ(c.route_scale, 2.5f);

  // transformers' own keys: moe_intermediate_size, mlp_layer_types, the
  // default scale.
  auto native = Parse(head + R"(,"moe_intermediate_size":1024,
    "mlp_layer_types":["dense","sparse","dense","sparse"]})");
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(native->info.moe_layers, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(native->info.layer.inter, 1024);
  EXPECT_FLOAT_EQ(native->info.layer.route_scale, 2.826f);

  EXPECT_EQ(HfTensorName(HfFamily::kHyV3, 2, WeightRole::kGate, -1),
            "model.layers.2.mlp.router.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kHyV3, 2, WeightRole::kExpertBias, -1),
            "model.layers.2.mlp.expert_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kHyV3, 2, WeightRole::kW3, 7),
            "model.layers.2.mlp.experts.7.up_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kHyV3, 2, WeightRole::kSharedW1, -1),
            "model.layers.2.mlp.shared_mlp.gate_proj.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kHyV3, 2, WeightRole::kExpertBias, -1,
                         HfExpertLayout::kPacked),
            "model.layers.2.mlp.e_score_correction_bias");
  EXPECT_EQ(HfTensorName(HfFamily::kHyV3, 2, WeightRole::kGate, -1,
                         HfExpertLayout::kPacked),
            "model.layers.2.mlp.gate.weight");
}

// Ling-3.0 (bailing_moe_v3): Ling 2.0's gate over groups, the shared
// expert's own width, and each MoE layer's swiglustep limits from
// expert_swiglu_limit_list / share_expert_swiglu_limit_list (null lists:
// silu everywhere); a config that leaves model_type out is told by its
// model class; pregate_inference true and lists of the wrong length are
// refused by name.
TEST(HfFamilies, BailingMoeV3ReadsPerLayerLimitsAndItsSharedWidth) {
  const std::string head =
      R"({"architectures":["BailingMoeV3ForCausalLM"],
    "auto_map":{"AutoConfig":"configuration_bailing_moe_v3.BailingMoeV3Config"},
    "hidden_size":1536,"num_hidden_layers":4,"num_experts":128,
    "num_experts_per_tok":8,"moe_intermediate_size":512,
    "moe_shared_expert_intermediate_size":768,"num_shared_experts":1,
    "n_group":8,"topk_group":4,"routed_scaling_factor":2.5,
    "score_function":"sigmoid","scoring_func":"sigmoid",
    "topk_method":"noaux_tc","moe_router_enable_expert_bias":true,
    "norm_topk_prob":true,"first_k_dense_replace":1,
    "num_nextn_predict_layers":1,"pregate_enabled":true)";
  auto s = Parse(head + R"(,"model_type":"bailing_moe_v3",
    "expert_swiglu_limit_list":[0,0,7,7,null],
    "share_expert_swiglu_limit_list":[0,0,0,16,null]})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kBailingMoeV3);
  EXPECT_EQ(s->info.moe_layers, (std::vector<int64_t>{1, 2, 3}));
  const MoeLayerConfig& c = s->info.layer;
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.inter, 512);
  EXPECT_EQ(c.shared_inter, 768);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_TRUE(c.use_bias && c.route_norm);
  EXPECT_EQ(c.n_groups, 8);
  EXPECT_EQ(c.topk_groups, 4);
  EXPECT_FLOAT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.act, Activation::kSilu);
  ASSERT_EQ(s->info.layer_overrides.size(), 2u);
  const MoeLayerConfig& l2 = s->info.LayerConfig(2);
  EXPECT_EQ(l2.act, Activation::kSwigluStep);
  EXPECT_EQ(l2.act_limit, 7.0f);
  EXPECT_EQ(l2.shared_activation(), Activation::kSilu);
  const MoeLayerConfig& l3 = s->info.LayerConfig(3);
  EXPECT_EQ(l3.shared_activation(), Activation::kSwigluStep);
  EXPECT_EQ(l3.shared_limit(), 16.0f);
  EXPECT_EQ(
      HfTensorName(HfFamily::kBailingMoeV3, 2, WeightRole::kExpertBias, -1),
      "model.layers.2.mlp.gate.expert_bias");

  // No model_type (a remote-code config): the class says the family. The
  // null lists of a release without limits, and no shared width key (the
  // routed width then).
  std::string plain_head = head;
  plain_head.erase(
      plain_head.find(R"("moe_shared_expert_intermediate_size")"),
      std::string(R"("moe_shared_expert_intermediate_size":768,)").size());
  auto plain = Parse(plain_head + R"(,"expert_swiglu_limit_list":null,
    "share_expert_swiglu_limit_list":null})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->family, HfFamily::kBailingMoeV3);
  EXPECT_EQ(plain->info.family, "bailing_moe_v3");
  EXPECT_TRUE(plain->info.layer_overrides.empty());
  EXPECT_EQ(plain->info.layer.shared_inter, 512);

  struct Bad {
    std::string tail, names;
  };
  const Bad bad[] = {
      {R"(,"expert_swiglu_limit_list":[0,7,7]})", "'expert_swiglu_limit_list'"},
      {R"(,"share_expert_swiglu_limit_list":[0,0,0,0,0,0,0]})",
       "'share_expert_swiglu_limit_list'"},
      {R"(,"expert_swiglu_limit_list":[0,0,-7,7]})",
       "'expert_swiglu_limit_list'"},
      {R"(,"pregate_inference":true})", "'pregate_inference'"},
      {R"(,"score_function":"softmax"})", "'score_function'"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.tail);
    auto r = Parse(head + b.tail);
    EXPECT_TRUE(Mentions(r.status(), b.names)) << r.status();
  }
  // A class no family has, without a model_type, is refused naming both.
  auto unknown = Parse(R"({"architectures":["AcmeMoeForCausalLM"],
    "hidden_size":8,"num_hidden_layers":2})");
  EXPECT_TRUE(Mentions(unknown.status(), "'model_type'") &&
              Mentions(unknown.status(), "AcmeMoeForCausalLM"))
      << unknown.status();
}

// The wrappers over a language model whose MoE exists (Intern-S1,
// InternVL, InternVLChatModel, Ovis2.6-MoE, LFM2-VL, MiniMax-VL-01,
// Step3-VL): the language model's keys under text_config or llm_config,
// read as its own family's, its layers under the wrapper's prefix; a
// sub-config naming another language model (a dense one) is refused naming
// its model_type key, and one without the sub-config names it.
TEST(HfFamilies, WrappersReadTheirLanguageModelUnderTheirPrefix) {
  const std::string qwen =
      R"("hidden_size":2048,"num_hidden_layers":4,"num_experts":128,
    "num_experts_per_tok":8,"moe_intermediate_size":768,
    "norm_topk_prob":true,"decoder_sparse_step":1,"mlp_only_layers":[])";
  auto base = Parse(R"({"model_type":"qwen3_moe",)" + qwen + "}");
  ASSERT_TRUE(base.ok()) << base.status();
  struct Wrapper {
    const char* type;
    const char* cls;
    const char* sub;  // the sub-config key
    HfFamily family;
    const char* gate;  // layer 1's router
  };
  const Wrapper wrappers[] = {
      {"interns1", "InternS1ForConditionalGeneration", "text_config",
       HfFamily::kInternS1, "model.language_model.layers.1.mlp.gate.weight"},
      {"internvl", "InternVLForConditionalGeneration", "text_config",
       HfFamily::kInternVl, "model.language_model.layers.1.mlp.gate.weight"},
      {"internvl_chat", "InternVLChatModel", "llm_config",
       HfFamily::kInternVlChat,
       "language_model.model.layers.1.mlp.gate.weight"},
      {"ovis2_6_moe", "Ovis2_6_MoeForCausalLM", "llm_config",
       HfFamily::kOvis26Moe, "llm.model.layers.1.mlp.gate.weight"},
  };
  for (const Wrapper& w : wrappers) {
    SCOPED_TRACE(w.type);
    const std::string head =
        absl::StrCat(R"({"model_type":")", w.type, R"(","architectures":[")",
                     w.cls, R"("],"vision_config":{"depth":2},)");
    auto s = Parse(absl::StrCat(head, R"(")", w.sub,
                                R"(":{"model_type":"qwen3_moe",)", qwen, "}}"));
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->family, w.family);
    EXPECT_EQ(s->info.layer, base->info.layer);
    EXPECT_EQ(s->info.moe_layers, base->info.moe_layers);
    EXPECT_EQ(HfTensorName(w.family, 1, WeightRole::kGate, -1), w.gate);
    // Intern-S1-mini and the dense InternVLs wrap qwen3 / qwen2.
    auto dense = Parse(absl::StrCat(
        head, R"(")", w.sub,
        R"(":{"model_type":"qwen3","hidden_size":2048,"num_hidden_layers":4}})"));
    EXPECT_TRUE(
        Mentions(dense.status(), absl::StrCat("'", w.sub, ".model_type'")))
        << dense.status();
    auto flat = Parse(head + qwen + "}");
    EXPECT_TRUE(Mentions(flat.status(), w.sub)) << flat.status();
  }

  // LFM2-VL over LFM2-MoE, and over the dense LFM2 (refused).
  const std::string lfm2 =
      R"("hidden_size":2048,"num_hidden_layers":4,"num_experts":32,
    "num_experts_per_tok":4,"moe_intermediate_size":1792,
    "norm_topk_prob":true,"routed_scaling_factor":1.0,
    "use_expert_bias":true,"num_dense_layers":2)";
  auto lfm2_moe = Parse(R"({"model_type":"lfm2_moe",)" + lfm2 + "}");
  auto lfm2_vl = Parse(
      R"({"model_type":"lfm2_vl","architectures":["Lfm2VlForConditionalGeneration"],
    "text_config":{"model_type":"lfm2_moe",)" +
      lfm2 + "}}");
  ASSERT_TRUE(lfm2_moe.ok()) << lfm2_moe.status();
  ASSERT_TRUE(lfm2_vl.ok()) << lfm2_vl.status();
  EXPECT_EQ(lfm2_vl->info.layer, lfm2_moe->info.layer);
  EXPECT_EQ(lfm2_vl->info.moe_layers, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(HfTensorName(HfFamily::kLfm2Vl, 2, WeightRole::kExpertBias, -1),
            "model.language_model.layers.2.feed_forward.expert_bias");
  auto lfm2_dense = Parse(
      R"({"model_type":"lfm2_vl","architectures":["Lfm2VlForConditionalGeneration"],
    "text_config":{"model_type":"lfm2","hidden_size":1024,"num_hidden_layers":4}})");
  EXPECT_TRUE(Mentions(lfm2_dense.status(), "'text_config.model_type'"))
      << lfm2_dense.status();

  // MiniMax-VL-01 over the released MiniMax-Text-01 text config.
  auto minimax = Parse(
      R"({"model_type":"minimax_vl_01","architectures":["MiniMaxVL01ForConditionalGeneration"],
    "text_config":{"model_type":"minimax_text_01","hidden_size":6144,
    "num_hidden_layers":2,"num_local_experts":32,"num_experts_per_tok":2,
    "intermediate_size":9216,"attn_type_list":[0,1]}})");
  ASSERT_TRUE(minimax.ok()) << minimax.status();
  EXPECT_EQ(minimax->family, HfFamily::kMinimaxVl01);
  EXPECT_EQ(minimax->info.layer.num_experts, 32);
  EXPECT_TRUE(minimax->info.layer.route_norm);
  EXPECT_EQ(HfTensorName(HfFamily::kMinimaxVl01, 1, WeightRole::kW1, 5),
            "language_model.model.layers.1.block_sparse_moe.experts.5.w1."
            "weight");

  // Step3-VL over Step-3's text model; its layers where Step-3's are.
  auto step = Parse(
      R"({"model_type":"step3_vl","architectures":["Step3VLForConditionalGeneration"],
    "text_config":{"model_type":"step3_text","hidden_size":7168,
    "num_hidden_layers":6,"moe_num_experts":48,"moe_top_k":3,
    "moe_intermediate_size":5120,"share_expert_dim":5120,
    "moe_layers_enum":"4,5"}})");
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->family, HfFamily::kStep3Vl);
  EXPECT_EQ(step->info.moe_layers, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(step->info.layer.shared_inter, 5120);
  EXPECT_EQ(HfTensorName(HfFamily::kStep3Vl, 4, WeightRole::kW1, 0),
            "model.layers.4.moe.gate_proj.weight");

  // GraniteMoeSWA: GraniteMoeShared's keys, both name sets.
  auto swa = Parse(
      R"({"model_type":"granitemoe_swa","architectures":["GraniteMoeSWAForCausalLM"],
    "hidden_size":1536,"num_hidden_layers":2,"num_local_experts":40,
    "num_experts_per_tok":8,"intermediate_size":512,
    "shared_intermediate_size":1024,"sliding_window":4096})");
  ASSERT_TRUE(swa.ok()) << swa.status();
  EXPECT_EQ(swa->info.layer.shared_inter, 1024);
  EXPECT_EQ(HfTensorName(HfFamily::kGraniteMoeSwa, 1, WeightRole::kGate, -1),
            "model.layers.1.block_sparse_moe.router.layer.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kGraniteMoeSwa, 1, WeightRole::kGate, -1,
                         HfExpertLayout::kPacked),
            "model.layers.1.block_sparse_moe.router.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kGraniteMoeSwa, 1, WeightRole::kW2, 0,
                         HfExpertLayout::kPacked),
            "model.layers.1.block_sparse_moe.experts.down_proj");
}

// MiniCPM-MoE: Mixtral's routing keyed num_experts under mlp.; a config
// without model_type (early remote-code releases) is read by its class, and
// a dense MiniCPM (no num_experts) is refused naming the key.
TEST(HfFamilies, MinicpmMoeIsMixtralUnderMlp) {
  const std::string keys =
      R"("architectures":["MiniCPMForCausalLM"],"hidden_size":2304,
    "num_hidden_layers":40,"intermediate_size":5760,"num_experts_per_tok":2,
    "scale_emb":12,"dim_model_base":256,"scale_depth":1.4)";
  auto s = Parse(R"({"model_type":"minicpm","num_experts":8,)" + keys + "}");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, HfFamily::kMinicpm);
  EXPECT_EQ(s->info.layer.num_experts, 8);
  EXPECT_EQ(s->info.layer.inter, 5760);
  EXPECT_EQ(s->info.layer.score_func, ScoreFunc::kSoftmax);
  EXPECT_TRUE(s->info.layer.route_norm);
  EXPECT_EQ(s->info.moe_layers.size(), 40u);
  EXPECT_EQ(HfTensorName(HfFamily::kMinicpm, 3, WeightRole::kGate, -1),
            "model.layers.3.mlp.gate.weight");
  EXPECT_EQ(HfTensorName(HfFamily::kMinicpm, 3, WeightRole::kW3, 7),
            "model.layers.3.mlp.experts.7.w3.weight");
  auto unnamed = Parse(R"({"num_experts":8,)" + keys + "}");
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  EXPECT_EQ(unnamed->family, HfFamily::kMinicpm);
  auto dense = Parse(R"({"model_type":"minicpm",)" + keys + "}");
  EXPECT_TRUE(Mentions(dense.status(), "'num_experts'")) << dense.status();
}

}  // namespace
}  // namespace moe
