#include "core/hf_config.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const json& j, absl::string_view label) : j_(j), label_(label) {}

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
  absl::string_view label_;
};

absl::Status ReadExtensions(const ConfigReader& r, MoeLayerConfig* c) {
  MOE_ASSIGN_OR_RETURN(c->capacity_factor,
                       r.Number("moe_capacity_factor", 0.0));
  MOE_ASSIGN_OR_RETURN(c->score_before_experts,
                       r.Bool("moe_score_before_experts", false));
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
  MOE_ASSIGN_OR_RETURN(
      std::string act,
      r.String("moe_act", std::string(ActivationName(c->act))));
  if (act == "silu") {
    c->act = Activation::kSilu;
  } else if (act == "gptoss") {
    c->act = Activation::kGptOss;
  } else if (act == "silu_clamp") {
    c->act = Activation::kSiluClamp;
  } else {
    return r.Error("moe_act", "must be 'silu', 'gptoss' or 'silu_clamp'");
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

// The family of `model_type`, or an error listing the supported ones.
absl::StatusOr<HfFamily> FamilyOf(const std::string& model_type,
                                  absl::string_view label) {
  static constexpr std::pair<const char*, HfFamily> kFamilies[] = {
      {"mixtral", HfFamily::kMixtral},
      {"qwen2_moe", HfFamily::kQwen2Moe},
      {"qwen3_moe", HfFamily::kQwen3Moe},
      {"olmoe", HfFamily::kOlmoe},
      {"deepseek_v2", HfFamily::kDeepseekV2},
      {"deepseek_v3", HfFamily::kDeepseekV3},
  };
  for (const auto& [name, family] : kFamilies) {
    if (model_type == name) return family;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      label, ": unsupported model_type '", model_type,
      "' (supported: mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, "
      "deepseek_v3)"));
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
  MOE_ASSIGN_OR_RETURN(c.route_norm, r.Bool("norm_topk_prob", false));
  if (family == HfFamily::kQwen2Moe) {
    MOE_ASSIGN_OR_RETURN(c.shared_inter,
                         r.Int("shared_expert_intermediate_size"));
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
  const bool v3 = family == HfFamily::kDeepseekV3;
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
      return ReadQwen(r, family, info);
    case HfFamily::kOlmoe:
      return ReadOlmoe(r, info);
    case HfFamily::kDeepseekV2:
    case HfFamily::kDeepseekV3:
      return ReadDeepseek(r, family, info);
  }
  return absl::InternalError("unknown HfFamily");
}

}  // namespace

const char* HfFamilyName(HfFamily f) {
  switch (f) {
    case HfFamily::kMixtral:
      return "mixtral";
    case HfFamily::kQwen2Moe:
      return "qwen2_moe";
    case HfFamily::kQwen3Moe:
      return "qwen3_moe";
    case HfFamily::kOlmoe:
      return "olmoe";
    case HfFamily::kDeepseekV2:
      return "deepseek_v2";
    case HfFamily::kDeepseekV3:
      return "deepseek_v3";
  }
  return "?";
}

absl::StatusOr<HfModelSpec> ParseHfConfig(absl::string_view text,
                                          absl::string_view label) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": config.json is not a JSON object"));
  }
  ConfigReader r(j, label);
  MOE_ASSIGN_OR_RETURN(std::string model_type, r.String("model_type", ""));
  HfModelSpec spec;
  MOE_ASSIGN_OR_RETURN(spec.family, FamilyOf(model_type, label));
  ModelInfo& info = spec.info;
  MoeLayerConfig& c = info.layer;
  info.family = model_type;
  info.source = std::string(label);
  MOE_ASSIGN_OR_RETURN(c.hidden, r.Int("hidden_size"));
  MOE_ASSIGN_OR_RETURN(info.num_layers, r.Int("num_hidden_layers"));
  MOE_ASSIGN_OR_RETURN(c.top_k, r.Int("num_experts_per_tok"));
  c.score_func = ScoreFunc::kSoftmax;
  MOE_RETURN_IF_ERROR(ReadFamily(r, spec.family, &info));
  MOE_RETURN_IF_ERROR(ReadExtensions(r, &c));
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
  }
  return spec;
}

std::string HfTensorName(HfFamily family, int64_t layer, WeightRole role,
                         int64_t expert) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  if (family == HfFamily::kMixtral) {
    const std::string m = p + "block_sparse_moe.";
    switch (role) {
      case WeightRole::kGate:
        return m + "gate.weight";
      case WeightRole::kW1:
        return absl::StrCat(m, "experts.", expert, ".w1.weight");
      case WeightRole::kW3:
        return absl::StrCat(m, "experts.", expert, ".w3.weight");
      case WeightRole::kW2:
        return absl::StrCat(m, "experts.", expert, ".w2.weight");
      case WeightRole::kExpertBias:  // MiniMax-M2's name
        return m + "e_score_correction_bias";
      case WeightRole::kRouterBias:
        return m + "gate.bias";
      case WeightRole::kB1:
        return absl::StrCat(m, "experts.", expert, ".w1.bias");
      case WeightRole::kB3:
        return absl::StrCat(m, "experts.", expert, ".w3.bias");
      case WeightRole::kB2:
        return absl::StrCat(m, "experts.", expert, ".w2.bias");
      case WeightRole::kTid2Eid:
        return m + "gate.tid2eid";
      default:
        return "";
    }
  }
  const std::string m = p + "mlp.";
  const bool deepseek =
      family == HfFamily::kDeepseekV2 || family == HfFamily::kDeepseekV3;
  const std::string shared = deepseek ? "shared_experts." : "shared_expert.";
  switch (role) {
    case WeightRole::kGate:
      return m + "gate.weight";
    case WeightRole::kExpertBias:
      return m + "gate.e_score_correction_bias";
    case WeightRole::kW1:
      return absl::StrCat(m, "experts.", expert, ".gate_proj.weight");
    case WeightRole::kW3:
      return absl::StrCat(m, "experts.", expert, ".up_proj.weight");
    case WeightRole::kW2:
      return absl::StrCat(m, "experts.", expert, ".down_proj.weight");
    case WeightRole::kSharedW1:
      return m + shared + "gate_proj.weight";
    case WeightRole::kSharedW3:
      return m + shared + "up_proj.weight";
    case WeightRole::kSharedW2:
      return m + shared + "down_proj.weight";
    case WeightRole::kSharedGate:
      return m + "shared_expert_gate.weight";
    // The 2026 roles in the generic (moe_* extension) form.
    case WeightRole::kRouterBias:
      return m + "gate.bias";
    case WeightRole::kB1:
      return absl::StrCat(m, "experts.", expert, ".gate_proj.bias");
    case WeightRole::kB3:
      return absl::StrCat(m, "experts.", expert, ".up_proj.bias");
    case WeightRole::kB2:
      return absl::StrCat(m, "experts.", expert, ".down_proj.bias");
    case WeightRole::kTid2Eid:
      return m + "gate.tid2eid";
  }
  return "";
}

}  // namespace moe
