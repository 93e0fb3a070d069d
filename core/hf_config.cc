#include "core/hf_config.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/hf_config_description.h"
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
// Where several families share a model_type (Ling's V1 and V2 both say
// bailing_moe), the first `architectures` entry decides between them.
absl::StatusOr<HfFamily> FamilyOf(const json& j, std::string* model_type,
                                  absl::string_view label) {
  auto it = j.find("architectures");
  const bool named = it != j.end() && it->is_array() && !it->empty() &&
                     it->front().is_string();
  // A config written for remote code may leave model_type out (its
  // auto_map names the classes): the model class it names, when exactly
  // one family has it, is then the family.
  if (model_type->empty() && named) {
    const std::string cls = it->front().get<std::string>();
    const FamilyEntry* found = nullptr;
    int count = 0;
    for (const auto& e : FamilyTable()) {
      for (const char* a : e.architectures) {
        if (cls == a) {
          found = &e;
          ++count;
        }
      }
    }
    if (count == 1) {
      *model_type = found->model_type;
      return found->family;
    }
  }
  std::vector<const FamilyEntry*> matches;
  for (const auto& e : FamilyTable()) {
    if (*model_type == e.model_type) matches.push_back(&e);
  }
  if (model_type->empty() && matches.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": config key 'model_type' is missing and 'architectures' ",
        named ? absl::StrCat("names ", it->front().dump(),
                             ", a class no supported family has")
              : std::string("names no model class"),
        " (supported: ", SupportedHfFamilies(), ")"));
  }
  if (matches.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": unsupported model_type '", *model_type,
                     "' (supported: ", SupportedHfFamilies(), ")"));
  }
  if (matches.size() == 1) return matches.front()->family;
  std::vector<std::string> classes;
  for (const FamilyEntry* e : matches) {
    for (const char* a : e->architectures) {
      if (named && it->front().get<std::string>() == a) return e->family;
      classes.push_back(a);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      label, ": config key 'architectures' ",
      named ? absl::StrCat("names ", it->front().dump(), ", not one of ")
            : std::string("must name one of "),
      absl::StrJoin(classes, ", "), ": model_type '", *model_type,
      "' is shared by several families and the model class tells them apart"));
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

// The config as the family's description reads it: the keys of its MoE
// sub-object beside the others (the config's own win), its own spellings
// under the common names, and each per-layer list (layer_lists) as its entry
// for decoder layer `layer`. `*lists_differ` (when given) collects the keys
// of the lists that hold more than one value.
absl::StatusOr<json> DescribedConfig(const FamilyEntry& e, const json& body,
                                     const std::string& label, int64_t layer,
                                     std::vector<std::string>* lists_differ) {
  const ConfigReader r(body, label);
  json out = body;
  if (e.moe_config != nullptr) {
    auto it = body.find(e.moe_config);
    if (it == body.end() || !it->is_object()) {
      return r.Error(e.moe_config,
                     absl::StrCat("must be an object holding the MoE keys (",
                                  e.model_type, ")"));
    }
    for (const auto& [key, value] : it->items()) {
      if (!out.contains(key)) out[key] = value;
    }
  }
  for (const auto& [common, own] : e.renamed_keys) {
    if (body.contains(own) && !body.contains(common)) out[common] = body[own];
  }
  const ConfigReader described(out, label);
  for (const char* key : e.layer_lists) {
    auto it = out.find(key);
    if (it == out.end() || !it->is_array()) continue;
    const json list = *it;
    MOE_ASSIGN_OR_RETURN(int64_t layers, described.Int("num_hidden_layers"));
    if (static_cast<int64_t>(list.size()) != layers) {
      return r.Error(key,
                     absl::StrCat("lists ", list.size(),
                                  " values, not num_hidden_layers ", layers));
    }
    if (list.empty()) return r.Error(key, "is an empty list");
    if (lists_differ != nullptr &&
        std::any_of(list.begin(), list.end(),
                    [&](const json& v) { return v != list[0]; })) {
      lists_differ->push_back(key);
    }
    out[key] = list[std::clamp<int64_t>(layer, 0, layers - 1)];
  }
  return out;
}

}  // namespace

const std::vector<HfFamily>& AllHfFamilies() {
  // The table grows only while one thread starts up (family files), so
  // the list is brought up to date when its length differs.
  static auto* all = new std::vector<HfFamily>;
  if (all->size() != FamilyTable().size()) {
    all->clear();
    for (const auto& e : FamilyTable()) all->push_back(e.family);
  }
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
  for (const auto& e : FamilyTable()) {
    // A model_type shared by several families (told apart by their
    // architectures) is listed once.
    if (std::find(names.begin(), names.end(), e.model_type) == names.end()) {
      names.push_back(e.model_type);
    }
  }
  return absl::StrJoin(names, ", ");
}

