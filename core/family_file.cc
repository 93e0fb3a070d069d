#include "core/family_file.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/hf_config_family.h"
#include "core/hf_config_rules.h"
#include "core/hf_tensor_names.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

// The description's enums and named rules as a file spells them. Each name
// function returns null past its enum's last value, which is how the
// parsers below find every value without a second list to keep in step.
const char* SharedRuleName(SharedExpertRule r) {
  switch (r) {
    case SharedExpertRule::kNone:
      return "none";
    case SharedExpertRule::kCountTimesInter:
      return "count_times_inter";
    case SharedExpertRule::kWidthKey:
      return "width_key";
    case SharedExpertRule::kSameAsRouted:
      return "same_as_routed";
  }
  return nullptr;
}
const char* RenormAndScaleName(RenormAndScale r) {
  switch (r) {
    case RenormAndScale::kRenormThenScale:
      return "renorm_then_scale";
    case RenormAndScale::kRenormOrScale:
      return "renorm_or_scale";
  }
  return nullptr;
}
const char* GroupRuleName(GroupRule r) {
  switch (r) {
    case GroupRule::kNone:
      return "none";
    case GroupRule::kFromKeys:
      return "from_keys";
    case GroupRule::kOnlyWhenLimiting:
      return "only_when_limiting";
    case GroupRule::kDeepseekTopkMethod:
      return "deepseek_topk_method";
  }
  return nullptr;
}
const char* LayerRuleName(MoeLayerRule r) {
  switch (r) {
    case MoeLayerRule::kAll:
      return "all";
    case MoeLayerRule::kQwenSparseStep:
      return "qwen_sparse_step";
    case MoeLayerRule::kDeepseekFirstDenseAndFreq:
      return "deepseek_first_dense_and_freq";
    case MoeLayerRule::kGlmFirstDense:
      return "glm_first_dense";
    case MoeLayerRule::kLlama4List:
      return "llama4_list";
    case MoeLayerRule::kErnieInterval:
      return "ernie_interval";
    case MoeLayerRule::kNemotronPattern:
      return "nemotron_pattern";
    case MoeLayerRule::kArcticFrequency:
      return "arctic_frequency";
    case MoeLayerRule::kJambaPeriod:
      return "jamba_period";
    case MoeLayerRule::kNumDenseLayers:
      return "num_dense_layers";
    case MoeLayerRule::kStepLayersEnum:
      return "step_layers_enum";
  }
  return nullptr;
}
const char* ScoreFuncLabel(ScoreFunc f) {
  const absl::string_view name = ScoreFuncName(f);
  return name == "?" ? nullptr : name.data();
}
const char* ActName(Activation a) {
  const absl::string_view name = ActivationName(a);
  return name == "?" ? nullptr : name.data();
}

// Every value of an enum whose name function is `name_of`.
template <typename E>
std::vector<E> AllOf(const char* (*name_of)(E)) {
  std::vector<E> all;
  for (int i = 0; name_of(static_cast<E>(i)) != nullptr; ++i) {
    all.push_back(static_cast<E>(i));
  }
  return all;
}

// The rules that are no data, by the name a file gives them.
struct NamedRule {
  const char* name;
  FamilyRule rule;
};
constexpr NamedRule kNamedRules[] = {
    {"refuse_gemma4_without_moe_block", RefuseGemma4WithoutMoeBlock},
    {"refuse_ernie_linear_biases", RefuseErnieLinearBiases},
    {"deepseek_v4_hash_layers", DeepseekV4HashLayers},
    {"dbrx_expert_weight_norm", DbrxExpertWeightNorm},
    {"hunyuan_widths_agree", HunyuanWidthsAgree},
    {"exaone_moe_swiglu_limits", ExaoneMoeSwigluLimits},
    {"step3p5_layer_limits", Step3p5LayerLimits},
    {"bailing_moe_v3_layer_limits", Ling3LayerLimits},
    {"refuse_grok_residual_moe", RefuseGrokResidualMoe},
};

// The strings and score lists of file families: they live as long as the
// process, as the built-in table's literals do.
const char* Keep(const std::string& s) {
  static auto* strings = new std::deque<std::string>;
  strings->push_back(s);
  return strings->back().c_str();
}
absl::Span<const ScoreName> KeepScores(std::vector<ScoreName> scores) {
  static auto* lists = new std::deque<std::vector<ScoreName>>;
  lists->push_back(std::move(scores));
  return lists->back();
}

absl::Span<const ScaleName> KeepScales(std::vector<ScaleName> scales) {
  static auto* lists = new std::deque<std::vector<ScaleName>>;
  lists->push_back(std::move(scales));
  return lists->back();
}

// ---- Writing ------------------------------------------------------------

