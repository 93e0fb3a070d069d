#include "core/hf_config_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace moe {

absl::Status RefuseGemma4WithoutMoeBlock(const ConfigReader& r,
                                         ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(bool moe, r.Bool("enable_moe_block", false));
  if (!moe) {
    return r.Error("enable_moe_block",
                   absl::StrCat("is not true: this ", info->family,
                                " model has no MoE layers to serve"));
  }
  return absl::OkStatus();
}

absl::Status RefuseErnieLinearBiases(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(bool linear_bias, r.Bool("use_bias", false));
  if (linear_bias) {
    return r.Error(
        "use_bias",
        absl::StrCat("true (biases on every Linear) is not "
                     "supported for ",
                     info->family, "; the released checkpoints have none"));
  }
  return absl::OkStatus();
}

absl::Status DeepseekV4HashLayers(const ConfigReader& r, ModelInfo* info) {
  using json = nlohmann::json;
  MoeLayerConfig& c = info->layer;
  std::vector<bool> hash(info->num_layers, false);
  if (r.Present("mlp_layer_types")) {
    const json& v = r.raw().at("mlp_layer_types");
    if (!v.is_array() || static_cast<int64_t>(v.size()) != info->num_layers) {
      return r.Error("mlp_layer_types",
                     absl::StrCat("must list ", info->num_layers,
                                  " layer types (hash_moe or moe)"));
    }
    for (int64_t l = 0; l < info->num_layers; ++l) {
      const std::string kind =
          v[l].is_string() ? v[l].get<std::string>() : std::string();
      if (kind != "hash_moe" && kind != "moe") {
        return r.Error("mlp_layer_types",
                       absl::StrCat("entry ", l, " is ", v[l].dump(),
                                    ", not 'hash_moe' or 'moe'"));
      }
      hash[l] = kind == "hash_moe";
    }
  } else {
    MOE_ASSIGN_OR_RETURN(int64_t n_hash, r.Int("num_hash_layers", 0));
    for (int64_t l = 0; l < std::min(n_hash, info->num_layers); ++l) {
      hash[l] = true;
    }
  }
  const int64_t n_hash = std::count(hash.begin(), hash.end(), true);
  // A hash layer chooses by the table, so the correction bias has no role.
  MoeLayerConfig hashed = c;
  hashed.use_bias = false;
  if (n_hash > 0) {
    MOE_ASSIGN_OR_RETURN(hashed.hash_vocab, r.Int("vocab_size"));
  }
  if (n_hash == info->num_layers) {
    c = hashed;
    return absl::OkStatus();
  }
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (hash[l]) info->layer_overrides[l] = hashed;
  }
  return absl::OkStatus();
}

absl::Status DbrxExpertWeightNorm(const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  if (!r.Present("moe_normalize_expert_weights")) {
    // DbrxFFNConfig's default is 1; a null says no normalisation.
    const bool null = r.raw().contains("moe_normalize_expert_weights");
    c.route_norm = !null;
  } else {
    MOE_ASSIGN_OR_RETURN(double p,
                         r.Number("moe_normalize_expert_weights", 1.0));
    if (p != 1.0) {
      return r.Error("moe_normalize_expert_weights",
                     absl::StrCat("is ", p,
                                  ": only 1 (the top-k weights over their sum) "
                                  "or null (none) is served for ",
                                  info->family));
    }
    c.route_norm = true;
  }
  if (r.Present("ffn_act_fn")) {
    const auto& act = r.raw().at("ffn_act_fn");
    const auto name = act.is_object() ? act.find("name") : act.end();
    if (!act.is_object() || (name != act.end() && *name != "silu")) {
      return r.Error("ffn_act_fn", absl::StrCat("is ", act.dump(),
                                                ", not {\"name\": "
                                                "\"silu\"}, the activation ",
                                                info->family, " experts have"));
    }
  }
  return absl::OkStatus();
}

