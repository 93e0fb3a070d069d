#include "core/hf_config.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const json& j, std::string label)
      : j_(j), label_(std::move(label)) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": config key '", key, "' ", what));
  }
  bool Present(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  absl::StatusOr<int64_t> Int(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return Error(key, "is missing");
    if (!it->is_number_integer()) return Error(key, "must be an integer");
    return it->get<int64_t>();
  }
  absl::StatusOr<int64_t> Int(const char* key, int64_t fallback) const {
    return Present(key) ? Int(key) : fallback;
  }
  absl::StatusOr<double> Number(const char* key, double fallback) const {
    if (!Present(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number()) return Error(key, "must be a number");
    return v.get<double>();
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!Present(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) return Error(key, "must be true or false");
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(const char* key,
                                     std::string fallback) const {
    if (!Present(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) return Error(key, "must be a string");
    return v.get<std::string>();
  }
  const json& raw() const { return j_; }

 private:
  const json& j_;
  std::string label_;
};

absl::Status ReadExtensions(const ConfigReader& r, MoeLayerConfig* c) {
  MOE_ASSIGN_OR_RETURN(c->capacity_factor,
                       r.Number("moe_capacity_factor", 0.0));
  MOE_ASSIGN_OR_RETURN(
      c->score_before_experts,
      r.Bool("moe_score_before_experts", c->score_before_experts));
  MOE_ASSIGN_OR_RETURN(std::string routing,
                       r.String("moe_routing", "token_choice"));
  if (routing == "token_choice") {
    c->routing = RoutingMode::kTokenChoice;
  } else if (routing == "expert_choice") {
    c->routing = RoutingMode::kExpertChoice;
  } else {
    return r.Error("moe_routing", "must be 'token_choice' or 'expert_choice'");
  }
  // The 2026 layer options (tests/golden/README.md) in the same generic
  // form, for checkpoints of families that do not name them themselves:
  // each moe_<golden key> overrides what the family said.
  if (r.Present("moe_score_func")) {
    MOE_ASSIGN_OR_RETURN(std::string f, r.String("moe_score_func", ""));
    if (f == "softmax") {
      c->score_func = ScoreFunc::kSoftmax;
    } else if (f == "sigmoid") {
      c->score_func = ScoreFunc::kSigmoid;
    } else if (f == "sqrtsoftplus") {
      c->score_func = ScoreFunc::kSqrtSoftplus;
    } else if (f == "topk_softmax") {
      c->score_func = ScoreFunc::kTopkSoftmax;
    } else {
      return r.Error("moe_score_func",
                     "must be 'softmax', 'sigmoid', 'sqrtsoftplus' or "
                     "'topk_softmax'");
    }
  }
  MOE_ASSIGN_OR_RETURN(c->router_bias,
                       r.Bool("moe_router_bias", c->router_bias));
  MOE_ASSIGN_OR_RETURN(c->expert_bias,
                       r.Bool("moe_expert_bias", c->expert_bias));
  // Only a given moe_act overrides: the family's own activation (relu2,
  // gelu_tanh, situ) has no generic spelling to fall back to.
  if (r.Present("moe_act")) {
    MOE_ASSIGN_OR_RETURN(std::string act, r.String("moe_act", ""));
    if (act == "silu") {
      c->act = Activation::kSilu;
    } else if (act == "gptoss") {
      c->act = Activation::kGptOss;
    } else if (act == "silu_clamp") {
      c->act = Activation::kSiluClamp;
    } else {
      return r.Error("moe_act", "must be 'silu', 'gptoss' or 'silu_clamp'");
    }
  }
  MOE_ASSIGN_OR_RETURN(double alpha, r.Number("moe_act_alpha", c->act_alpha));
  MOE_ASSIGN_OR_RETURN(double limit, r.Number("moe_act_limit", c->act_limit));
  MOE_ASSIGN_OR_RETURN(double norm_min, r.Number("moe_norm_min", c->norm_min));
  c->act_alpha = static_cast<float>(alpha);
  c->act_limit = static_cast<float>(limit);
  c->norm_min = static_cast<float>(norm_min);
  MOE_ASSIGN_OR_RETURN(c->hash_vocab, r.Int("moe_hash_vocab", c->hash_vocab));
  // noaux_tc without its correction bias (DeepSeek-V4 hash layers).
  MOE_ASSIGN_OR_RETURN(c->use_bias, r.Bool("moe_use_bias", c->use_bias));
  if (c->hash_vocab > 0 && c->n_groups == 1 && c->topk_groups == 1) {
    // One group keeping one group is no group limit: nothing for a hash
    // layer to refuse.
    c->n_groups = 0;
    c->topk_groups = 0;
  }
  return absl::OkStatus();
}

// Qwen2/3-MoE: layer L is sparse unless listed in mlp_only_layers, and only
// every decoder_sparse_step-th layer.
absl::Status QwenLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t step, r.Int("decoder_sparse_step", 1));
  if (step <= 0) return r.Error("decoder_sparse_step", "must be >= 1");
  std::vector<int64_t> dense;
  if (r.Present("mlp_only_layers")) {
    const json& v = r.raw().at("mlp_only_layers");
    if (!v.is_array()) return r.Error("mlp_only_layers", "must be a list");
    for (const auto& x : v) {
      if (!x.is_number_integer()) {
        return r.Error("mlp_only_layers", "must hold integers");
      }
      dense.push_back(x.get<int64_t>());
    }
  }
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (std::find(dense.begin(), dense.end(), l) == dense.end() &&
        (l + 1) % step == 0) {
      info->moe_layers.push_back(l);
    }
  }
  return absl::OkStatus();
}