json Str(const char* s) { return s == nullptr ? json(nullptr) : json(s); }
json Strs(const std::vector<const char*>& list) {
  json out = json::array();
  for (const char* s : list) out.push_back(s);
  return out;
}
json IntKeyJson(const IntKey& k) {
  return {
      {"key", Str(k.key)},
      {"fallback", k.fallback.has_value() ? json(*k.fallback) : json(nullptr)}};
}
json NumberKeyJson(const NumberKey& k) {
  return {{"key", Str(k.key)}, {"fallback", k.fallback}};
}
json BoolKeyJson(const BoolKey& k) {
  return {{"key", Str(k.key)}, {"fallback", k.fallback}};
}
json StringKeyJson(const StringKey& k) {
  return {{"key", Str(k.key)},
          {"fallback", Str(k.fallback)},
          {"values", Strs(k.values)}};
}
json ScaleKeyJson(const ScaleKey& k) {
  json values = json::array();
  for (const ScaleName& v : k.values) {
    values.push_back({{"name", v.name}, {"scale", v.scale}});
  }
  return {
      {"key", Str(k.key)}, {"fallback", Str(k.fallback)}, {"values", values}};
}
json RuleJson(FamilyRule rule, absl::Status* status) {
  if (rule == nullptr) return nullptr;
  for (const NamedRule& named : kNamedRules) {
    if (named.rule == rule) return named.name;
  }
  *status = absl::InternalError("a family rule has no name in kNamedRules");
  return nullptr;
}

absl::StatusOr<json> DescriptionJson(const MoeDescription& d) {
  absl::Status status;
  json score_values = json::array();
  for (const ScoreName& v : d.score_key.values) {
    score_values.push_back(
        {{"name", v.name}, {"func", ScoreFuncLabel(v.func)}});
  }
  json formats = json::array();
  for (const StringKey& f : d.formats) formats.push_back(StringKeyJson(f));
  const ActivationDescription& a = d.activation;
  json out = {
      {"refuse", RuleJson(d.refuse, &status)},
      {"experts", IntKeyJson(d.experts)},
      {"inter", IntKeyJson(d.inter)},
      {"shared",
       {{"rule", SharedRuleName(d.shared.rule)},
        {"key", IntKeyJson(d.shared.key)},
        {"width", IntKeyJson(d.shared.width)},
        {"gated", d.shared.gated},
        {"required", d.shared.required}}},
      {"latent_bias", BoolKeyJson(d.latent_bias)},
      {"latent_norm", BoolKeyJson(d.latent_norm)},
      {"score", ScoreFuncLabel(d.score)},
      {"score_key",
       {{"key", Str(d.score_key.key)},
        {"fallback", Str(d.score_key.fallback)},
        {"values", score_values}}},
      {"formats", formats},
      {"route_norm", BoolKeyJson(d.route_norm)},
      {"route_norm_needs_two", d.route_norm_needs_two},
      {"route_scale", NumberKeyJson(d.route_scale)},
      {"renorm_and_scale", RenormAndScaleName(d.renorm_and_scale)},
      {"norm_min", NumberKeyJson(d.norm_min)},
      {"groups",
       {{"rule", GroupRuleName(d.groups.rule)},
        {"count", IntKeyJson(d.groups.count)},
        {"kept", IntKeyJson(d.groups.kept)},
        {"method_key", Str(d.groups.method_key)},
        {"method_fallback", Str(d.groups.method_fallback)}}},
      {"activation",
       {{"act", ActName(a.act)},
        {"gated", a.gated},
        {"key", Str(a.key)},
        {"name", Str(a.name)},
        {"alpha", a.alpha.has_value() ? json(*a.alpha) : json(nullptr)},
        {"limit", NumberKeyJson(a.limit)},
        {"beta", NumberKeyJson(a.beta)},
        {"linear_beta", NumberKeyJson(a.linear_beta)}}},
      {"norm_eps", NumberKeyJson(d.norm_eps)},
      {"use_bias", d.use_bias},
      {"router_bias", d.router_bias},
      {"expert_bias", d.expert_bias},
      {"score_before_experts", d.score_before_experts},
      {"router_prenorm", d.router_prenorm},
      {"per_expert_scale", d.per_expert_scale},
      {"branch_norms", d.branch_norms},
      {"layers", LayerRuleName(d.layers)},
      {"finish", RuleJson(d.finish, &status)},
      {"correction_bias", BoolKeyJson(d.correction_bias)},
      {"jitter_eps", NumberKeyJson(d.jitter_eps)},
      {"zero_experts", IntKeyJson(d.zero_experts)},
      {"zero_expert_type", StringKeyJson(d.zero_expert_type)},
      {"router_softcap", NumberKeyJson(d.router_softcap)},
      {"output_scale", ScaleKeyJson(d.output_scale)},
      {"output_bias", d.output_bias},
  };
  MOE_RETURN_IF_ERROR(status);
  return out;
}

