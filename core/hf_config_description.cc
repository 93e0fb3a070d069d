#include "core/hf_config_description.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/hf_config_layers.h"
#include "core/status_macros.h"

namespace moe {
namespace {

// DeepSeek's topk_method values, in the order ReadGroups lists them.
enum class TopkMethod { kGreedy, kGroupLimitedGreedy, kNoauxTc };

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
      int64_t width = c.inter;
      if (d.width.key != nullptr && r.Present(d.width.key)) {
        MOE_ASSIGN_OR_RETURN(width, r.Int(d.width.key));
        if (width < 1) return r.Error(d.width.key, "must be >= 1");
      }
      c.shared_inter = count * width;
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
  TopkMethod method = TopkMethod::kGreedy;
  if (d.rule == GroupRule::kDeepseekTopkMethod) {
    MOE_ASSIGN_OR_RETURN(
        size_t i,
        ReadChoice(r, d.method_key, d.method_fallback,
                   {"greedy", "group_limited_greedy", "noaux_tc"}, "method"));
    method = static_cast<TopkMethod>(i);
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
      switch (method) {
        case TopkMethod::kGreedy:
          c->n_groups = 0;
          c->topk_groups = 0;
          break;
        case TopkMethod::kGroupLimitedGreedy:
          c->group_score = GroupScore::kMax;
          break;
        case TopkMethod::kNoauxTc:
          c->use_bias = true;  // the correction bias, for choosing
          break;
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

// sparsemixer's epsilon, the zero experts and the output terms.
absl::Status ReadRouterPieces2026d(const MoeDescription& d,
                                   const ConfigReader& r, ModelInfo* info) {
  MoeLayerConfig& c = info->layer;
  MOE_ASSIGN_OR_RETURN(c.jitter_eps, ReadNumber(r, d.jitter_eps, c.jitter_eps));
  if (d.zero_experts.key != nullptr) {
    MOE_ASSIGN_OR_RETURN(c.zero_experts, ReadInt(r, d.zero_experts));
    if (c.zero_experts < 0) return r.Error(d.zero_experts.key, "must be >= 0");
  }
  if (d.zero_expert_type.key != nullptr && c.zero_experts > 0) {
    MOE_RETURN_IF_ERROR(
        ReadChoice(r, d.zero_expert_type.key, d.zero_expert_type.fallback,
                   d.zero_expert_type.values,
                   absl::StrCat("zero-expert kind ", info->family, " has"))
            .status());
  }
  MOE_ASSIGN_OR_RETURN(c.router_softcap,
                       ReadNumber(r, d.router_softcap, c.router_softcap));
  if (d.output_scale.key != nullptr) {
    std::vector<const char*> names;
    for (const ScaleName& v : d.output_scale.values) names.push_back(v.name);
    MOE_ASSIGN_OR_RETURN(
        size_t i,
        ReadChoice(r, d.output_scale.key, d.output_scale.fallback, names,
                   absl::StrCat("one ", info->family, " has")));
    c.output_scale = d.output_scale.values[i].scale;
  }
  c.output_bias = d.output_bias;
  return absl::OkStatus();
}

}  // namespace

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
  MOE_ASSIGN_OR_RETURN(bool correction_bias, ReadBool(r, d.correction_bias));
  c.use_bias = c.use_bias || correction_bias;
  c.router_bias = d.router_bias;
  c.expert_bias = d.expert_bias;
  c.score_before_experts = d.score_before_experts;
  c.router_prenorm = d.router_prenorm;
  c.per_expert_scale = d.per_expert_scale;
  c.branch_norms = d.branch_norms;
  // A softmax over the k chosen logits sums to 1 already: renormalising it
  // changes nothing (Cohere2-MoE's norm_topk_prob with its softmax).
  if (c.score_func == ScoreFunc::kTopkSoftmax) c.route_norm = false;
  MOE_RETURN_IF_ERROR(ReadRouterPieces2026d(d, r, info));
  MOE_RETURN_IF_ERROR(ReadMoeLayers(d.layers, r, info));
  if (d.finish != nullptr) MOE_RETURN_IF_ERROR(d.finish(r, info));
  return absl::OkStatus();
}

}  // namespace moe