absl::Status DeepseekLayers(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t first_dense, r.Int("first_k_dense_replace", 0));
  MOE_ASSIGN_OR_RETURN(int64_t freq, r.Int("moe_layer_freq", 1));
  if (freq <= 0) return r.Error("moe_layer_freq", "must be >= 1");
  // Layer num_hidden_layers (the MTP module of V3) is never served.
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (l >= first_dense && l % freq == 0) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

struct FamilyEntry {
  const char* model_type;
  HfFamily family;
  // The `architectures` a checkpoint of the family may name.
  std::vector<const char*> architectures;
  // A multimodal config keeps the language model's keys in text_config.
  bool text_config = false;
  // The family whose config reader and tensor names this one shares: a
  // family whose MoE math and names exist already is described, not coded.
  // Itself when unset.
  std::optional<HfFamily> like = std::nullopt;
  // Config keys that, when given as a per-layer list of num_hidden_layers
  // entries ("sparse" / "dense", or 1 / 0), say which layers are MoE in
  // place of the `like` family's own rule; the first one present wins.
  std::vector<const char*> moe_layer_lists = {};
  // Keys the `like` family's reader knows but this family's config does not
  // have: they are read as absent (the base family's default) even when a
  // config carries them.
  std::vector<const char*> absent_keys = {};
  // Decoder layer L's tensor prefix, {L} standing for L; the `like`
  // family's when unset, "model.layers.{L}." when neither sets one.
  const char* layer_prefix = nullptr;
  // The config key that gives the LatentMoE width, where the family has one:
  // a checkpoint whose latent projections are of another width is refused
  // naming it.
  const char* latent_key = nullptr;
  // The keys that may give k, the first present winning; a config with none
  // is refused naming the last.
  std::vector<const char*> top_k_keys = {"num_experts_per_tok"};
};

const std::vector<FamilyEntry>& FamilyTable() {
  static const auto* table = new std::vector<FamilyEntry>{
      {"mixtral", HfFamily::kMixtral, {"MixtralForCausalLM"}},
      {"qwen2_moe", HfFamily::kQwen2Moe, {"Qwen2MoeForCausalLM"}},
      {"qwen3_moe", HfFamily::kQwen3Moe, {"Qwen3MoeForCausalLM"}},
      {"olmoe", HfFamily::kOlmoe, {"OlmoeForCausalLM"}},
      {"deepseek_v2", HfFamily::kDeepseekV2, {"DeepseekV2ForCausalLM"}},
      {"deepseek_v3", HfFamily::kDeepseekV3, {"DeepseekV3ForCausalLM"}},
      {"glm4_moe", HfFamily::kGlm4Moe, {"Glm4MoeForCausalLM"}},
      // GLM-5: its DSA attention is not the service's; its MoE is GLM-4.5's
      // (layers from first_k_dense_replace on unless listed).
      {"glm_moe_dsa",
       HfFamily::kGlmMoeDsa,
       {"GlmMoeDsaForCausalLM"},
       /*text_config=*/false,
       /*like=*/HfFamily::kGlm4Moe,
       /*moe_layer_lists=*/{"mlp_layer_types"}},
      // MiMo-V2-Flash: DeepSeek-V3's gate with n_shared_experts null (no
      // shared expert) and routed_scaling_factor null (1.0). The Hub config
      // lists moe_layer_freq per layer, transformers' says mlp_layer_types.
      {"mimo_v2_flash",
       HfFamily::kMimoV2Flash,
       {"MiMoV2FlashForCausalLM"},
       /*text_config=*/false,
       /*like=*/HfFamily::kDeepseekV3,
       /*moe_layer_lists=*/{"mlp_layer_types", "moe_layer_freq"}},
      // Moonshot's Kimi K2 is a DeepSeek-V3 model under its own model_type.
      {"kimi_k2",
       HfFamily::kKimiK2,
       {"DeepseekV3ForCausalLM"},
       /*text_config=*/false,
       /*like=*/HfFamily::kDeepseekV3},
      // Qwen3.5 / 3.6: Qwen3-Next's MoE in a multimodal wrapper. Its router
      // always renormalises and every decoder layer is sparse, so it has no
      // norm_topk_prob and no sparse-layer keys.
      {.model_type = "qwen3_5_moe",
       .family = HfFamily::kQwen35Moe,
       .architectures = {"Qwen3_5MoeForConditionalGeneration"},
       .text_config = true,
       .like = HfFamily::kQwen3Next,
       .absent_keys = {"norm_topk_prob", "decoder_sparse_step",
                       "mlp_only_layers"},
       .layer_prefix = "model.language_model.layers.{L}."},
      {"qwen3_next", HfFamily::kQwen3Next, {"Qwen3NextForCausalLM"}},
      {"minimax_m2", HfFamily::kMinimaxM2, {"MiniMaxM2ForCausalLM"}},
      {.model_type = "llama4",
       .family = HfFamily::kLlama4,
       .architectures = {"Llama4ForConditionalGeneration"},
       .text_config = true,
       .layer_prefix = "language_model.model.layers.{L}."},
      {"llama4_text", HfFamily::kLlama4Text, {"Llama4ForCausalLM"}},
      {.model_type = "ernie4_5_moe",
       .family = HfFamily::kErnie45Moe,
       .architectures = {"Ernie4_5_MoeForCausalLM"},
       .top_k_keys = {"moe_k"}},
      // gpt-oss's release config says experts_per_token.
      {.model_type = "gpt_oss",
       .family = HfFamily::kGptOss,
       .architectures = {"GptOssForCausalLM"},
       .top_k_keys = {"num_experts_per_tok", "experts_per_token"}},
      {.model_type = "deepseek_v4",
       .family = HfFamily::kDeepseekV4,
       .architectures = {"DeepseekV4ForCausalLM"},
       .layer_prefix = "layers.{L}."},
      // Nemotron 3 Nano / Super: Mamba, attention and MoE layers in one
      // stack, named backbone.layers.{L}.mixer.*.
      {.model_type = "nemotron_h",
       .family = HfFamily::kNemotronH,
       .architectures = {"NemotronHForCausalLM"},
       .layer_prefix = "backbone.layers.{L}.",
       .latent_key = "moe_latent_size"},
      {.model_type = "gemma4",
       .family = HfFamily::kGemma4,
       .architectures = {"Gemma4ForConditionalGeneration"},
       .text_config = true,
       .layer_prefix = "model.language_model.layers.{L}.",
       .top_k_keys = {"top_k_experts"}},
      // Kimi K3's text_config says model_type kimi_linear; the checkpoint is
      // recognised by its top-level model_type.
      {.model_type = "kimi_k3",
       .family = HfFamily::kKimiK3,
       .architectures = {"KimiK3ForConditionalGeneration"},
       .text_config = true,
       .layer_prefix = "language_model.model.layers.{L}.",
       .latent_key = "routed_expert_hidden_size",
       .top_k_keys = {"num_experts_per_token"}},
  };
  return *table;
}