// {common key: the family's key}.
json Renamed(const std::vector<std::pair<const char*, const char*>>& keys) {
  json out = json::object();
  for (const auto& [common, own] : keys) out[common] = own;
  return out;
}

json NamesJson(const HfNameTables& names) {
  json out = json::object();
  for (const auto& [label, table] : {std::pair{"per_expert", &names.per_expert},
                                     std::pair{"packed", &names.packed}}) {
    json rows = json::array();
    for (const HfRoleName& r : *table) {
      rows.push_back({{"role", WeightRoleName(r.role)},
                      {"name", r.name},
                      {"layout", r.layout}});
    }
    out[label] = rows;
  }
  return out;
}

// ---- Reading --------------------------------------------------------------

// One JSON object of the file at `path` (e.g. "moe.shared"): each field
// read is marked, so that Finish() can refuse the ones nobody knows.
class Fields {
 public:
  Fields(const json& j, std::string path, std::string label)
      : j_(j), path_(std::move(path)), label_(std::move(label)) {}

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "family file ", label_, ": field '", Path(field), "' ", what));
  }
  std::string Path(absl::string_view field) const {
    return path_.empty() ? std::string(field) : absl::StrCat(path_, ".", field);
  }
  const std::string& label() const { return label_; }
  bool Has(const char* field) {
    known_.insert(field);
    return j_.contains(field);
  }
  const json& At(const char* field) const { return j_.at(field); }

  // Each reader leaves `*out` as it is when the field is absent.
  absl::Status Bool(const char* field, bool* out) {
    if (!Has(field)) return absl::OkStatus();
    if (!At(field).is_boolean()) return Error(field, "must be true or false");
    *out = At(field).get<bool>();
    return absl::OkStatus();
  }
  absl::Status Number(const char* field, double* out) {
    if (!Has(field)) return absl::OkStatus();
    if (!At(field).is_number()) return Error(field, "must be a number");
    *out = At(field).get<double>();
    return absl::OkStatus();
  }
  // A string, or null for "none" where `nullable`.
  absl::Status String(const char* field, const char** out,
                      bool nullable = true) {
    if (!Has(field)) return absl::OkStatus();
    if (At(field).is_null() && nullable) {
      *out = nullptr;
      return absl::OkStatus();
    }
    if (!At(field).is_string()) {
      return Error(field,
                   nullable ? "must be a string or null" : "must be a string");
    }
    *out = Keep(At(field).get<std::string>());
    return absl::OkStatus();
  }
  absl::Status Strings(const char* field, std::vector<const char*>* out) {
    if (!Has(field)) return absl::OkStatus();
    const json& v = At(field);
    if (!v.is_array()) return Error(field, "must be a list of strings");
    out->clear();
    for (const json& s : v) {
      if (!s.is_string()) return Error(field, "must be a list of strings");
      out->push_back(Keep(s.get<std::string>()));
    }
    return absl::OkStatus();
  }
  // The enum value named by the field, among those `name_of` names.
  template <typename E>
  absl::Status Enum(const char* field, const char* (*name_of)(E), E* out) {
    if (!Has(field)) return absl::OkStatus();
    std::vector<std::string> names;
    for (E e : AllOf(name_of)) {
      names.push_back(name_of(e));
      if (At(field).is_string() &&
          At(field).get<std::string>() == names.back()) {
        *out = e;
        return absl::OkStatus();
      }
    }
    return Error(field,
                 absl::StrCat("must be one of ", absl::StrJoin(names, ", "),
                              ", not ", At(field).dump()));
  }
  // A nested object's fields, after checking that it is one.
  absl::StatusOr<Fields> Object(const char* field) {
    Has(field);
    if (!At(field).is_object()) return Error(field, "must be an object");
    return Fields(At(field), Path(field), label_);
  }
  // Refuses the fields no reader asked for.
  absl::Status Finish() const {
    for (const auto& [key, value] : j_.items()) {
      if (known_.count(key) == 0) {
        return Error(key, absl::StrCat("is unknown (known here: ",
                                       absl::StrJoin(known_, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

 private:
  const json& j_;
  std::string path_;
  std::string label_;
  std::set<std::string> known_;
};

absl::Status ReadIntKey(Fields& f, const char* field, IntKey* k) {
  if (!f.Has(field)) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object(field));
  MOE_RETURN_IF_ERROR(o.String("key", &k->key));
  if (o.Has("fallback")) {
    const json& v = o.At("fallback");
    if (v.is_null()) {
      k->fallback = std::nullopt;
    } else if (v.is_number_integer()) {
      k->fallback = v.get<int64_t>();
    } else {
      return o.Error("fallback", "must be an integer or null (required)");
    }
  }
  return o.Finish();
}
absl::Status ReadNumberKey(Fields& f, const char* field, NumberKey* k) {
  if (!f.Has(field)) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object(field));
  MOE_RETURN_IF_ERROR(o.String("key", &k->key));
  MOE_RETURN_IF_ERROR(o.Number("fallback", &k->fallback));
  return o.Finish();
}
absl::Status ReadBoolKey(Fields& f, const char* field, BoolKey* k) {
  if (!f.Has(field)) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object(field));
  MOE_RETURN_IF_ERROR(o.String("key", &k->key));
  MOE_RETURN_IF_ERROR(o.Bool("fallback", &k->fallback));
  return o.Finish();
}
absl::Status ReadRule(Fields& f, const char* field, FamilyRule* rule) {
  if (!f.Has(field)) return absl::OkStatus();
  const json& v = f.At(field);
  if (v.is_null()) {
    *rule = nullptr;
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (const NamedRule& named : kNamedRules) {
    names.push_back(named.name);
    if (v.is_string() && v.get<std::string>() == named.name) {
      *rule = named.rule;
      return absl::OkStatus();
    }
  }
  return f.Error(field, absl::StrCat("must be null or one of ",
                                     absl::StrJoin(names, ", ")));
}

absl::Status ReadShared(Fields& f, SharedExpertDescription* d) {
  if (!f.Has("shared")) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object("shared"));
  MOE_RETURN_IF_ERROR(o.Enum("rule", SharedRuleName, &d->rule));
  MOE_RETURN_IF_ERROR(ReadIntKey(o, "key", &d->key));
  MOE_RETURN_IF_ERROR(ReadIntKey(o, "width", &d->width));
  MOE_RETURN_IF_ERROR(o.Bool("gated", &d->gated));
  MOE_RETURN_IF_ERROR(o.Bool("required", &d->required));
  MOE_RETURN_IF_ERROR(o.Finish());
  const bool keyed = d->rule == SharedExpertRule::kCountTimesInter ||
                     d->rule == SharedExpertRule::kWidthKey;
  if (keyed && d->key.key == nullptr) {
    return o.Error("key", absl::StrCat("must name a config key for rule ",
                                       SharedRuleName(d->rule)));
  }
  return absl::OkStatus();
}

absl::Status ReadScoreKey(Fields& f, ScoreKey* k) {
  if (!f.Has("score_key")) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object("score_key"));
  MOE_RETURN_IF_ERROR(o.String("key", &k->key));
  MOE_RETURN_IF_ERROR(o.String("fallback", &k->fallback));
  if (o.Has("values")) {
    const json& v = o.At("values");
    if (!v.is_array()) return o.Error("values", "must be a list");
    std::vector<ScoreName> scores;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = absl::StrCat("values[", i, "]");
      if (!v[i].is_object()) return o.Error(at, "must be an object");
      Fields item(v[i], o.Path(at), o.label());
      ScoreName score{nullptr, ScoreFunc::kSoftmax};
      MOE_RETURN_IF_ERROR(item.String("name", &score.name, false));
      MOE_RETURN_IF_ERROR(item.Enum("func", ScoreFuncLabel, &score.func));
      MOE_RETURN_IF_ERROR(item.Finish());
      if (score.name == nullptr) return item.Error("name", "is required");
      scores.push_back(score);
    }
    k->values = KeepScores(std::move(scores));
  }
  MOE_RETURN_IF_ERROR(o.Finish());
  if (k->key != nullptr && k->values.empty()) {
    return o.Error("values", "must list the values the key may name");
  }
  return absl::OkStatus();
}

