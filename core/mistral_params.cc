#include "core/mistral_params.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

// The moe keys each served structure reads, as vLLM's adapter maps them.
// Mixtral's are mistral-inference's MoeArgs; Mistral-Large-3's are DeepSeek
// V3's under Mistral's names (route_every_n is moe_layer_freq, routed_scale
// routed_scaling_factor, num_expert_groups[_per_tok] n_group / topk_group).
const std::vector<const char*> kMixtralMoeKeys = {
    "num_experts", "num_experts_per_tok", "num_shared_experts"};
const std::vector<const char*> kLarge3MoeKeys = {"num_experts",
                                                 "num_experts_per_tok",
                                                 "expert_hidden_dim",
                                                 "num_shared_experts",
                                                 "routed_scale",
                                                 "num_expert_groups",
                                                 "num_expert_groups_per_tok",
                                                 "first_k_dense_replace",
                                                 "route_every_n",
                                                 "renorm_strategy",
                                                 "use_load_balancing_bias"};

// Errors name the key as params.json spells it, dotted below the top level.
class Params {
 public:
  Params(const json& top, absl::string_view label) : top_(top), label_(label) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(label_, ": key '", key, "' ", what));
  }

  // `key` of `obj` (named `path`), an integer >= `min`.
  absl::StatusOr<int64_t> Int(const json& obj, const char* key,
                              const std::string& path, int64_t min) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Error(path, "is missing");
    if (!it->is_number_integer()) return Error(path, "must be an integer");
    const int64_t v = it->get<int64_t>();
    if (v < min) return Error(path, absl::StrCat("must be >= ", min));
    return v;
  }
  absl::StatusOr<int64_t> Top(const char* key, int64_t min) const {
    return Int(top_, key, key, min);
  }

 private:
  const json& top_;
  std::string label_;
};

