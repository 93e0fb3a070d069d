#include "core/hf_config.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/hf_config_family.h"
#include "core/hf_config_layers.h"
#include "core/hf_config_reader.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

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

// k, from the first of the family's top-k keys present.
absl::StatusOr<int64_t> TopK(const ConfigReader& r, const FamilyEntry& entry) {
  for (const char* key : entry.top_k_keys) {
    if (r.Present(key)) return r.Int(key);
  }
  return r.Int(entry.top_k_keys.back());
}

// "'<value>' is not a, b or c"; with one name, "..., the only <what>".
std::string NotOneOf(absl::string_view value,
                     const std::vector<const char*>& names,
                     absl::string_view only_one) {
  if (names.size() == 1) {
    return absl::StrCat("'", value, "' is not ", names[0], ", the only ",
                        only_one);
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) list += i + 1 == names.size() ? " or " : ", ";
    list += names[i];
  }
  return absl::StrCat("'", value, "' is not ", list);
}

// The index in `names` of the value of `key` (`fallback` when absent).
absl::StatusOr<size_t> ReadChoice(const ConfigReader& r, const char* key,
                                  const char* fallback,
                                  const std::vector<const char*>& names,
                                  absl::string_view only_one) {
  MOE_ASSIGN_OR_RETURN(std::string value, r.String(key, fallback));
  for (size_t i = 0; i < names.size(); ++i) {
    if (value == names[i]) return i;
  }
  return r.Error(key, NotOneOf(value, names, only_one));
}

absl::StatusOr<int64_t> ReadInt(const ConfigReader& r, const IntKey& k) {
  if (k.fallback.has_value()) return r.Int(k.key, *k.fallback);
  return r.Int(k.key);
}

// The key's value, or `current` (the layer option's default) when the
// family has no key for it.
absl::StatusOr<float> ReadNumber(const ConfigReader& r, const NumberKey& k,
                                 float current) {
  if (k.key == nullptr) return current;
  MOE_ASSIGN_OR_RETURN(double v, r.Number(k.key, k.fallback));
  return static_cast<float>(v);
}

// The key's value, or the family's fixed `fallback` when it has no key.
absl::StatusOr<bool> ReadBool(const ConfigReader& r, const BoolKey& k) {
  if (k.key == nullptr) return k.fallback;
  return r.Bool(k.key, k.fallback);
}

absl::Status ReadSharedExpert(const SharedExpertDescription& d,
                              const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  switch (d.rule) {
    case SharedExpertRule::kNone:
      return absl::OkStatus();
    case SharedExpertRule::kCountTimesInter: {
      MOE_ASSIGN_OR_RETURN(int64_t count, ReadInt(r, d.key));
      if (count < 0) return r.Error(d.key.key, "must be >= 0");
      c.shared_inter = count * c.inter;
      break;
    }
    case SharedExpertRule::kWidthKey: {
      MOE_ASSIGN_OR_RETURN(c.shared_inter, ReadInt(r, d.key));
      if (d.required && c.shared_inter <= 0) {
        return r.Error(d.key.key,
                       absl::StrCat("must be >= 1 for ", info->family));
      }
      break;
    }
    case SharedExpertRule::kSameAsRouted:
      c.shared_inter = c.inter;
      break;
  }
  c.shared_gate = d.gated && c.shared_inter > 0;
  return absl::OkStatus();
}

absl::Status ReadScoreFunc(const MoeDescription& d, const ConfigReader& r,
                           ModelInfo* info) {
  info->layer.score_func = d.score;
  if (d.score_key.key == nullptr) return absl::OkStatus();
  std::vector<const char*> names;
  for (const ScoreName& value : d.score_key.values) {
    names.push_back(value.name);
  }
  MOE_ASSIGN_OR_RETURN(
      size_t i, ReadChoice(r, d.score_key.key, d.score_key.fallback, names,
                           absl::StrCat("one ", info->family, " has")));
  info->layer.score_func = d.score_key.values[i].func;
  return absl::OkStatus();
}

absl::Status ReadGroups(const GroupDescription& d, const ConfigReader& r,
                        MoeLayerConfig* c) {
  if (d.rule == GroupRule::kNone) return absl::OkStatus();
  int64_t method = 0;
  if (d.rule == GroupRule::kDeepseekTopkMethod) {
    MOE_ASSIGN_OR_RETURN(
        method,
        ReadChoice(r, d.method_key, d.method_fallback,
                   {"greedy", "group_limited_greedy", "noaux_tc"}, "method"));
  }
  MOE_ASSIGN_OR_RETURN(int64_t count, ReadInt(r, d.count));
  MOE_ASSIGN_OR_RETURN(int64_t kept, ReadInt(r, d.kept));
  c->n_groups = count;
  c->topk_groups = kept;
  c->group_score = GroupScore::kTop2Sum;
  switch (d.rule) {
    case GroupRule::kNone:
    case GroupRule::kFromKeys:
      break;
    case GroupRule::kOnlyWhenLimiting:
      // Keeping every group is no group limit, which 1 / 1 says.
      if (count <= 1 || count <= kept) {
        c->n_groups = 1;
        c->topk_groups = 1;
      }
      break;
    case GroupRule::kDeepseekTopkMethod:
      if (method == 0) {  // greedy
        c->n_groups = 0;
        c->topk_groups = 0;
      } else if (method == 1) {  // group_limited_greedy
        c->group_score = GroupScore::kMax;
      } else {  // noaux_tc: the correction bias for choosing
        c->use_bias = true;
      }
      break;
  }
  return absl::OkStatus();
}