absl::Status ReadStringKey(Fields& f, const char* field, StringKey* k) {
  if (!f.Has(field)) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object(field));
  MOE_RETURN_IF_ERROR(o.String("key", &k->key));
  MOE_RETURN_IF_ERROR(o.String("fallback", &k->fallback));
  MOE_RETURN_IF_ERROR(o.Strings("values", &k->values));
  MOE_RETURN_IF_ERROR(o.Finish());
  if (k->key != nullptr && k->values.empty()) {
    return o.Error("values", "must list the values the key may name");
  }
  return absl::OkStatus();
}

absl::Status ReadScaleKey(Fields& f, const char* field, ScaleKey* k) {
  if (!f.Has(field)) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object(field));
  MOE_RETURN_IF_ERROR(o.String("key", &k->key));
  MOE_RETURN_IF_ERROR(o.String("fallback", &k->fallback));
  if (o.Has("values")) {
    const json& v = o.At("values");
    if (!v.is_array()) return o.Error("values", "must be a list");
    std::vector<ScaleName> scales;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string at = absl::StrCat("values[", i, "]");
      if (!v[i].is_object()) return o.Error(at, "must be an object");
      Fields item(v[i], o.Path(at), o.label());
      ScaleName scale{nullptr, 1.0f};
      double value = 1.0;
      MOE_RETURN_IF_ERROR(item.String("name", &scale.name, false));
      MOE_RETURN_IF_ERROR(item.Number("scale", &value));
      MOE_RETURN_IF_ERROR(item.Finish());
      if (scale.name == nullptr) return item.Error("name", "is required");
      scale.scale = static_cast<float>(value);
      scales.push_back(scale);
    }
    k->values = KeepScales(std::move(scales));
  }
  MOE_RETURN_IF_ERROR(o.Finish());
  if (k->key != nullptr && k->values.empty()) {
    return o.Error("values", "must list the values the key may name");
  }
  return absl::OkStatus();
}