const FamilyEntry& EntryOf(HfFamily family) {
  for (const auto& e : FamilyTable()) {
    if (e.family == family) return e;
  }
  return FamilyTable().front();
}

// GLM-4.5: every layer from first_k_dense_replace on is MoE (no
// moe_layer_freq); its MTP layers come after num_hidden_layers.
void Glm4Layers(int64_t first_dense, ModelInfo* info) {
  for (int64_t l = std::max<int64_t>(first_dense, 0); l < info->num_layers;
       ++l) {
    info->moe_layers.push_back(l);
  }
}

// Llama 4: `moe_layers` when given, else every interleave_moe_layer_step-th
// layer (L % step == step - 1).
absl::Status Llama4Layers(const ConfigReader& r, ModelInfo* info) {
  if (r.Present("moe_layers")) {
    const json& v = r.raw().at("moe_layers");
    if (!v.is_array()) return r.Error("moe_layers", "must be a list");
    for (const auto& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 ||
          x.get<int64_t>() >= info->num_layers) {
        return r.Error("moe_layers",
                       absl::StrCat("must hold layer ids in [0, ",
                                    info->num_layers, "), got ", x.dump()));
      }
      info->moe_layers.push_back(x.get<int64_t>());
    }
    std::sort(info->moe_layers.begin(), info->moe_layers.end());
    info->moe_layers.erase(
        std::unique(info->moe_layers.begin(), info->moe_layers.end()),
        info->moe_layers.end());
    return absl::OkStatus();
  }
  MOE_ASSIGN_OR_RETURN(int64_t step, r.Int("interleave_moe_layer_step", 1));
  if (step <= 0) return r.Error("interleave_moe_layer_step", "must be >= 1");
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (l % step == step - 1) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// The family of `model_type`, or an error listing the supported ones.
absl::StatusOr<HfFamily> FamilyOf(const std::string& model_type,
                                  absl::string_view label) {
  for (const auto& e : FamilyTable()) {
    if (model_type == e.model_type) return e.family;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(label, ": unsupported model_type '", model_type,
                   "' (supported: ", SupportedHfFamilies(), ")"));
}

// `architectures`, when given, must name the family's own model class: a
// checkpoint of another architecture under a known model_type is not one
// the loader knows how to read.
absl::Status CheckArchitectures(const json& j, HfFamily family,
                                absl::string_view label) {
  auto it = j.find("architectures");
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  const FamilyEntry& e = EntryOf(family);
  const std::string known = absl::StrJoin(e.architectures, ", ");
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": config key 'architectures' must be a list"));
  }
  for (const auto& a : *it) {
    const bool ok =
        a.is_string() &&
        std::any_of(e.architectures.begin(), e.architectures.end(),
                    [&](const char* k) { return a.get<std::string>() == k; });
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": architecture ", a.dump(),
                       " is not supported for model_type '", e.model_type,
                       "' (supported: ", known, ")"));
    }
  }
  return absl::OkStatus();
}

// quantization_config: absent, or a method the loader reads: block FP8
// (DeepSeek-V3's weight_scale_inv, DeepSeek-V4's E8M0 .scale), gpt-oss's
// MXFP4 *_blocks/*_scales and ModelOpt's NVFP4. Anything else would be served
// as garbage, so it is refused here.
absl::StatusOr<std::string> QuantMethod(const json& j, HfFamily family,
                                        absl::string_view label) {
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return std::string();
  const auto m = it->is_object() ? it->find("quant_method") : it->end();
  if (!it->is_object() || m == it->end() || !m->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": quantization_config needs a string 'quant_method'"));
  }
  const std::string method = m->get<std::string>();
  if (method == "fp8") return method;
  // NVIDIA ModelOpt: NVFP4 only (weight / weight_scale / weight_scale_2,
  // read by the checkpoint); its FP8 and mixed algorithms are other layouts.
  if (method == "modelopt") {
    const auto algo = it->find("quant_algo");
    const std::string found = algo == it->end()   ? "none"
                              : algo->is_string() ? algo->get<std::string>()
                                                  : algo->dump();
    if (found != "NVFP4") {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": quantization_config.quant_algo '", found,
          "' of quant_method 'modelopt' is not supported (supported: NVFP4)"));
    }
    const auto group = it->find("group_size");
    if (group != it->end() && *group != 16) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": NVFP4 quantization_config.group_size ",
                       group->dump(), " is not supported (supported: 16)"));
    }
    return method;
  }
  // gpt-oss as released (MXFP4 blocks); a dequantised copy may keep the
  // stale quantization_config.
  if (method == "mxfp4" && family == HfFamily::kGptOss) return method;
  // Kimi K3 as released: compressed-tensors MXFP4 routed experts
  // (weight_packed + weight_scale), read 4-bit by the checkpoint.
  if (method == "compressed-tensors" && family == HfFamily::kKimiK3) {
    const auto f = it->find("format");
    const std::string format =
        f != it->end() && f->is_string() ? f->get<std::string>() : "";
    if (format == "mxfp4-pack-quantized") return method;
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": quantization_config.format '", format,
                     "' is not supported for compressed-tensors (supported: "
                     "mxfp4-pack-quantized, Kimi K3's release)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      label, ": quantization_config.quant_method '", method,
      "' is not supported (supported: fp8 with weight_scale_inv blocks, "
      "modelopt NVFP4, or an unquantised checkpoint: f32, bf16, f16)"));
}