// Every key of `moe` must be one `allowed` lists: a key the structure does
// not read would change the math unseen.
absl::Status OnlyKeys(const Params& p, const json& moe,
                      const std::vector<const char*>& allowed,
                      absl::string_view structure) {
  for (const auto& item : moe.items()) {
    if (item.value().is_null()) continue;
    // A named copy: clang 14 cannot capture a structured binding.
    const std::string& key = item.key();
    const bool known = std::any_of(allowed.begin(), allowed.end(),
                                   [&](const char* k) { return key == k; });
    if (!known) {
      return p.Error(
          absl::StrCat("moe.", key),
          absl::StrCat("is not read by ", structure,
                       " (its moe keys: ", absl::StrJoin(allowed, ", "),
                       "): this MoE structure is not one served (Mixtral: no "
                       "shared experts; Mistral-Large-3: "
                       "moe.num_shared_experts > 0)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<json> MixtralConfig(const Params& p, const json& moe, json hf) {
  MOE_RETURN_IF_ERROR(OnlyKeys(p, moe, kMixtralMoeKeys, "Mixtral"));
  hf["model_type"] = "mixtral";
  hf["architectures"] = {"MixtralForCausalLM"};
  // Mixtral's experts are the dense FFN's width.
  MOE_ASSIGN_OR_RETURN(hf["intermediate_size"], p.Top("hidden_dim", 1));
  MOE_ASSIGN_OR_RETURN(hf["num_local_experts"],
                       p.Int(moe, "num_experts", "moe.num_experts", 1));
  MOE_ASSIGN_OR_RETURN(
      hf["num_experts_per_tok"],
      p.Int(moe, "num_experts_per_tok", "moe.num_experts_per_tok", 1));
  return hf;
}

absl::StatusOr<json> Large3Config(const Params& p, const json& moe, json hf) {
  MOE_RETURN_IF_ERROR(OnlyKeys(p, moe, kLarge3MoeKeys, "Mistral-Large-3"));
  // vLLM reads these with no defaults (a PretrainedConfig of the remapped
  // keys, not DeepseekV3Config): a release without one is not guessed at.
  const struct {
    const char* mistral;
    const char* hf;
    int64_t min;
  } kInts[] = {
      {"num_experts", "n_routed_experts", 1},
      {"num_experts_per_tok", "num_experts_per_tok", 1},
      {"expert_hidden_dim", "moe_intermediate_size", 1},
      {"num_shared_experts", "n_shared_experts", 1},
      {"num_expert_groups", "n_group", 1},
      {"num_expert_groups_per_tok", "topk_group", 1},
      {"first_k_dense_replace", "first_k_dense_replace", 0},
      {"route_every_n", "moe_layer_freq", 1},
  };
  for (const auto& k : kInts) {
    MOE_ASSIGN_OR_RETURN(
        hf[k.hf],
        p.Int(moe, k.mistral, absl::StrCat("moe.", k.mistral), k.min));
  }
  auto scale = moe.find("routed_scale");
  if (scale == moe.end() || scale->is_null()) {
    return p.Error("moe.routed_scale", "is missing");
  }
  if (!scale->is_number())
    return p.Error("moe.routed_scale", "must be a number");
  hf["routed_scaling_factor"] = scale->get<double>();
  // vLLM renormalises always; Mistral's own name for that is "WEIGHTS". Any
  // other strategy's meaning is unconfirmed.
  if (auto it = moe.find("renorm_strategy");
      it != moe.end() && !it->is_null() &&
      !(it->is_string() && it->get<std::string>() == "WEIGHTS")) {
    return p.Error("moe.renorm_strategy",
                   absl::StrCat("is ", it->dump(),
                                ": only \"WEIGHTS\" (renormalise the top-k "
                                "weights) is served"));
  }
  // A load-balancing bias would be DeepSeek's correction bias, but vLLM's
  // Mistral-Large-3 reads none and no release names its tensor.
  if (auto it = moe.find("use_load_balancing_bias");
      it != moe.end() && !it->is_null() &&
      !(it->is_boolean() && !it->get<bool>())) {
    return p.Error("moe.use_load_balancing_bias",
                   "is set: a Mistral-Large-3 load-balancing bias is not "
                   "served (its tensor name is unconfirmed)");
  }
  hf["model_type"] = "deepseek_v3";
  // vLLM's grouped top-k without a correction bias scores a group by its
  // best expert: DeepSeek-V2's group_limited_greedy; one group is no limit.
  hf["topk_method"] =
      hf["n_group"].get<int64_t>() > 1 ? "group_limited_greedy" : "greedy";
  hf["scoring_func"] = "softmax";
  hf["norm_topk_prob"] = true;
  return hf;
}

}  // namespace

absl::StatusOr<HfModelSpec> ParseMistralParams(absl::string_view text,
                                               absl::string_view label) {
  const json top = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (top.is_discarded() || !top.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": params.json is not a JSON object"));
  }
  const Params p(top, label);
  if (auto it = top.find("model_type");
      it != top.end() && !it->is_null() &&
      !(it->is_string() && it->get<std::string>() == "transformer")) {
    return p.Error("model_type",
                   absl::StrCat("is ", it->dump(),
                                ": only Mistral's transformer MoE models "
                                "(Mixtral, Mistral-Large-3) are served"));
  }
  // Mistral's quantised releases keep per-tensor qscale_weight / qscale_act
  // scales, which the loader does not read.
  if (auto it = top.find("quantization");
      it != top.end() && !it->is_null() && !it->empty()) {
    return p.Error("quantization",
                   absl::StrCat("is ", it->dump(),
                                ": Mistral's quantised consolidated releases "
                                "are not read (serve an unquantised one)"));
  }
  auto moe = top.find("moe");
  if (moe == top.end() || moe->is_null()) {
    return p.Error("moe", "is missing: a dense Mistral model, not an MoE one");
  }
  if (!moe->is_object()) return p.Error("moe", "must be an object");
  json hf = json::object();
  MOE_ASSIGN_OR_RETURN(hf["hidden_size"], p.Top("dim", 1));
  MOE_ASSIGN_OR_RETURN(hf["num_hidden_layers"], p.Top("n_layers", 1));
  int64_t shared = 0;
  if (auto it = moe->find("num_shared_experts");
      it != moe->end() && !it->is_null()) {
    MOE_ASSIGN_OR_RETURN(
        shared, p.Int(*moe, "num_shared_experts", "moe.num_shared_experts", 0));
  }
  // vLLM's rule: an MoE with shared experts is Mistral-Large-3, one without
  // Mixtral.
  MOE_ASSIGN_OR_RETURN(json config,
                       shared > 0 ? Large3Config(p, *moe, std::move(hf))
                                  : MixtralConfig(p, *moe, std::move(hf)));
  MOE_ASSIGN_OR_RETURN(HfModelSpec spec, ParseHfConfig(config.dump(), label));
  spec.layout = HfExpertLayout::kConsolidated;
  return spec;
}

}  // namespace moe