absl::Status ReadFormats(Fields& f, std::vector<StringKey>* formats) {
  if (!f.Has("formats")) return absl::OkStatus();
  const json& v = f.At("formats");
  if (!v.is_array()) return f.Error("formats", "must be a list");
  formats->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = absl::StrCat("formats[", i, "]");
    if (!v[i].is_object()) return f.Error(at, "must be an object");
    Fields item(v[i], f.Path(at), f.label());
    StringKey k;
    MOE_RETURN_IF_ERROR(item.String("key", &k.key, false));
    MOE_RETURN_IF_ERROR(item.String("fallback", &k.fallback));
    MOE_RETURN_IF_ERROR(item.Strings("values", &k.values));
    MOE_RETURN_IF_ERROR(item.Finish());
    if (k.key == nullptr) return item.Error("key", "is required");
    formats->push_back(std::move(k));
  }
  return absl::OkStatus();
}

absl::Status ReadGroups(Fields& f, GroupDescription* d) {
  if (!f.Has("groups")) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object("groups"));
  MOE_RETURN_IF_ERROR(o.Enum("rule", GroupRuleName, &d->rule));
  MOE_RETURN_IF_ERROR(ReadIntKey(o, "count", &d->count));
  MOE_RETURN_IF_ERROR(ReadIntKey(o, "kept", &d->kept));
  MOE_RETURN_IF_ERROR(o.String("method_key", &d->method_key));
  MOE_RETURN_IF_ERROR(o.String("method_fallback", &d->method_fallback));
  MOE_RETURN_IF_ERROR(o.Finish());
  if (d->rule == GroupRule::kDeepseekTopkMethod && d->method_key == nullptr) {
    return o.Error("method_key",
                   "must name a config key for rule "
                   "deepseek_topk_method");
  }
  return absl::OkStatus();
}

absl::Status ReadActivation(Fields& f, ActivationDescription* d) {
  if (!f.Has("activation")) return absl::OkStatus();
  MOE_ASSIGN_OR_RETURN(Fields o, f.Object("activation"));
  MOE_RETURN_IF_ERROR(o.Enum("act", ActName, &d->act));
  MOE_RETURN_IF_ERROR(o.Bool("gated", &d->gated));
  MOE_RETURN_IF_ERROR(o.String("key", &d->key));
  MOE_RETURN_IF_ERROR(o.String("name", &d->name));
  if (o.Has("alpha")) {
    const json& v = o.At("alpha");
    if (v.is_null()) {
      d->alpha = std::nullopt;
    } else if (v.is_number()) {
      d->alpha = v.get<float>();
    } else {
      return o.Error("alpha", "must be a number or null");
    }
  }
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "limit", &d->limit));
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "beta", &d->beta));
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "linear_beta", &d->linear_beta));
  MOE_RETURN_IF_ERROR(o.Finish());
  if ((d->key == nullptr) != (d->name == nullptr)) {
    return o.Error(d->key == nullptr ? "key" : "name",
                   "is needed with the other: the key names the activation, "
                   "the name is the one value it may have");
  }
  return absl::OkStatus();
}