// Reads the described config of spec->family into spec->info: the part of
// ParseHfConfig after the family is known and its keys are in one object.
absl::Status ReadDescribed(const json& described, const std::string& model_type,
                           absl::string_view label,
                           const std::string& text_label, HfModelSpec* out) {
  HfModelSpec& spec = *out;
  ConfigReader r(described, text_label);
  ModelInfo& info = spec.info;
  MoeLayerConfig& c = info.layer;
  info.family = model_type;
  info.source = std::string(label);
  MOE_ASSIGN_OR_RETURN(c.hidden, r.Int("hidden_size"));
  const char* layers_key = EntryOf(HfBaseFamily(spec.family)).num_layers_key;
  MOE_ASSIGN_OR_RETURN(info.num_layers, r.Int(layers_key));
  // The layer rules size per-layer tables by this count: a negative one
  // would index them, a huge one exhaust memory before anything is served.
  // The deepest released models have a few hundred layers.
  constexpr int64_t kMaxLayers = 1 << 16;
  if (info.num_layers < 0 || info.num_layers > kMaxLayers) {
    return r.Error(layers_key, absl::StrCat("must be in [0, ", kMaxLayers,
                                            "], got ", info.num_layers));
  }
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
  json rest = described;
  for (const char* key : entry.absent_keys) rest.erase(key);
  if (listed.has_value()) {
    for (const char* key : entry.moe_layer_lists) rest.erase(key);
  }
  if (absl::Status s = ReadMoeDescription(
          EntryOf(base).moe, ConfigReader(rest, text_label), &info);
      !s.ok()) {
    // A key the family spells its own way that the config lacks is named
    // as the family spells it (MiniCPM's num_experts, not Mixtral's
    // num_local_experts).
    std::string message(s.message());
    for (const auto& [common, own] : entry.renamed_keys) {
      if (described.contains(common)) continue;
      message = absl::StrReplaceAll(message, {{absl::StrCat("'", common, "'"),
                                               absl::StrCat("'", own, "'")}});
    }
    // A file family's keys are the user's: say which file asked for them.
    if (entry.source_file != nullptr) {
      absl::StrAppend(&message, " (a key of family file ", entry.source_file,
                      ", field 'moe')");
    }
    return absl::Status(s.code(), message);
  }
  if (listed.has_value()) info.moe_layers = *std::move(listed);
  MOE_RETURN_IF_ERROR(ReadExtensions(r, &c));
  for (auto& [l, layer] : info.layer_overrides) {
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
  if (absl::Status s = CheckLayerOverrides(info); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
  }
  return absl::OkStatus();
}

// Reads `body` (the object holding the family's keys) into spec->info, each
// MoE layer with its own entries of the family's per-layer lists.
absl::Status ReadBody(const json& body, const std::string& model_type,
                      absl::string_view label, const std::string& text_label,
                      HfModelSpec* out) {
  HfModelSpec& spec = *out;
  std::vector<std::string> lists_differ;
  MOE_ASSIGN_OR_RETURN(const json described,
                       DescribedConfig(EntryOf(spec.family), body, text_label,
                                       0, &lists_differ));
  MOE_RETURN_IF_ERROR(
      ReadDescribed(described, model_type, label, text_label, &spec));
  if (lists_differ.empty() || spec.info.moe_layers.empty())
    return absl::OkStatus();
  // A per-layer list that holds several values: each MoE layer is read
  // again with its own entries, and those whose config differs from the
  // first MoE layer's become overrides.
  ModelInfo& info = spec.info;
  std::map<int64_t, MoeLayerConfig> layers;
  for (int64_t l : info.moe_layers) {
    MOE_ASSIGN_OR_RETURN(
        const json own,
        DescribedConfig(EntryOf(spec.family), body, text_label, l, nullptr));
    HfModelSpec layer_spec = spec;
    layer_spec.info = ModelInfo();
    MOE_RETURN_IF_ERROR(
        ReadDescribed(own, model_type, label, text_label, &layer_spec));
    if (layer_spec.info.moe_layers != info.moe_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          text_label, ": layer ", l, "'s entries of the per-layer lists ",
          absl::StrJoin(lists_differ, ", "),
          " change which layers are MoE layers; only the layer rule decides "
          "that"));
    }
    layers[l] = layer_spec.info.LayerConfig(l);
  }
  SetLayerConfigs(&info, [&](int64_t l) { return layers.at(l); });
  if (absl::Status s = CheckLayerOverrides(info); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": ", s.message(), " (from the per-layer lists ",
                     absl::StrJoin(lists_differ, ", "), ")"));
  }
  return absl::OkStatus();
}