absl::Status HunyuanWidthsAgree(const ConfigReader& r, ModelInfo* info) {
  const MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(int64_t moe_inter,
                       r.Int("moe_intermediate_size", c.inter));
  if (moe_inter != c.inter) {
    return r.Error("moe_intermediate_size",
                   absl::StrCat("is ", moe_inter, ", not intermediate_size ",
                                c.inter, ": transformers' ", info->family,
                                " experts are intermediate_size wide, "
                                "vLLM's moe_intermediate_size"));
  }
  MOE_ASSIGN_OR_RETURN(int64_t shared, r.Int("num_shared_expert", 1));
  if (shared != 1) {
    return r.Error(
        "num_shared_expert",
        absl::StrCat("is ", shared, ", not 1: transformers' ", info->family,
                     " shared MLP is one of intermediate_size, "
                     "vLLM's num_shared_expert of them"));
  }
  return absl::OkStatus();
}
absl::Status ExaoneMoeSwigluLimits(const ConfigReader& r, ModelInfo* info) {
  if (!r.Present("swiglu_limits")) return absl::OkStatus();
  const nlohmann::json& v = r.raw().at("swiglu_limits");
  if (!v.is_array() || static_cast<int64_t>(v.size()) != info->num_layers) {
    return r.Error("swiglu_limits",
                   absl::StrCat("must list ", info->num_layers,
                                " limits (one per layer, 0 for none)"));
  }
  for (int64_t l = 0; l < info->num_layers; ++l) {
    if (!v[l].is_number() || !(v[l].get<double>() >= 0.0) ||
        !std::isfinite(v[l].get<double>())) {
      return r.Error(
          "swiglu_limits",
          absl::StrCat("entry ", l, " is ", v[l].dump(), ", not a limit >= 0"));
    }
  }
  // The first MoE layer's activation is the model's; a layer whose limit
  // differs gets its own config.
  const MoeLayerConfig base = info->layer;
  auto layer_config = [&](int64_t l) {
    MoeLayerConfig c = base;
    if (const double limit = v[l].get<double>(); limit > 0.0) {
      c.act = Activation::kSiluClamp;
      c.act_limit = static_cast<float>(limit);
    }
    return c;
  };
  SetLayerConfigs(info, layer_config);
  return absl::OkStatus();
}
namespace {

// Per-layer limits from `key` (0 for a null entry or no list).
absl::StatusOr<std::vector<double>> LayerLimits(const ConfigReader& r,
                                                const char* key,
                                                int64_t num_layers,
                                                int64_t mtp_layers) {
  std::vector<double> limits(num_layers, 0.0);
  if (!r.Present(key)) return limits;
  const nlohmann::json& v = r.raw().at(key);
  const int64_t n = v.is_array() ? static_cast<int64_t>(v.size()) : -1;
  if (n != num_layers && n != num_layers + mtp_layers) {
    return r.Error(
        key, absl::StrCat("must list one limit per layer (num_hidden_layers ",
                          num_layers,
                          mtp_layers > 0
                              ? absl::StrCat(", or ", num_layers + mtp_layers,
                                             " with the MTP layers")
                              : std::string(),
                          "), got ", n < 0 ? v.dump() : absl::StrCat(n)));
  }
  for (int64_t l = 0; l < num_layers; ++l) {
    const nlohmann::json& x = v[l];
    if (x.is_null()) continue;
    if (!x.is_number() || !(x.get<double>() >= 0.0) ||
        !std::isfinite(x.get<double>())) {
      return r.Error(key, absl::StrCat("entry ", l, " is ", x.dump(),
                                       ", not a finite number >= 0 or null"));
    }
    limits[l] = x.get<double>();
  }
  return limits;
}

// Each layer's swiglustep limits from the per-layer lists `routed_key`
// (the routed experts) and `shared_key` (the shared experts), where an
// entry of 0 or null is plain silu: the first MoE layer's config is the
// model's, every other one that differs an override. The lists may run on
// over the MTP layers (num_nextn_predict_layers).
absl::Status SwigluStepLayerLimits(const ConfigReader& r,
                                   const char* routed_key,
                                   const char* shared_key, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(int64_t mtp, r.Int("num_nextn_predict_layers", 0));
  MOE_ASSIGN_OR_RETURN(std::vector<double> routed,
                       LayerLimits(r, routed_key, info->num_layers, mtp));
  MOE_ASSIGN_OR_RETURN(std::vector<double> shared,
                       LayerLimits(r, shared_key, info->num_layers, mtp));
  const MoeLayerConfig base = info->layer;
  auto layer_config = [&](int64_t l) {
    MoeLayerConfig c = base;
    if (routed[l] > 0) {
      c.act = Activation::kSwigluStep;
      c.act_limit = static_cast<float>(routed[l]);
    }
    if (c.has_shared()) {
      c.shared_act =
          shared[l] > 0 ? Activation::kSwigluStep : Activation::kSilu;
      c.shared_act_limit = shared[l] > 0 ? static_cast<float>(shared[l]) : 0;
    }
    return c;
  };
  SetLayerConfigs(info, layer_config);
  return absl::OkStatus();
}

}  // namespace

absl::Status Step3p5LayerLimits(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(bool router_bias, r.Bool("use_moe_router_bias", true));
  if (!router_bias) {
    return r.Error("use_moe_router_bias",
                   absl::StrCat("is false: ", info->family,
                                " chooses its experts with moe.router_bias"));
  }
  return SwigluStepLayerLimits(r, "swiglu_limits", "swiglu_limits_shared",
                               info);
}

absl::Status Ling3LayerLimits(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(bool pregate, r.Bool("pregate_inference", false));
  if (pregate) {
    return r.Error("pregate_inference",
                   absl::StrCat("is true: ", info->family,
                                " is served with its gate alone (the "
                                "pre-gate's inference routing is not)"));
  }
  return SwigluStepLayerLimits(r, "expert_swiglu_limit_list",
                               "share_expert_swiglu_limit_list", info);
}

absl::Status RefuseGrokResidualMoe(const ConfigReader& r, ModelInfo* info) {
  MOE_ASSIGN_OR_RETURN(bool residual, r.Bool("residual_moe", false));
  if (residual) {
    return r.Error("residual_moe",
                   absl::StrCat("true (Grok-2: a dense MLP beside the experts, "
                                "their sum times 1/sqrt(2)) is not supported "
                                "for ",
                                info->family, "; Grok-1 has false"));
  }
  return absl::OkStatus();
}

}  // namespace moe