// The description's fields over `d` (the `like` family's, or the defaults).
absl::Status ReadDescription(Fields& o, MoeDescription* d) {
  MOE_RETURN_IF_ERROR(ReadRule(o, "refuse", &d->refuse));
  MOE_RETURN_IF_ERROR(ReadIntKey(o, "experts", &d->experts));
  MOE_RETURN_IF_ERROR(ReadIntKey(o, "inter", &d->inter));
  MOE_RETURN_IF_ERROR(ReadShared(o, &d->shared));
  MOE_RETURN_IF_ERROR(ReadBoolKey(o, "latent_bias", &d->latent_bias));
  MOE_RETURN_IF_ERROR(ReadBoolKey(o, "latent_norm", &d->latent_norm));
  MOE_RETURN_IF_ERROR(o.Enum("score", ScoreFuncLabel, &d->score));
  MOE_RETURN_IF_ERROR(ReadScoreKey(o, &d->score_key));
  MOE_RETURN_IF_ERROR(ReadFormats(o, &d->formats));
  MOE_RETURN_IF_ERROR(ReadBoolKey(o, "route_norm", &d->route_norm));
  MOE_RETURN_IF_ERROR(o.Bool("route_norm_needs_two", &d->route_norm_needs_two));
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "route_scale", &d->route_scale));
  MOE_RETURN_IF_ERROR(
      o.Enum("renorm_and_scale", RenormAndScaleName, &d->renorm_and_scale));
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "norm_min", &d->norm_min));
  MOE_RETURN_IF_ERROR(ReadGroups(o, &d->groups));
  MOE_RETURN_IF_ERROR(ReadActivation(o, &d->activation));
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "norm_eps", &d->norm_eps));
  for (auto [field, flag] :
       {std::pair{"use_bias", &d->use_bias},
        std::pair{"router_bias", &d->router_bias},
        std::pair{"expert_bias", &d->expert_bias},
        std::pair{"score_before_experts", &d->score_before_experts},
        std::pair{"router_prenorm", &d->router_prenorm},
        std::pair{"per_expert_scale", &d->per_expert_scale},
        std::pair{"branch_norms", &d->branch_norms}}) {
    MOE_RETURN_IF_ERROR(o.Bool(field, flag));
  }
  MOE_RETURN_IF_ERROR(o.Enum("layers", LayerRuleName, &d->layers));
  MOE_RETURN_IF_ERROR(ReadRule(o, "finish", &d->finish));
  MOE_RETURN_IF_ERROR(ReadBoolKey(o, "correction_bias", &d->correction_bias));
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "jitter_eps", &d->jitter_eps));
  MOE_RETURN_IF_ERROR(ReadIntKey(o, "zero_experts", &d->zero_experts));
  MOE_RETURN_IF_ERROR(
      ReadStringKey(o, "zero_expert_type", &d->zero_expert_type));
  MOE_RETURN_IF_ERROR(ReadNumberKey(o, "router_softcap", &d->router_softcap));
  MOE_RETURN_IF_ERROR(ReadScaleKey(o, "output_scale", &d->output_scale));
  MOE_RETURN_IF_ERROR(o.Bool("output_bias", &d->output_bias));
  MOE_RETURN_IF_ERROR(o.Finish());
  if (d->experts.key == nullptr) {
    return o.Error("experts", "must name the config key of the expert count");
  }
  if (d->inter.key == nullptr) {
    return o.Error("inter", "must name the config key of the expert width");
  }
  return absl::OkStatus();
}

// A role's name as a file spells it (WeightRoleName), or an error.
absl::StatusOr<WeightRole> RoleNamed(Fields& item, const std::string& name) {
  std::vector<std::string> names;
  for (int i = 0;; ++i) {
    const char* n = WeightRoleName(static_cast<WeightRole>(i));
    if (std::string(n) == "?") break;
    names.push_back(n);
    if (name == n) return static_cast<WeightRole>(i);
  }
  return item.Error("role", absl::StrCat("'", name, "' is not one of ",
                                         absl::StrJoin(names, ", ")));
}

absl::Status ReadNameTable(Fields& f, const char* field,
                           std::vector<HfRoleName>* table) {
  if (!f.Has(field)) return absl::OkStatus();
  const json& v = f.At(field);
  if (!v.is_array()) return f.Error(field, "must be a list");
  table->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    if (!v[i].is_object()) return f.Error(at, "must be an object");
    Fields item(v[i], f.Path(at), f.label());
    const char* role = nullptr;
    const char* name = nullptr;
    const char* layout = "own";
    MOE_RETURN_IF_ERROR(item.String("role", &role, false));
    MOE_RETURN_IF_ERROR(item.String("name", &name, false));
    MOE_RETURN_IF_ERROR(item.String("layout", &layout, false));
    MOE_RETURN_IF_ERROR(item.Finish());
    if (role == nullptr) return item.Error("role", "is required");
    if (name == nullptr) return item.Error("name", "is required");
    MOE_ASSIGN_OR_RETURN(WeightRole r, RoleNamed(item, role));
    const std::vector<std::string> layouts = HfLayoutNames();
    if (std::find(layouts.begin(), layouts.end(), layout) == layouts.end()) {
      return item.Error("layout", absl::StrCat("'", layout, "' is not one of ",
                                               absl::StrJoin(layouts, ", ")));
    }
    for (const HfRoleName& seen : *table) {
      if (seen.role == r) {
        return item.Error("role", absl::StrCat("'", role, "' is listed twice"));
      }
    }
    const std::string template_name = name;
    if (template_name.find("{p}") == std::string::npos) {
      return item.Error("name", "must start from the layer prefix {p}");
    }
    table->push_back({r, template_name, layout});
  }
  return absl::OkStatus();
}