// `body` with each [text, vision] pair of `keys` replaced by its entry
// `modality` (0 text, 1 vision); a scalar holds for both.
absl::StatusOr<json> ForModality(const json& body,
                                 const std::vector<const char*>& keys,
                                 int modality, const std::string& label) {
  const ConfigReader r(body, label);
  json out = body;
  for (const char* key : keys) {
    auto it = body.find(key);
    if (it == body.end() || !it->is_array()) continue;
    if (it->size() != 2) {
      return r.Error(key, absl::StrCat("lists ", it->size(),
                                       " values, not a [text, vision] pair"));
    }
    out[key] = (*it)[modality];
  }
  return out;
}

// ERNIE-4.5-VL: the text read is the model; the vision read gives MoE layer
// L's vision experts, served as MoE layer num_layers + L with the text
// layer's shared experts (they run once per token, whichever its type).
absl::Status AddVisionLayers(const HfModelSpec& vision,
                             const std::vector<const char*>& keys,
                             const std::string& label, HfModelSpec* spec) {
  ModelInfo& info = spec->info;
  if (vision.info.moe_layers != info.moe_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": the text experts are on layers [",
        absl::StrJoin(info.moe_layers, ", "),
        "] and the vision experts on layers [",
        absl::StrJoin(vision.info.moe_layers, ", "),
        "] (from the [text, vision] pairs ", absl::StrJoin(keys, ", "),
        "): a layer where one modality has a dense MLP is not served"));
  }
  const std::vector<int64_t> text_layers = info.moe_layers;
  for (int64_t l : text_layers) {
    const MoeLayerConfig& text = info.LayerConfig(l);
    MoeLayerConfig v = vision.info.LayerConfig(l);
    v.shared_inter = text.shared_inter;
    v.shared_gate = text.shared_gate;
    v.shared_act = text.shared_act;
    v.shared_act_limit = text.shared_act_limit;
    const int64_t id = info.num_layers + l;
    info.vision_layers[l] = id;
    info.moe_layers.push_back(id);
    if (!(v == info.layer)) info.layer_overrides[id] = v;
  }
  if (absl::Status s = CheckLayerOverrides(info); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": the vision experts: ", s.message()));
  }
  return absl::OkStatus();
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
  MOE_ASSIGN_OR_RETURN(spec.family, FamilyOf(j, &model_type, label));
  MOE_RETURN_IF_ERROR(CheckArchitectures(j, spec.family, label));
  MOE_ASSIGN_OR_RETURN(spec.quant_method, QuantMethod(j, spec.family, label));
  // A multimodal config (Llama 4, Qwen3.5) keeps the language model's keys
  // in text_config, Qwen3-Omni's in thinker_config.text_config.
  const json* body = &j;
  std::string text_label(label);
  std::vector<const char*> path = EntryOf(spec.family).sub_config;
  if (path.empty() && EntryOf(spec.family).text_config) path = {"text_config"};
  std::string dotted;
  for (const char* key : path) {
    dotted = dotted.empty() ? std::string(key) : absl::StrCat(dotted, ".", key);
    auto it = body->find(key);
    if (it == body->end() || !it->is_object()) {
      return top.Error(dotted, absl::StrCat("must be an object (model_type ",
                                            model_type, ")"));
    }
    body = &*it;
  }
  if (!path.empty()) text_label = absl::StrCat(label, " ", dotted);
  const FamilyEntry& entry = EntryOf(spec.family);
  if (auto inner = body->find("model_type");
      !entry.sub_model_types.empty() && !path.empty() && inner != body->end() &&
      !inner->is_null()) {
    const bool known =
        inner->is_string() &&
        absl::c_any_of(entry.sub_model_types, [&](const char* t) {
          return inner->get<std::string>() == t;
        });
    if (!known) {
      return top.Error(
          absl::StrCat(dotted, ".model_type"),
          absl::StrCat("is ", inner->dump(), ", not ",
                       absl::StrJoin(entry.sub_model_types, " or "), ": ",
                       model_type, " is served with that language model only"));
    }
  }
  if (entry.modality_lists.empty()) {
    MOE_RETURN_IF_ERROR(ReadBody(*body, model_type, label, text_label, &spec));
    return spec;
  }
  HfModelSpec vision = spec;
  MOE_ASSIGN_OR_RETURN(const json text_body,
                       ForModality(*body, entry.modality_lists, 0, text_label));
  MOE_RETURN_IF_ERROR(
      ReadBody(text_body, model_type, label, text_label, &spec));
  MOE_ASSIGN_OR_RETURN(const json vision_body,
                       ForModality(*body, entry.modality_lists, 1, text_label));
  MOE_RETURN_IF_ERROR(
      ReadBody(vision_body, model_type, label, text_label, &vision));
  MOE_RETURN_IF_ERROR(
      AddVisionLayers(vision, entry.modality_lists, text_label, &spec));
  return spec;
}

}  // namespace moe