void AllLayersMoe(ModelInfo* info) {
  for (int64_t l = 0; l < info->num_layers; ++l) info->moe_layers.push_back(l);
}

absl::Status ReadMixtral(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_local_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("intermediate_size"));
  c.route_norm = true;
  AllLayersMoe(info);
  return absl::OkStatus();
}

absl::Status ReadQwen(const ConfigReader& r, HfFamily family, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("moe_intermediate_size"));
  // Qwen3-Next's default is true (its renorm has no epsilon, which is below
  // fp32 resolution next to the engine's +1e-20).
  const bool next_math = family == HfFamily::kQwen3Next;
  MOE_ASSIGN_OR_RETURN(c.route_norm, r.Bool("norm_topk_prob", next_math));
  if (family == HfFamily::kQwen2Moe || next_math) {
    MOE_ASSIGN_OR_RETURN(c.shared_inter,
                         r.Int("shared_expert_intermediate_size"));
    if (next_math && c.shared_inter <= 0) {
      // Qwen3Next's SparseMoeBlock (and the families described as it)
      // always has its gated shared expert.
      return r.Error("shared_expert_intermediate_size",
                     absl::StrCat("must be >= 1 for ", info->family));
    }
    c.shared_gate = c.shared_inter > 0;
  }
  return QwenLayers(r, info);
}

absl::Status ReadOlmoe(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("intermediate_size"));
  MOE_ASSIGN_OR_RETURN(c.route_norm, r.Bool("norm_topk_prob", false));
  AllLayersMoe(info);
  return absl::OkStatus();
}

// DeepSeek's scoring_func and topk_method, into the gate's settings.
absl::Status DeepseekGate(const ConfigReader& r, bool v3, MoeLayerConfig* c) {
  MOE_ASSIGN_OR_RETURN(std::string scoring,
                       r.String("scoring_func", v3 ? "sigmoid" : "softmax"));
  MOE_ASSIGN_OR_RETURN(std::string method,
                       r.String("topk_method", v3 ? "noaux_tc" : "greedy"));
  MOE_ASSIGN_OR_RETURN(int64_t n_group, r.Int("n_group", 1));
  MOE_ASSIGN_OR_RETURN(int64_t topk_group, r.Int("topk_group", 1));
  if (scoring == "softmax") {
    c->score_func = ScoreFunc::kSoftmax;
  } else if (scoring == "sigmoid") {
    c->score_func = ScoreFunc::kSigmoid;
  } else {
    return r.Error("scoring_func", "must be 'softmax' or 'sigmoid'");
  }
  if (method == "greedy") {
    c->n_groups = 0;
  } else if (method == "group_limited_greedy") {
    c->n_groups = n_group;
    c->topk_groups = topk_group;
    c->group_score = GroupScore::kMax;
  } else if (method == "noaux_tc") {
    c->n_groups = n_group;
    c->topk_groups = topk_group;
    c->group_score = GroupScore::kTop2Sum;
    c->use_bias = true;
  } else {
    return r.Error("topk_method",
                   absl::StrCat("'", method,
                                "' is not one of greedy, "
                                "group_limited_greedy, noaux_tc"));
  }
  return absl::OkStatus();
}

absl::Status ReadDeepseek(const ConfigReader& r, HfFamily family,
                          ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  const bool v3 = family != HfFamily::kDeepseekV2;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("n_routed_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(int64_t n_shared, r.Int("n_shared_experts", 0));
  if (n_shared < 0) return r.Error("n_shared_experts", "must be >= 0");
  c.shared_inter = n_shared * c.inter;
  MOE_ASSIGN_OR_RETURN(bool norm, r.Bool("norm_topk_prob", false));
  MOE_ASSIGN_OR_RETURN(double scale, r.Number("routed_scaling_factor", 1.0));
  MOE_RETURN_IF_ERROR(DeepseekGate(r, v3, &c));
  c.route_norm = norm && c.top_k > 1;
  if (v3) {
    // DeepseekV3MoEGate: optional renorm, then always the scale.
    c.route_scale = static_cast<float>(scale);
  } else {
    // DeepseekV2MoEGate: renorm *or* scale, never both.
    c.route_scale = c.route_norm ? 1.0f : static_cast<float>(scale);
  }
  if (family == HfFamily::kGlm4Moe) {
    MOE_ASSIGN_OR_RETURN(int64_t first_dense,
                         r.Int("first_k_dense_replace", 0));
    Glm4Layers(first_dense, info);
    return absl::OkStatus();
  }
  return DeepseekLayers(r, info);
}

// MiniMax-M2: sigmoid, correction bias for the choice, renorm, no scale,
// no shared expert, every layer MoE. transformers ignores the release
// config's scoring_func / use_routing_bias, and so does this.
absl::Status ReadMinimaxM2(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_local_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("intermediate_size"));
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.route_norm = true;
  AllLayersMoe(info);
  return absl::OkStatus();
}