// The roles a description needs a tensor for, each named by the table.
absl::Status CheckNamesCover(Fields& names, const MoeDescription& d,
                             const HfNameTables& tables) {
  std::vector<WeightRole> needed = {WeightRole::kGate, WeightRole::kW3,
                                    WeightRole::kW2};
  if (d.activation.gated) needed.push_back(WeightRole::kW1);
  if (d.shared.rule != SharedExpertRule::kNone) {
    needed.push_back(WeightRole::kSharedW3);
    needed.push_back(WeightRole::kSharedW2);
    if (d.activation.gated) needed.push_back(WeightRole::kSharedW1);
  }
  for (WeightRole role : needed) {
    bool found = false;
    for (const HfRoleName& r : tables.per_expert) found |= r.role == role;
    if (!found) {
      return names.Error(
          "per_expert",
          absl::StrCat("has no entry for role ", WeightRoleName(role),
                       ", which this description needs"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PrintFamilyJson(HfFamily family) {
  const FamilyEntry& e = EntryOf(family);
  if (e.family != family) {
    return absl::NotFoundError("no such family in the table");
  }
  const FamilyEntry& base = EntryOf(HfBaseFamily(e.family));
  const char* prefix = e.layer_prefix != nullptr      ? e.layer_prefix
                       : base.layer_prefix != nullptr ? base.layer_prefix
                                                      : "model.layers.{L}.";
  MOE_ASSIGN_OR_RETURN(json moe, DescriptionJson(base.moe));
  json out = {
      {"model_type", e.model_type},
      {"architectures", Strs(e.architectures)},
      {"like",
       e.like.has_value() ? json(HfFamilyName(*e.like)) : json(nullptr)},
      {"text_config", e.text_config},
      {"layer_prefix", prefix},
      {"moe_layer_lists", Strs(e.moe_layer_lists)},
      {"absent_keys", Strs(e.absent_keys)},
      {"latent_key", Str(base.latent_key)},
      {"top_k_keys", Strs(base.top_k_keys)},
      {"sub_config", Strs(e.sub_config)},
      {"sub_model_types", Strs(e.sub_model_types)},
      {"moe_config", Str(e.moe_config)},
      {"renamed_keys", Renamed(e.renamed_keys)},
      {"layer_lists", Strs(e.layer_lists)},
      {"modality_lists", Strs(e.modality_lists)},
      {"num_layers_key", Str(base.num_layers_key)},
      {"moe", moe},
      {"names", NamesJson(HfFamilyNames(e.family))},
  };
  return out.dump(2) + "\n";
}

absl::StatusOr<std::string> PrintFamilyJson(absl::string_view name) {
  // By model_type, else by architecture: two families may share a
  // model_type (Ling V1 and 2.0) and are then told apart by their class.
  for (const bool by_class : {false, true}) {
    std::vector<const FamilyEntry*> found;
    for (const FamilyEntry& e : FamilyTable()) {
      bool match = !by_class && name == e.model_type;
      for (const char* a : e.architectures) match |= by_class && name == a;
      if (match) found.push_back(&e);
    }
    if (found.size() == 1) return PrintFamilyJson(found[0]->family);
    if (found.size() > 1) {
      std::vector<std::string> classes;
      for (const FamilyEntry* e : found) {
        classes.push_back(absl::StrCat(
            e->model_type, " (", absl::StrJoin(e->architectures, ", "), ")"));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' names ", found.size(),
                       " families: ", absl::StrJoin(classes, "; "),
                       by_class ? "" : "; give the architecture instead"));
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no family with model_type or architecture '", name,
                   "' (known: ", SupportedHfFamilies(), ")"));
}

absl::StatusOr<HfFamily> AddFamilyJson(absl::string_view text,
                                       absl::string_view label) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("family file ", label, ": not a JSON object"));
  }
  Fields top(j, "", std::string(label));
  const char* model_type = nullptr;
  MOE_RETURN_IF_ERROR(top.String("model_type", &model_type, false));
  if (model_type == nullptr || *model_type == '\0') {
    return top.Error("model_type", "is required");
  }
  for (const FamilyEntry& e : FamilyTable()) {
    if (std::string(model_type) == e.model_type) {
      return top.Error("model_type",
                       absl::StrCat("'", model_type,
                                    "' is a known family already (a file "
                                    "adds families, it does not replace "
                                    "them)"));
    }
  }
  FamilyEntry entry;
  entry.model_type = model_type;
  MoeDescription description;
  HfNameTables names;
  entry.layer_prefix = "model.layers.{L}.";
  // `like`: start from a known family's description and names, which the
  // file's own fields then change.
  if (top.Has("like") && !top.At("like").is_null()) {
    const char* like = nullptr;
    MOE_RETURN_IF_ERROR(top.String("like", &like, false));
    bool found = false;
    for (const FamilyEntry& e : FamilyTable()) {
      if (std::string(like) != e.model_type) continue;
      const FamilyEntry& base = EntryOf(HfBaseFamily(e.family));
      description = base.moe;
      names = HfFamilyNames(e.family);
      entry.text_config = e.text_config;
      entry.layer_prefix = e.layer_prefix != nullptr      ? e.layer_prefix
                           : base.layer_prefix != nullptr ? base.layer_prefix
                                                          : "model.layers.{L}.";
      entry.latent_key = base.latent_key;
      entry.top_k_keys = base.top_k_keys;
      entry.sub_config = e.sub_config;
      entry.sub_model_types = e.sub_model_types;
      entry.moe_config = e.moe_config;
      entry.renamed_keys = e.renamed_keys;
      entry.layer_lists = e.layer_lists;
      entry.modality_lists = e.modality_lists;
      entry.num_layers_key = base.num_layers_key;
      entry.moe_layer_lists = e.moe_layer_lists;
      entry.absent_keys = e.absent_keys;
      found = true;
    }
    if (!found) {
      return top.Error("like", absl::StrCat("'", like,
                                            "' is no known family ("
                                            "known: ",
                                            SupportedHfFamilies(), ")"));
    }
  } else if (!top.Has("moe") || !top.Has("names")) {
    return top.Error(top.Has("moe") ? "names" : "moe",
                     "is required when the file names no `like` family");
  }
  MOE_RETURN_IF_ERROR(top.Strings("architectures", &entry.architectures));
  if (entry.architectures.empty()) {
    return top.Error("architectures",
                     "must list the model classes a checkpoint may name");
  }
  MOE_RETURN_IF_ERROR(top.Bool("text_config", &entry.text_config));
  MOE_RETURN_IF_ERROR(top.String("layer_prefix", &entry.layer_prefix, false));
  if (std::string(entry.layer_prefix).find("{L}") == std::string::npos) {
    return top.Error("layer_prefix", "must hold {L}, the layer number");
  }
  MOE_RETURN_IF_ERROR(top.Strings("moe_layer_lists", &entry.moe_layer_lists));
  MOE_RETURN_IF_ERROR(top.Strings("absent_keys", &entry.absent_keys));
  MOE_RETURN_IF_ERROR(top.String("latent_key", &entry.latent_key));
  MOE_RETURN_IF_ERROR(top.Strings("top_k_keys", &entry.top_k_keys));
  MOE_RETURN_IF_ERROR(top.Strings("sub_config", &entry.sub_config));
  MOE_RETURN_IF_ERROR(top.Strings("sub_model_types", &entry.sub_model_types));
  MOE_RETURN_IF_ERROR(top.String("moe_config", &entry.moe_config));
  if (top.Has("renamed_keys")) {
    const json& v = top.At("renamed_keys");
    if (!v.is_object()) {
      return top.Error("renamed_keys",
                       "must map common keys to the family's own");
    }
    entry.renamed_keys.clear();
    for (const auto& [common, own] : v.items()) {
      if (!own.is_string()) {
        return top.Error(absl::StrCat("renamed_keys.", common),
                         "must be a string");
      }
      entry.renamed_keys.emplace_back(Keep(common),
                                      Keep(own.get<std::string>()));
    }
  }
  MOE_RETURN_IF_ERROR(top.Strings("layer_lists", &entry.layer_lists));
  MOE_RETURN_IF_ERROR(top.Strings("modality_lists", &entry.modality_lists));
  MOE_RETURN_IF_ERROR(
      top.String("num_layers_key", &entry.num_layers_key, false));
  if (entry.top_k_keys.empty()) {
    return top.Error("top_k_keys", "must list at least one config key");
  }
  if (top.Has("moe")) {
    MOE_ASSIGN_OR_RETURN(Fields moe, top.Object("moe"));
    MOE_RETURN_IF_ERROR(ReadDescription(moe, &description));
  }
  if (top.Has("names")) {
    MOE_ASSIGN_OR_RETURN(Fields n, top.Object("names"));
    MOE_RETURN_IF_ERROR(ReadNameTable(n, "per_expert", &names.per_expert));
    MOE_RETURN_IF_ERROR(ReadNameTable(n, "packed", &names.packed));
    MOE_RETURN_IF_ERROR(n.Finish());
    MOE_RETURN_IF_ERROR(CheckNamesCover(n, description, names));
  }
  top.Has("comment");  // free text for the file's reader
  MOE_RETURN_IF_ERROR(top.Finish());

  entry.moe = description;
  entry.source_file = Keep(std::string(label));
  const HfFamily family = AddFamilyEntry(std::move(entry));
  if (absl::Status s = AddHfFamilyNames(family, names); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("family file ", label, ": ", s.message()));
  }
  return family;
}

absl::StatusOr<HfFamily> AddFamilyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("family file ", path, ": cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return AddFamilyJson(text.str(), path);
}

std::string FamilySourceFile(HfFamily family) {
  const char* source = EntryOf(family).source_file;
  return source == nullptr ? "" : source;
}

}  // namespace moe