absl::Status ReadActivation(const ActivationDescription& d,
                            const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  if (d.key != nullptr) {
    MOE_RETURN_IF_ERROR(
        ReadChoice(r, d.key, d.name, {d.name},
                   absl::StrCat("activation ", info->family, " experts have"))
            .status());
  }
  c.act = d.act;
  c.gated = d.gated;
  if (d.alpha.has_value()) c.act_alpha = *d.alpha;
  MOE_ASSIGN_OR_RETURN(c.act_limit, ReadNumber(r, d.limit, c.act_limit));
  MOE_ASSIGN_OR_RETURN(c.act_beta, ReadNumber(r, d.beta, c.act_beta));
  MOE_ASSIGN_OR_RETURN(c.act_linear_beta,
                       ReadNumber(r, d.linear_beta, c.act_linear_beta));
  return absl::OkStatus();
}

// The one interpreter of a family's MoE description: the layer options and
// MoE layers its config keys give, in MoeDescription's order.
absl::Status ReadMoeDescription(const MoeDescription& d, const ConfigReader& r,
                                ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  if (d.refuse != nullptr) MOE_RETURN_IF_ERROR(d.refuse(r, info));
  MOE_ASSIGN_OR_RETURN(c.num_experts, ReadInt(r, d.experts));
  MOE_ASSIGN_OR_RETURN(c.inter, ReadInt(r, d.inter));
  MOE_RETURN_IF_ERROR(ReadSharedExpert(d.shared, r, info));
  MOE_RETURN_IF_ERROR(ReadActivation(d.activation, r, info));
  MOE_ASSIGN_OR_RETURN(bool latent_bias, ReadBool(r, d.latent_bias));
  MOE_ASSIGN_OR_RETURN(bool latent_norm, ReadBool(r, d.latent_norm));
  c.latent_bias = latent_bias && c.latent > 0;
  c.latent_norm = latent_norm && c.latent > 0;
  MOE_RETURN_IF_ERROR(ReadScoreFunc(d, r, info));
  for (const StringKey& format : d.formats) {
    MOE_RETURN_IF_ERROR(ReadChoice(r, format.key, format.fallback,
                                   format.values,
                                   absl::StrCat("one ", info->family, " has"))
                            .status());
  }
  MOE_ASSIGN_OR_RETURN(bool norm, ReadBool(r, d.route_norm));
  MOE_ASSIGN_OR_RETURN(float scale,
                       ReadNumber(r, d.route_scale, c.route_scale));
  c.route_norm = norm && (!d.route_norm_needs_two || c.top_k > 1);
  const bool scale_dropped =
      d.renorm_and_scale == RenormAndScale::kRenormOrScale && c.route_norm;
  c.route_scale = scale_dropped ? 1.0f : scale;
  MOE_ASSIGN_OR_RETURN(c.norm_min, ReadNumber(r, d.norm_min, c.norm_min));
  MOE_RETURN_IF_ERROR(ReadGroups(d.groups, r, &c));
  MOE_ASSIGN_OR_RETURN(c.norm_eps, ReadNumber(r, d.norm_eps, c.norm_eps));
  c.use_bias = c.use_bias || d.use_bias;
  c.router_bias = d.router_bias;
  c.expert_bias = d.expert_bias;
  c.score_before_experts = d.score_before_experts;
  c.router_prenorm = d.router_prenorm;
  c.per_expert_scale = d.per_expert_scale;
  c.branch_norms = d.branch_norms;
  MOE_RETURN_IF_ERROR(ReadMoeLayers(d.layers, r, info));
  if (d.finish != nullptr) MOE_RETURN_IF_ERROR(d.finish(r, info));
  return absl::OkStatus();
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
  // A negative count would size the per-layer tables of the layer rules.
  if (info.num_layers < 0) return r.Error("num_hidden_layers", "must be >= 0");
  const FamilyEntry& entry = EntryOf(spec.family);
  const HfFamily base = HfBaseFamily(spec.family);
  MOE_ASSIGN_OR_RETURN(c.top_k, TopK(r, EntryOf(base)));
  c.score_func = ScoreFunc::kSoftmax;
  if (const char* key = EntryOf(base).latent_key; key != nullptr) {
    MOE_ASSIGN_OR_RETURN(c.latent, r.Int(key, 0));
    spec.latent_key = key;
  }
  MOE_ASSIGN_OR_RETURN(
      std::optional<std::vector<int64_t>> listed,
      ListedMoeLayers(r, entry.moe_layer_lists, info.num_layers));
  // The base family's reader sees the config without the keys this family
  // does not have, and without a per-layer list read here: its own layer
  // rule must not read the list (DeepSeek reads moe_layer_freq as a stride).
  json rest = *body;
  for (const char* key : entry.absent_keys) rest.erase(key);
  if (listed.has_value()) {
    for (const char* key : entry.moe_layer_lists) rest.erase(key);
  }
  MOE_RETURN_IF_ERROR(ReadMoeDescription(
      EntryOf(base).moe, ConfigReader(rest, text_label), &info));
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