// Llama 4: sigmoid of the chosen logits scales the expert input; the shared
// expert (width intermediate_size) is always added, ungated.
absl::Status ReadLlama4(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_local_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("intermediate_size"));
  c.score_func = ScoreFunc::kSigmoid;
  c.route_norm = false;
  c.score_before_experts = true;
  c.shared_inter = c.inter;
  return Llama4Layers(r, info);
}

// k, from the first of the family's top-k keys present.
absl::StatusOr<int64_t> TopK(const ConfigReader& r, const FamilyEntry& entry) {
  for (const char* key : entry.top_k_keys) {
    if (r.Present(key)) return r.Int(key);
  }
  return r.Int(entry.top_k_keys.back());
}

// ERNIE 4.5: softmax in fp32, the moe_statics bias for choosing only,
// weights p / max(sum p, moe_norm_min), no scale; MoE layers every
// moe_layer_interval-th from moe_layer_start_index to moe_layer_end_index.
absl::Status ReadErnie45(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("moe_num_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(int64_t n_shared, r.Int("moe_num_shared_experts", 0));
  if (n_shared < 0) return r.Error("moe_num_shared_experts", "must be >= 0");
  c.shared_inter = n_shared * c.inter;
  MOE_ASSIGN_OR_RETURN(double norm_min, r.Number("moe_norm_min", 1e-12));
  MOE_ASSIGN_OR_RETURN(bool linear_bias, r.Bool("use_bias", false));
  if (linear_bias) {
    return r.Error("use_bias",
                   "true (biases on every Linear) is not supported for "
                   "ernie4_5_moe; the released checkpoints have none");
  }
  c.score_func = ScoreFunc::kSoftmax;
  c.use_bias = true;
  c.route_norm = true;
  c.norm_min = static_cast<float>(norm_min);
  MOE_ASSIGN_OR_RETURN(int64_t interval, r.Int("moe_layer_interval", 1));
  MOE_ASSIGN_OR_RETURN(int64_t start, r.Int("moe_layer_start_index", 1));
  MOE_ASSIGN_OR_RETURN(int64_t end, r.Int("moe_layer_end_index", -1));
  if (interval <= 0) return r.Error("moe_layer_interval", "must be >= 1");
  if (end < 0) end = info->num_layers - 1;
  for (int64_t l = std::max<int64_t>(start, 0);
       l <= end && l < info->num_layers; ++l) {
    if ((l + 1) % interval == 0) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// gpt-oss: top-k of the biased router logits, softmax over those k; expert
// biases; the clamped gptoss activation (alpha 1.702 is a constant of the
// model code, the limit is swiglu_limit); every layer MoE, no shared expert.
absl::Status ReadGptOss(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_local_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("intermediate_size"));
  MOE_ASSIGN_OR_RETURN(double limit, r.Number("swiglu_limit", 7.0));
  c.score_func = ScoreFunc::kTopkSoftmax;
  c.route_norm = false;
  c.router_bias = true;
  c.expert_bias = true;
  c.act = Activation::kGptOss;
  c.act_alpha = 1.702f;
  c.act_limit = static_cast<float>(limit);
  AllLayersMoe(info);
  return absl::OkStatus();
}

// DeepSeek-V4 (unquantised or as released): sqrtsoftplus scores, correction
// bias for choosing, renorm always, x routed_scaling_factor, silu_clamp on
// routed and shared experts. Layers L < num_hash_layers (or mlp_layer_types
// "hash_moe") are hash-routed through tid2eid [vocab_size, k], without the
// correction bias; the rest choose top-k with it. In a model with both, the
// top-k config is the model's and each hash layer has a routing override.
absl::Status ReadDeepseekV4(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("n_routed_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(int64_t n_shared, r.Int("n_shared_experts", 1));
  if (n_shared < 0) return r.Error("n_shared_experts", "must be >= 0");
  c.shared_inter = n_shared * c.inter;
  MOE_ASSIGN_OR_RETURN(std::string scoring,
                       r.String("scoring_func", "sqrtsoftplus"));
  if (scoring != "sqrtsoftplus") {
    return r.Error("scoring_func", absl::StrCat("'", scoring,
                                                "' is not sqrtsoftplus, the "
                                                "only one deepseek_v4 has"));
  }
  MOE_ASSIGN_OR_RETURN(std::string expert_dtype,
                       r.String("expert_dtype", "bf16"));
  // fp4: routed experts MXFP4 with E8M0 `.scale` (read by the checkpoint,
  // tensor by tensor); fp8 / bf16: F8_E4M3 with `.scale` or unquantised.
  if (expert_dtype != "fp4" && expert_dtype != "fp8" &&
      expert_dtype != "bf16") {
    return r.Error("expert_dtype", absl::StrCat("'", expert_dtype,
                                                "' is not fp4, fp8 or bf16"));
  }
  MOE_ASSIGN_OR_RETURN(double scale, r.Number("routed_scaling_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(double limit, r.Number("swiglu_limit", 10.0));
  c.score_func = ScoreFunc::kSqrtSoftplus;
  c.route_norm = true;
  c.route_scale = static_cast<float>(scale);
  c.act = Activation::kSiluClamp;
  c.act_limit = static_cast<float>(limit);
  std::vector<bool> hash(info->num_layers, false);
  if (r.Present("mlp_layer_types")) {
    const json& v = r.raw().at("mlp_layer_types");
    if (!v.is_array() || static_cast<int64_t>(v.size()) != info->num_layers) {
      return r.Error("mlp_layer_types",
                     absl::StrCat("must list ", info->num_layers,
                                  " layer types (hash_moe or moe)"));
    }
    for (int64_t l = 0; l < info->num_layers; ++l) {
      if (v[l] != "hash_moe" && v[l] != "moe") {
        return r.Error("mlp_layer_types",
                       absl::StrCat("entry ", l, " is ", v[l].dump(),
                                    ", not 'hash_moe' or 'moe'"));
      }
      hash[l] = v[l] == "hash_moe";
    }
  } else {
    MOE_ASSIGN_OR_RETURN(int64_t n_hash, r.Int("num_hash_layers", 0));
    for (int64_t l = 0; l < std::min(n_hash, info->num_layers); ++l) {
      hash[l] = true;
    }
  }
  const int64_t n_hash = std::count(hash.begin(), hash.end(), true);
  MoeLayerConfig hashed = c;
  if (n_hash > 0) {
    MOE_ASSIGN_OR_RETURN(hashed.hash_vocab, r.Int("vocab_size"));
  }
  c.use_bias = true;
  AllLayersMoe(info);
  if (n_hash == info->num_layers) {
    c = hashed;
    return absl::OkStatus();
  }
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (hash[l]) info->routing_overrides[l] = hashed;
  }
  return absl::OkStatus();
}

// Nemotron 3's layer kinds: hybrid_override_pattern (one character per
// layer, 'E' MoE, 'M' Mamba, '*' attention, '-' dense MLP) or transformers
// v5's layers_block_type list ("moe", "mamba", "linear_attention",
// "full_attention", "mlp").
absl::Status NemotronHLayers(const ConfigReader& r, ModelInfo* info) {
  std::vector<bool> moe;
  if (r.Present("layers_block_type")) {
    const json& v = r.raw().at("layers_block_type");
    if (!v.is_array()) return r.Error("layers_block_type", "must be a list");
    for (const auto& x : v) {
      const bool known = x == "moe" || x == "mamba" ||
                         x == "linear_attention" || x == "full_attention" ||
                         x == "attention" || x == "mlp";
      if (!known) {
        return r.Error("layers_block_type",
                       absl::StrCat("entry ", moe.size(), " is ", x.dump(),
                                    ", not moe, mamba, linear_attention, "
                                    "full_attention or mlp"));
      }
      moe.push_back(x == "moe");
    }
  } else if (r.Present("hybrid_override_pattern")) {
    MOE_ASSIGN_OR_RETURN(std::string pattern,
                         r.String("hybrid_override_pattern", ""));
    for (char ch : pattern) {
      if (ch != 'E' && ch != 'M' && ch != '*' && ch != '-') {
        return r.Error("hybrid_override_pattern",
                       absl::StrCat("holds '", std::string(1, ch),
                                    "', not one of E (MoE), M (Mamba), * "
                                    "(attention), - (MLP)"));
      }
      moe.push_back(ch == 'E');
    }
  } else {
    return r.Error("hybrid_override_pattern",
                   "is missing (nor is layers_block_type given): nemotron_h "
                   "names its MoE layers there");
  }
  if (static_cast<int64_t>(moe.size()) != info->num_layers) {
    return r.Error(
        r.Present("layers_block_type") ? "layers_block_type"
                                       : "hybrid_override_pattern",
        absl::StrCat("describes ", moe.size(),
                     " layers, not num_hidden_layers ", info->num_layers));
  }
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (moe[l]) info->moe_layers.push_back(l);
  }
  return absl::OkStatus();
}

// Nemotron 3: DeepSeek-V3's gate (sigmoid, correction bias for the
// choice, groups, renorm, scale) over non-gated relu2 experts; Super's
// LatentMoE runs them at moe_latent_size between fc1/fc2_latent_proj, which
// carry biases when mlp_bias. The shared expert reads the full-width x.
absl::Status ReadNemotronH(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("n_routed_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(c.shared_inter,
                       r.Int("moe_shared_expert_intermediate_size", 0));
  MOE_ASSIGN_OR_RETURN(std::string act, r.String("mlp_hidden_act", "relu2"));
  if (act != "relu2") {
    return r.Error("mlp_hidden_act",
                   absl::StrCat("'", act,
                                "' is not relu2, the only "
                                "activation nemotron_h experts have"));
  }
  MOE_ASSIGN_OR_RETURN(bool mlp_bias, r.Bool("mlp_bias", false));
  MOE_ASSIGN_OR_RETURN(c.route_norm, r.Bool("norm_topk_prob", true));
  MOE_ASSIGN_OR_RETURN(double scale, r.Number("routed_scaling_factor", 1.0));
  MOE_ASSIGN_OR_RETURN(c.n_groups, r.Int("n_group", 1));
  MOE_ASSIGN_OR_RETURN(c.topk_groups, r.Int("topk_group", 1));
  c.score_func = ScoreFunc::kSigmoid;
  c.group_score = GroupScore::kTop2Sum;
  c.use_bias = true;
  c.route_scale = static_cast<float>(scale);
  c.gated = false;
  c.act = Activation::kRelu2;
  // The experts' and shared expert's own biases under mlp_bias have no
  // role: the checkpoint refuses them unless they are zero.
  c.latent_bias = mlp_bias && c.latent > 0;
  return NemotronHLayers(r, info);
}

// Gemma 4's MoE block (enable_moe_block): the router reads rms(x) * scale *
// H^-0.5, softmax, top-k renormalised times a per-expert scale; GeGLU-tanh
// experts and the dense MLP (the shared expert, width intermediate_size)
// each between their own pre- and post-RMSNorm. Every layer has it.
absl::Status ReadGemma4(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(bool moe, r.Bool("enable_moe_block", false));
  if (!moe) {
    return r.Error("enable_moe_block",
                   "is not true: this gemma4 model has no MoE layers to serve");
  }
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(c.shared_inter, r.Int("intermediate_size"));
  MOE_ASSIGN_OR_RETURN(std::string act,
                       r.String("hidden_activation", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh") {
    return r.Error("hidden_activation",
                   absl::StrCat("'", act,
                                "' is not gelu_pytorch_tanh, the "
                                "only one gemma4 experts have"));
  }
  MOE_ASSIGN_OR_RETURN(double eps, r.Number("rms_norm_eps", 1e-6));
  c.score_func = ScoreFunc::kSoftmax;
  c.route_norm = true;
  c.router_prenorm = true;
  c.per_expert_scale = true;
  c.branch_norms = true;
  c.norm_eps = static_cast<float>(eps);
  c.act = Activation::kGeluTanh;
  AllLayersMoe(info);
  return absl::OkStatus();
}

// Kimi K3 (kimi_linear text config): sigmoid (or softmax) gate with the
// correction bias for the choice, optional renorm and scale, groups only
// when num_expert_group > max(1, topk_group); SiTU experts at
// routed_expert_hidden_size between routed_expert_down/up_proj with an
// RMSNorm on the latent sum; shared experts on the full-width x. MoE layers
// as DeepSeek's (first_k_dense_replace, moe_layer_freq).
absl::Status ReadKimiK3(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_experts"));
  MOE_ASSIGN_OR_RETURN(c.inter, r.Int("moe_intermediate_size"));
  MOE_ASSIGN_OR_RETURN(int64_t n_shared, r.Int("num_shared_experts", 0));
  if (n_shared < 0) return r.Error("num_shared_experts", "must be >= 0");
  c.shared_inter = n_shared * c.inter;
  MOE_ASSIGN_OR_RETURN(bool latent_norm, r.Bool("latent_moe_use_norm", false));
  c.latent_norm = latent_norm && c.latent > 0;
  MOE_ASSIGN_OR_RETURN(std::string scoring,
                       r.String("moe_router_activation_func", "sigmoid"));
  if (scoring == "sigmoid") {
    c.score_func = ScoreFunc::kSigmoid;
  } else if (scoring == "softmax") {
    c.score_func = ScoreFunc::kSoftmax;
  } else {
    return r.Error("moe_router_activation_func",
                   absl::StrCat("'", scoring, "' is not sigmoid or softmax"));
  }
  c.use_bias = true;
  MOE_ASSIGN_OR_RETURN(c.route_norm, r.Bool("moe_renormalize", true));
  MOE_ASSIGN_OR_RETURN(double scale, r.Number("routed_scaling_factor", 1.0));
  c.route_scale = static_cast<float>(scale);
  MOE_ASSIGN_OR_RETURN(int64_t groups, r.Int("num_expert_group", 1));
  MOE_ASSIGN_OR_RETURN(int64_t topk_groups, r.Int("topk_group", 1));
  // Keeping every group is no group limit, which 1 / 1 says.
  const bool grouped = groups > 1 && groups > topk_groups;
  c.n_groups = grouped ? groups : 1;
  c.topk_groups = grouped ? topk_groups : 1;
  c.group_score = GroupScore::kTop2Sum;
  MOE_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "situ"));
  if (act != "situ") {
    return r.Error("hidden_act",
                   absl::StrCat("'", act,
                                "' is not situ, the only "
                                "activation kimi_k3 experts have"));
  }
  MOE_ASSIGN_OR_RETURN(double beta, r.Number("activation_situ_beta", 1.0));
  MOE_ASSIGN_OR_RETURN(double lambda,
                       r.Number("activation_situ_linear_beta", 0.0));
  MOE_ASSIGN_OR_RETURN(double eps, r.Number("rms_norm_eps", 1e-6));
  c.act = Activation::kSitu;
  c.act_beta = static_cast<float>(beta);
  c.act_linear_beta = static_cast<float>(lambda);
  c.norm_eps = static_cast<float>(eps);
  return DeepseekLayers(r, info);
}

// The family-specific keys: expert count and size, gate, MoE layers.
absl::Status ReadFamily(const ConfigReader& r, HfFamily family,
                        ModelInfo* info) {
  switch (family) {
    case HfFamily::kMixtral:
      return ReadMixtral(r, info);
    case HfFamily::kQwen2Moe:
    case HfFamily::kQwen3Moe:
    case HfFamily::kQwen3Next:
      return ReadQwen(r, family, info);
    case HfFamily::kOlmoe:
      return ReadOlmoe(r, info);
    case HfFamily::kDeepseekV2:
    case HfFamily::kDeepseekV3:
    case HfFamily::kGlm4Moe:
      return ReadDeepseek(r, family, info);
    case HfFamily::kMinimaxM2:
      return ReadMinimaxM2(r, info);
    case HfFamily::kLlama4:
    case HfFamily::kLlama4Text:
      return ReadLlama4(r, info);
    case HfFamily::kErnie45Moe:
      return ReadErnie45(r, info);
    case HfFamily::kGptOss:
      return ReadGptOss(r, info);
    case HfFamily::kDeepseekV4:
      return ReadDeepseekV4(r, info);
    case HfFamily::kNemotronH:
      return ReadNemotronH(r, info);
    case HfFamily::kGemma4:
      return ReadGemma4(r, info);
    case HfFamily::kKimiK3:
      return ReadKimiK3(r, info);
    default:
      // A described family (FamilyEntry::like) is read as its base family,
      // which ParseHfConfig passes here instead.
      break;
  }
  return absl::InternalError(
      absl::StrCat("no config reader for ", HfFamilyName(family)));
}

// The MoE layers from the first of `entry`'s per-layer list keys present,
// or nullopt when none is. Each entry is "sparse" / "dense" or 1 / 0.
absl::StatusOr<std::optional<std::vector<int64_t>>> ListedMoeLayers(
    const ConfigReader& r, const FamilyEntry& entry, int64_t num_layers) {
  for (const char* key : entry.moe_layer_lists) {
    if (!r.Present(key) || !r.raw().at(key).is_array()) continue;
    const json& v = r.raw().at(key);
    if (static_cast<int64_t>(v.size()) != num_layers) {
      return r.Error(
          key, absl::StrCat("lists ", v.size(),
                            " layers, not num_hidden_layers ", num_layers));
    }
    std::vector<int64_t> layers;
    for (int64_t l = 0; l < num_layers; ++l) {
      const json& x = v[l];
      const bool sparse = x == "sparse" || x == 1 || x == true;
      if (!sparse && x != "dense" && x != 0 && x != false) {
        return r.Error(key, absl::StrCat("entry ", l, " is ", x.dump(),
                                         ", not 'sparse' / 'dense' or 1 / 0"));
      }
      if (sparse) layers.push_back(l);
    }
    return layers;
  }
  return std::nullopt;
}

}  // namespace

const std::vector<HfFamily>& AllHfFamilies() {
  static const auto* all = [] {
    auto* v = new std::vector<HfFamily>;
    for (const auto& e : FamilyTable()) v->push_back(e.family);
    return v;
  }();
  return *all;
}

const char* HfFamilyName(HfFamily f) { return EntryOf(f).model_type; }

HfFamily HfBaseFamily(HfFamily f) { return EntryOf(f).like.value_or(f); }

std::string HfLayerPrefix(HfFamily family, int64_t layer) {
  const char* prefix = EntryOf(family).layer_prefix;
  if (prefix == nullptr) prefix = EntryOf(HfBaseFamily(family)).layer_prefix;
  if (prefix == nullptr) prefix = "model.layers.{L}.";
  return absl::StrReplaceAll(prefix, {{"{L}", absl::StrCat(layer)}});
}

std::string SupportedHfFamilies() {
  std::vector<std::string> names;
  for (const auto& e : FamilyTable()) names.push_back(e.model_type);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<HfModelSpec> ParseHfConfig(absl::string_view text,
                                          absl::string_view label) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": config.json is not a JSON object"));
  }
  ConfigReader top(j, std::string(label));
  MOE_ASSIGN_OR_RETURN(std::string model_type, top.String("model_type", ""));
  HfModelSpec spec;
  MOE_ASSIGN_OR_RETURN(spec.family, FamilyOf(model_type, label));
  MOE_RETURN_IF_ERROR(CheckArchitectures(j, spec.family, label));
  MOE_ASSIGN_OR_RETURN(spec.quant_method, QuantMethod(j, spec.family, label));
  // A multimodal config (Llama 4, Qwen3.5) keeps the language model's keys
  // in text_config.
  const json* body = &j;
  std::string text_label(label);
  if (EntryOf(spec.family).text_config) {
    auto it = j.find("text_config");
    if (it == j.end() || !it->is_object()) {
      return top.Error(
          "text_config",
          absl::StrCat("must be an object (model_type ", model_type, ")"));
    }
    body = &*it;
    text_label = absl::StrCat(label, " text_config");
  }
  ConfigReader r(*body, text_label);
  ModelInfo& info = spec.info;
  MoeLayerConfig& c = info.layer;
  info.family = model_type;
  info.source = std::string(label);
  MOE_ASSIGN_OR_RETURN(c.hidden, r.Int("hidden_size"));
  MOE_ASSIGN_OR_RETURN(info.num_layers, r.Int("num_hidden_layers"));
  const FamilyEntry& entry = EntryOf(spec.family);
  const HfFamily base = HfBaseFamily(spec.family);
  MOE_ASSIGN_OR_RETURN(c.top_k, TopK(r, EntryOf(base)));
  c.score_func = ScoreFunc::kSoftmax;
  if (const char* key = EntryOf(base).latent_key; key != nullptr) {
    MOE_ASSIGN_OR_RETURN(c.latent, r.Int(key, 0));
    spec.latent_key = key;
  }
  MOE_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> listed,
                       ListedMoeLayers(r, entry, info.num_layers));
  // The base family's reader sees the config without the keys this family
  // does not have, and without a per-layer list read here: its own layer
  // rule must not read the list (DeepSeek reads moe_layer_freq as a stride).
  json rest = *body;
  for (const char* key : entry.absent_keys) rest.erase(key);
  if (listed.has_value()) {
    for (const char* key : entry.moe_layer_lists) rest.erase(key);
  }
  MOE_RETURN_IF_ERROR(ReadFamily(ConfigReader(rest, text_label), base, &info));
  if (listed.has_value()) info.moe_layers = *std::move(listed);
  MOE_RETURN_IF_ERROR(ReadExtensions(r, &c));
  for (auto& [l, layer] : info.routing_overrides) {
    // Model-wide keys for what the family sets per layer would silently
    // make its hash layers top-k or the reverse.
    for (const char* key : {"moe_hash_vocab", "moe_use_bias"}) {
      if (r.Present(key)) {
        return r.Error(key, absl::StrCat("sets every layer's routing, but "
                                         "this family routes layer ",
                                         l, " by a config of its own"));
      }
    }
    MOE_RETURN_IF_ERROR(ReadExtensions(r, &layer));
  }
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
  }
  if (absl::Status s = CheckRoutingOverrides(info); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
  }
  return spec;
}

}  // namespace moe
