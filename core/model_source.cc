#include "core/model_source.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/safetensors.h"
#include "nlohmann/json.hpp"

namespace moe {

const char* WeightRoleName(WeightRole role) {
  switch (role) {
    case WeightRole::kGate:
      return "gate";
    case WeightRole::kExpertBias:
      return "expert_bias";
    case WeightRole::kW1:
      return "w1";
    case WeightRole::kW3:
      return "w3";
    case WeightRole::kW2:
      return "w2";
    case WeightRole::kSharedW1:
      return "shared.w1";
    case WeightRole::kSharedW3:
      return "shared.w3";
    case WeightRole::kSharedW2:
      return "shared.w2";
    case WeightRole::kSharedGate:
      return "shared.gate";
    case WeightRole::kRouterBias:
      return "router_bias";
    case WeightRole::kB1:
      return "b1";
    case WeightRole::kB3:
      return "b3";
    case WeightRole::kB2:
      return "b2";
    case WeightRole::kTid2Eid:
      return "tid2eid";
    case WeightRole::kLatentW1:
      return "latent.w1";
    case WeightRole::kLatentW2:
      return "latent.w2";
    case WeightRole::kLatentB1:
      return "latent.b1";
    case WeightRole::kLatentB2:
      return "latent.b2";
    case WeightRole::kLatentNorm:
      return "latent.norm";
    case WeightRole::kGateScale:
      return "gate.scale";
    case WeightRole::kPerExpertScale:
      return "gate.per_expert_scale";
    case WeightRole::kExpertsInNorm:
      return "experts.in_norm";
    case WeightRole::kExpertsOutNorm:
      return "experts.out_norm";
    case WeightRole::kSharedInNorm:
      return "shared.in_norm";
    case WeightRole::kSharedOutNorm:
      return "shared.out_norm";
    case WeightRole::kOutputBias:
      return "output.bias";
  }
  return "?";
}

bool IsVectorRole(WeightRole role) {
  switch (role) {
    case WeightRole::kExpertBias:
    case WeightRole::kSharedGate:
    case WeightRole::kRouterBias:
    case WeightRole::kB1:
    case WeightRole::kB3:
    case WeightRole::kB2:
    case WeightRole::kLatentB1:
    case WeightRole::kLatentB2:
    case WeightRole::kLatentNorm:
    case WeightRole::kGateScale:
    case WeightRole::kPerExpertScale:
    case WeightRole::kExpertsInNorm:
    case WeightRole::kExpertsOutNorm:
    case WeightRole::kSharedInNorm:
    case WeightRole::kSharedOutNorm:
    case WeightRole::kOutputBias:
      return true;
    default:
      return false;
  }
}

int64_t WeightTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> ExpectedShape(const MoeLayerConfig& c, WeightRole role) {
  switch (role) {
    // The router scores the zero experts too (LongCat-Flash).
    case WeightRole::kGate:
      return {c.router_rows(), c.hidden};
    case WeightRole::kExpertBias:
      return {c.router_rows()};
    case WeightRole::kW1:
    case WeightRole::kW3:
      return {c.inter, c.expert_width()};
    case WeightRole::kW2:
      return {c.expert_width(), c.inter};
    case WeightRole::kSharedW1:
    case WeightRole::kSharedW3:
      return {c.shared_inter, c.hidden};
    case WeightRole::kSharedW2:
      return {c.hidden, c.shared_inter};
    case WeightRole::kSharedGate:
      return {1, c.hidden};
    case WeightRole::kRouterBias:
      return {c.router_rows()};
    case WeightRole::kB1:
    case WeightRole::kB3:
      return {c.inter};
    case WeightRole::kB2:
      return {c.expert_width()};
    case WeightRole::kTid2Eid:
      return {c.hash_vocab, c.top_k};
    case WeightRole::kLatentW1:
      return {c.latent, c.hidden};
    case WeightRole::kLatentW2:
      return {c.hidden, c.latent};
    case WeightRole::kLatentB1:
    case WeightRole::kLatentNorm:
      return {c.latent};
    case WeightRole::kLatentB2:
    case WeightRole::kGateScale:
    case WeightRole::kExpertsInNorm:
    case WeightRole::kExpertsOutNorm:
    case WeightRole::kSharedInNorm:
    case WeightRole::kSharedOutNorm:
    case WeightRole::kOutputBias:
      return {c.hidden};
    case WeightRole::kPerExpertScale:
      return {c.num_experts};
  }
  return {};
}

std::optional<int64_t> ModelInfo::VisionOwner(int64_t layer) const {
  for (const auto& [l, v] : vision_layers) {
    if (v == layer) return l;
  }
  return std::nullopt;
}

std::vector<int64_t> ModelInfo::RequestLayers() const {
  std::vector<int64_t> out;
  for (int64_t l : moe_layers) {
    if (!VisionOwner(l).has_value()) out.push_back(l);
  }
  return out;
}

bool ModelInfo::HasLayer(int64_t layer) const {
  return std::binary_search(moe_layers.begin(), moe_layers.end(), layer);
}

const MoeLayerConfig& ModelInfo::LayerConfig(int64_t l) const {
  auto it = layer_overrides.find(l);
  return it == layer_overrides.end() ? layer : it->second;
}

std::vector<int64_t> ModelInfo::HashLayers() const {
  std::vector<int64_t> out;
  for (int64_t l : moe_layers) {
    if (LayerConfig(l).hash_routed()) out.push_back(l);
  }
  return out;
}

int64_t ModelInfo::MaxHashVocab() const {
  int64_t v = 0;
  for (int64_t l : moe_layers) v = std::max(v, LayerConfig(l).hash_vocab);
  return v;
}

MoeLayerConfig WithActivationOf(MoeLayerConfig c, const MoeLayerConfig& of) {
  c.act = of.act;
  c.act_alpha = of.act_alpha;
  c.act_limit = of.act_limit;
  c.act_beta = of.act_beta;
  c.act_linear_beta = of.act_linear_beta;
  c.shared_act = of.shared_act;
  c.shared_act_limit = of.shared_act_limit;
  return c;
}

MoeLayerConfig WithPerLayerOptionsOf(MoeLayerConfig c,
                                     const MoeLayerConfig& of) {
  c = WithActivationOf(c, of);
  c.score_func = of.score_func;
  c.route_norm = of.route_norm;
  c.route_scale = of.route_scale;
  c.n_groups = of.n_groups;
  c.topk_groups = of.topk_groups;
  c.group_score = of.group_score;
  c.use_bias = of.use_bias;
  c.router_bias = of.router_bias;
  c.norm_min = of.norm_min;
  c.hash_vocab = of.hash_vocab;
  c.top_k = of.top_k;
  c.inter = of.inter;
  c.shared_inter = of.shared_inter;
  return c;
}

void SetLayerConfigs(ModelInfo* info,
                     const std::function<MoeLayerConfig(int64_t)>& config_of) {
  if (info->moe_layers.empty()) return;
  std::map<int64_t, MoeLayerConfig> configs;
  for (int64_t l : info->moe_layers) configs[l] = config_of(l);
  info->layer = configs.at(info->moe_layers.front());
  info->layer_overrides.clear();
  for (const auto& [l, c] : configs) {
    if (!(c == info->layer)) info->layer_overrides[l] = c;
  }
}

std::optional<int64_t> FirstLayerOfOwnShape(const ModelInfo& info) {
  for (const auto& [l, c] : info.layer_overrides) {
    const MoeLayerConfig& m = info.layer;
    if (c.top_k != m.top_k || c.inter != m.inter ||
        c.shared_inter != m.shared_inter) {
      return l;
    }
  }
  return std::nullopt;
}

int64_t ModelInfo::MaxTopK() const {
  int64_t k = layer.top_k;
  for (const auto& [l, c] : layer_overrides) k = std::max(k, c.top_k);
  return k;
}

namespace {

// The keys of two configs' JSON forms whose values differ, comma-separated.
std::string DifferingKeys(const MoeLayerConfig& a, const MoeLayerConfig& b) {
  const nlohmann::json ja = nlohmann::json::parse(MoeLayerConfigToJson(a));
  const nlohmann::json jb = nlohmann::json::parse(MoeLayerConfigToJson(b));
  std::vector<std::string> keys;
  for (const auto& [k, v] : ja.items()) {
    auto it = jb.find(k);
    if (it == jb.end() || *it != v) keys.push_back(k);
  }
  for (const auto& [k, v] : jb.items()) {
    if (!ja.contains(k)) keys.push_back(k);
  }
  return absl::StrJoin(keys, ", ");
}

}  // namespace

absl::Status CheckLayerOverrides(const ModelInfo& info) {
  for (const auto& [l, c] : info.layer_overrides) {
    if (!info.HasLayer(l)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", l, " has a config of its own but is not an MoE layer"));
    }
    if (absl::Status s = c.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", l, ": ", s.message()));
    }
    // Everything a layer may not set for itself must be the model's: the
    // override with its own options taken from info.layer is info.layer.
    const MoeLayerConfig rest = WithPerLayerOptionsOf(c, info.layer);
    if (!(rest == info.layer)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", l,
          ": its config differs from the model's (its first MoE "
          "layer's) in ",
          DifferingKeys(rest, info.layer),
          ", which every MoE layer of a model shares; a layer may set only "
          "its routing options (score_func, route_norm, route_scale, "
          "n_groups, topk_groups, group_score, use_bias, router_bias, "
          "norm_min, hash_vocab), its activation (act, act_alpha, act_limit, "
          "act_beta, act_linear_beta, shared_act, shared_act_limit), top_k, "
          "inter and shared_inter. Layer ",
          l, ": ", MoeLayerConfigToJson(c),
          "; the model's: ", MoeLayerConfigToJson(info.layer)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckWeightTensor(const WeightTensor& t, const MoeLayerConfig& c,
                               WeightRole role) {
  const auto want = ExpectedShape(c, role);
  // A [E] bias may also be stored as [1, E]; a [1, H] gate as [H].
  const bool same_numel = t.numel() == [&] {
    int64_t n = 1;
    for (int64_t d : want) n *= d;
    return n;
  }();
  const bool vector_role = IsVectorRole(role);
  if (t.shape != want && !(vector_role && same_numel && t.shape.size() <= 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": shape ", ShapeString(t.shape), ", expected ",
                     ShapeString(want), " for ", WeightRoleName(role)));
  }
  if (role == WeightRole::kTid2Eid) {
    if (t.dtype != DType::kI64 && t.dtype != DType::kI32) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": dtype ", DTypeName(t.dtype),
                       " is not I64 or I32 for tid2eid"));
    }
    return absl::OkStatus();
  }
  if (!IsFloatingPoint(t.dtype) && !t.is_mxfp4() && !t.is_nvfp4()) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.name, ": dtype ", DTypeName(t.dtype),
                     " is not a floating-point type"));
  }
  return absl::OkStatus();
}

}  // namespace moe
