#include "core/moe_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

absl::Status Bad(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("moe config '", key, "' ", what));
}

template <typename T>
absl::Status Read(const json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return Bad(key, "must be true or false");
    *out = it->get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) return Bad(key, "must be an integer");
    *out = it->get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return Bad(key, "must be a number");
    *out = it->get<T>();
  } else {
    if (!it->is_string()) return Bad(key, "must be a string");
    *out = it->get<std::string>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view ScoreFuncName(ScoreFunc f) {
  switch (f) {
    case ScoreFunc::kSoftmax:
      return "softmax";
    case ScoreFunc::kSigmoid:
      return "sigmoid";
    case ScoreFunc::kSqrtSoftplus:
      return "sqrtsoftplus";
    case ScoreFunc::kTopkSoftmax:
      return "topk_softmax";
    case ScoreFunc::kSparsemixer:
      return "sparsemixer";
  }
  return "?";
}
absl::string_view ActivationName(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return "silu";
    case Activation::kGptOss:
      return "gptoss";
    case Activation::kSiluClamp:
      return "silu_clamp";
    case Activation::kRelu2:
      return "relu2";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kSitu:
      return "situ";
    case Activation::kGeluErf:
      return "gelu_erf";
    case Activation::kSwigluStep:
      return "swiglustep";
  }
  return "?";
}

absl::StatusOr<Activation> ParseActivationName(absl::string_view name) {
  for (Activation a :
       {Activation::kSilu, Activation::kGptOss, Activation::kSiluClamp,
        Activation::kRelu2, Activation::kGeluTanh, Activation::kSitu,
        Activation::kGeluErf, Activation::kSwigluStep}) {
    if (ActivationName(a) == name) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", name,
      "' is not 'silu', 'gptoss', 'silu_clamp', 'relu2', 'gelu_tanh', "
      "'situ', 'gelu_erf' or 'swiglustep'"));
}

bool MoeLayerConfig::has_2026_options() const {
  const MoeLayerConfig d;
  return router_bias != d.router_bias || expert_bias != d.expert_bias ||
         act != d.act || act_alpha != d.act_alpha || act_limit != d.act_limit ||
         norm_min != d.norm_min || hash_vocab != d.hash_vocab;
}
bool MoeLayerConfig::has_2026b_options() const {
  const MoeLayerConfig d;
  return gated != d.gated || latent != d.latent ||
         latent_bias != d.latent_bias || router_prenorm != d.router_prenorm ||
         per_expert_scale != d.per_expert_scale ||
         branch_norms != d.branch_norms || norm_eps != d.norm_eps;
}
bool MoeLayerConfig::has_2026c_options() const {
  const MoeLayerConfig d;
  return act_beta != d.act_beta || act_linear_beta != d.act_linear_beta ||
         latent_norm != d.latent_norm;
}
bool MoeLayerConfig::has_2026d_options() const {
  const MoeLayerConfig d;
  return jitter_eps != d.jitter_eps || zero_experts != d.zero_experts ||
         router_softcap != d.router_softcap || shared_act != d.shared_act ||
         shared_act_limit != d.shared_act_limit ||
         output_scale != d.output_scale || output_bias != d.output_bias;
}
absl::string_view GroupScoreName(GroupScore g) {
  return g == GroupScore::kTop2Sum ? "top2_sum" : "max";
}
absl::string_view RoutingModeName(RoutingMode r) {
  return r == RoutingMode::kTokenChoice ? "token_choice" : "expert_choice";
}

absl::Status MoeLayerConfig::Validate() const {
  constexpr int64_t kMaxDim = 1 << 20;
  if (hidden <= 0 || hidden > kMaxDim)
    return Bad("hidden", "must be in [1, 2^20]");
  if (inter <= 0 || inter > kMaxDim)
    return Bad("inter", "must be in [1, 2^20]");
  if (num_experts <= 0 || num_experts > 65536) {
    return Bad("experts", "must be in [1, 65536]");
  }
  if (zero_experts < 0 || zero_experts > 65536) {
    return Bad("zero_experts", "must be in [0, 65536]");
  }
  if (top_k <= 0 || top_k > router_rows()) {
    return Bad("top_k",
               zero_experts > 0
                   ? absl::StrCat("must be in [1, experts + "
                                  "zero_experts=",
                                  router_rows(), "]")
                   : absl::StrCat("must be in [1, experts=", num_experts, "]"));
  }
  if (!std::isfinite(route_scale)) return Bad("route_scale", "must be finite");
  if (n_groups < 0) return Bad("n_groups", "must be >= 0");
  if (n_groups > 0) {
    if (num_experts % n_groups != 0) {
      return Bad("n_groups", absl::StrCat("must divide experts=", num_experts));
    }
    if (topk_groups <= 0 || topk_groups > n_groups) {
      return Bad("topk_groups",
                 absl::StrCat("must be in [1, n_groups=", n_groups, "]"));
    }
    if (group_score == GroupScore::kTop2Sum && num_experts / n_groups < 2) {
      return Bad("group_score", "top2_sum needs at least 2 experts per group");
    }
    if (routing == RoutingMode::kTokenChoice &&
        topk_groups * (num_experts / n_groups) < top_k) {
      return Bad("topk_groups", "kept groups hold fewer experts than top_k");
    }
  }
  if (shared_inter < 0 || shared_inter > kMaxDim) {
    return Bad("shared_inter", "must be in [0, 2^20]");
  }
  if (shared_gate && shared_inter == 0) {
    return Bad("shared_gate", "needs shared_inter > 0");
  }
  if (!(capacity_factor >= 0.0) || !std::isfinite(capacity_factor)) {
    return Bad("capacity_factor", "must be a finite number >= 0");
  }
  if (!std::isfinite(act_alpha)) return Bad("act_alpha", "must be finite");
  if (!(act_limit > 0.0f) || !std::isfinite(act_limit)) {
    return Bad("act_limit", "must be a finite number > 0");
  }
  if (!(norm_min >= 0.0f) || !std::isfinite(norm_min)) {
    return Bad("norm_min", "must be a finite number >= 0");
  }
  if ((act == Activation::kRelu2) == gated) {
    return Bad("gated", gated ? "gated experts take no act 'relu2'"
                              : "non-gated experts need act 'relu2'");
  }
  if (latent < 0 || latent > kMaxDim) {
    return Bad("latent", "must be in [0, 2^20]");
  }
  if (latent == 0 && (latent_bias || latent_norm)) {
    return Bad(latent_bias ? "latent_bias" : "latent_norm", "needs latent > 0");
  }
  if (latent > 0 && branch_norms) {
    return Bad("branch_norms", "cannot be combined with latent");
  }
  if (has_expert_frame() && score_before_experts) {
    return Bad("score_before_experts",
               "cannot be combined with latent or branch_norms");
  }
  if (per_expert_scale && routing == RoutingMode::kExpertChoice) {
    // Gemma 4's scales follow a token's top-k renormalisation.
    return Bad("per_expert_scale", "is token_choice only");
  }
  if (!(norm_eps > 0.0f) || !std::isfinite(norm_eps)) {
    return Bad("norm_eps", "must be a finite number > 0");
  }
  if (!(act_beta > 0.0f) || !std::isfinite(act_beta)) {
    return Bad("act_beta", "must be a finite number > 0");
  }
  if (!(act_linear_beta >= 0.0f) || !std::isfinite(act_linear_beta)) {
    return Bad("act_linear_beta", "must be a finite number >= 0");
  }
  if (score_func == ScoreFunc::kTopkSoftmax) {
    // gpt-oss: the choice is on the (router-biased) logits themselves.
    if (n_groups > 0) return Bad("score_func", "topk_softmax takes no groups");
    if (use_bias) return Bad("score_func", "topk_softmax takes no use_bias");
    if (routing == RoutingMode::kExpertChoice) {
      return Bad("score_func", "topk_softmax is token_choice only");
    }
  }
  if (hash_vocab < 0 || hash_vocab > (int64_t{1} << 31)) {
    return Bad("hash_vocab", "must be in [0, 2^31]");
  }
  if (hash_vocab > 0) {
    if (routing == RoutingMode::kExpertChoice) {
      return Bad("hash_vocab", "hash routing is token_choice only");
    }
    if (n_groups > 0) return Bad("hash_vocab", "hash routing takes no groups");
    if (score_func == ScoreFunc::kTopkSoftmax) {
      return Bad("hash_vocab", "hash routing cannot use topk_softmax");
    }
  }
  MOE_RETURN_IF_ERROR(Validate2026d());
  return absl::OkStatus();
}

absl::Status MoeLayerConfig::Validate2026d() const {
  if (!(jitter_eps >= 0.0f) || !std::isfinite(jitter_eps)) {
    return Bad("jitter_eps", "must be a finite number >= 0");
  }
  if (score_func == ScoreFunc::kSparsemixer) {
    // PhiMoE's inference sparsemixer is defined for two rounds only, and
    // its weights are final: no renorm, scale, bias or groups.
    if (top_k != 2) return Bad("top_k", "sparsemixer needs top_k = 2");
    if (route_norm) return Bad("route_norm", "sparsemixer takes no renorm");
    if (route_scale != 1.0f) {
      return Bad("route_scale", "sparsemixer takes no scale");
    }
    if (n_groups > 0 || use_bias || hash_vocab > 0 ||
        routing == RoutingMode::kExpertChoice) {
      return Bad("score_func",
                 "sparsemixer is token_choice only, without groups, "
                 "use_bias or hash routing");
    }
  } else if (jitter_eps != 0.0f) {
    return Bad("jitter_eps", "needs score_func 'sparsemixer'");
  }
  if (zero_experts > 0) {
    if (routing == RoutingMode::kExpertChoice || hash_vocab > 0 ||
        n_groups > 0) {
      return Bad("zero_experts",
                 "are token_choice only, without groups or hash routing");
    }
    if (has_expert_frame() || score_before_experts) {
      return Bad("zero_experts",
                 "cannot be combined with latent, branch_norms or "
                 "score_before_experts");
    }
  }
  if (!(router_softcap >= 0.0f) || !std::isfinite(router_softcap)) {
    return Bad("router_softcap", "must be a finite number >= 0");
  }
  if (shared_act.has_value()) {
    if (shared_inter == 0) return Bad("shared_act", "needs shared_inter > 0");
    if ((*shared_act == Activation::kRelu2) == gated) {
      return Bad("shared_act", gated ? "gated experts take no 'relu2'"
                                     : "non-gated experts need 'relu2'");
    }
  }
  if (!(shared_act_limit >= 0.0f) || !std::isfinite(shared_act_limit)) {
    return Bad("shared_act_limit", "must be a finite number >= 0");
  }
  if (shared_act.has_value() && shared_act_limit == 0.0f &&
      (*shared_act == Activation::kGptOss ||
       *shared_act == Activation::kSiluClamp ||
       *shared_act == Activation::kSwigluStep)) {
    return Bad("shared_act_limit",
               absl::StrCat("must be > 0 for shared_act '",
                            ActivationName(*shared_act), "'"));
  }
  if (!std::isfinite(output_scale)) {
    return Bad("output_scale", "must be finite");
  }
  return absl::OkStatus();
}

absl::StatusOr<MoeLayerConfig> ParseMoeLayerConfigJson(absl::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("moe config is not a JSON object");
  }
  MoeLayerConfig c;
  std::string score = "softmax", group = "top2_sum", routing = "token_choice";
  std::string act = "silu", shared_act;
  double jitter = c.jitter_eps, softcap = c.router_softcap;
  double shared_limit = c.shared_act_limit, out_scale = c.output_scale;
  double scale = c.route_scale, cf = c.capacity_factor;
  double alpha = c.act_alpha, limit = c.act_limit, norm_min = c.norm_min;
  double norm_eps = c.norm_eps, beta = c.act_beta, lbeta = c.act_linear_beta;
  for (auto s : {Read(j, "hidden", &c.hidden),
                 Read(j, "inter", &c.inter),
                 Read(j, "experts", &c.num_experts),
                 Read(j, "top_k", &c.top_k),
                 Read(j, "score_func", &score),
                 Read(j, "route_norm", &c.route_norm),
                 Read(j, "route_scale", &scale),
                 Read(j, "n_groups", &c.n_groups),
                 Read(j, "topk_groups", &c.topk_groups),
                 Read(j, "group_score", &group),
                 Read(j, "use_bias", &c.use_bias),
                 Read(j, "shared_inter", &c.shared_inter),
                 Read(j, "shared_gate", &c.shared_gate),
                 Read(j, "score_before_experts", &c.score_before_experts),
                 Read(j, "capacity_factor", &cf),
                 Read(j, "routing", &routing),
                 Read(j, "router_bias", &c.router_bias),
                 Read(j, "expert_bias", &c.expert_bias),
                 Read(j, "act", &act),
                 Read(j, "act_alpha", &alpha),
                 Read(j, "act_limit", &limit),
                 Read(j, "norm_min", &norm_min),
                 Read(j, "hash_vocab", &c.hash_vocab),
                 Read(j, "gated", &c.gated),
                 Read(j, "latent", &c.latent),
                 Read(j, "latent_bias", &c.latent_bias),
                 Read(j, "router_prenorm", &c.router_prenorm),
                 Read(j, "per_expert_scale", &c.per_expert_scale),
                 Read(j, "branch_norms", &c.branch_norms),
                 Read(j, "norm_eps", &norm_eps),
                 Read(j, "act_beta", &beta),
                 Read(j, "act_linear_beta", &lbeta),
                 Read(j, "latent_norm", &c.latent_norm),
                 Read(j, "jitter_eps", &jitter),
                 Read(j, "zero_experts", &c.zero_experts),
                 Read(j, "router_softcap", &softcap),
                 Read(j, "shared_act", &shared_act),
                 Read(j, "shared_act_limit", &shared_limit),
                 Read(j, "output_scale", &out_scale),
                 Read(j, "output_bias", &c.output_bias)}) {
    MOE_RETURN_IF_ERROR(s);
  }
  c.route_scale = static_cast<float>(scale);
  c.capacity_factor = cf;
  c.act_alpha = static_cast<float>(alpha);
  c.act_limit = static_cast<float>(limit);
  c.norm_min = static_cast<float>(norm_min);
  c.norm_eps = static_cast<float>(norm_eps);
  c.act_beta = static_cast<float>(beta);
  c.act_linear_beta = static_cast<float>(lbeta);
  c.jitter_eps = static_cast<float>(jitter);
  c.router_softcap = static_cast<float>(softcap);
  c.shared_act_limit = static_cast<float>(shared_limit);
  c.output_scale = static_cast<float>(out_scale);
  if (score == "softmax") {
    c.score_func = ScoreFunc::kSoftmax;
  } else if (score == "sigmoid") {
    c.score_func = ScoreFunc::kSigmoid;
  } else if (score == "sqrtsoftplus") {
    c.score_func = ScoreFunc::kSqrtSoftplus;
  } else if (score == "topk_softmax") {
    c.score_func = ScoreFunc::kTopkSoftmax;
  } else if (score == "sparsemixer") {
    c.score_func = ScoreFunc::kSparsemixer;
  } else {
    return Bad("score_func",
               "must be 'softmax', 'sigmoid', 'sqrtsoftplus', "
               "'topk_softmax' or 'sparsemixer'");
  }
  absl::StatusOr<Activation> parsed_act = ParseActivationName(act);
  if (!parsed_act.ok()) return Bad("act", parsed_act.status().message());
  c.act = *parsed_act;
  if (!shared_act.empty()) {
    absl::StatusOr<Activation> parsed = ParseActivationName(shared_act);
    if (!parsed.ok()) return Bad("shared_act", parsed.status().message());
    c.shared_act = *parsed;
  }
  if (group == "top2_sum") {
    c.group_score = GroupScore::kTop2Sum;
  } else if (group == "max") {
    c.group_score = GroupScore::kMax;
  } else {
    return Bad("group_score", "must be 'top2_sum' or 'max'");
  }
  if (routing == "token_choice") {
    c.routing = RoutingMode::kTokenChoice;
  } else if (routing == "expert_choice") {
    c.routing = RoutingMode::kExpertChoice;
  } else {
    return Bad("routing", "must be 'token_choice' or 'expert_choice'");
  }
  MOE_RETURN_IF_ERROR(c.Validate());
  return c;
}

std::string MoeLayerConfigToJson(const MoeLayerConfig& c) {
  json j = {{"hidden", c.hidden},
            {"inter", c.inter},
            {"experts", c.num_experts},
            {"top_k", c.top_k},
            {"score_func", ScoreFuncName(c.score_func)},
            {"route_norm", c.route_norm},
            {"route_scale", c.route_scale},
            {"n_groups", c.n_groups},
            {"topk_groups", c.topk_groups},
            {"group_score", GroupScoreName(c.group_score)},
            {"use_bias", c.use_bias},
            {"shared_inter", c.shared_inter},
            {"shared_gate", c.shared_gate},
            {"score_before_experts", c.score_before_experts},
            {"capacity_factor", c.capacity_factor},
            {"routing", RoutingModeName(c.routing)}};
  // Like the golden files: the 2026 keys only when one differs from its
  // default, and then all of them.
  const bool b = c.has_2026b_options(), c3 = c.has_2026c_options();
  if (c.has_2026_options() || b || c3) {
    j["router_bias"] = c.router_bias;
    j["expert_bias"] = c.expert_bias;
    j["act"] = ActivationName(c.act);
    j["act_alpha"] = c.act_alpha;
    j["act_limit"] = c.act_limit;
    j["norm_min"] = c.norm_min;
    j["hash_vocab"] = c.hash_vocab;
  }
  if (b || c3) {
    j["gated"] = c.gated;
    j["latent"] = c.latent;
    j["latent_bias"] = c.latent_bias;
    j["router_prenorm"] = c.router_prenorm;
    j["per_expert_scale"] = c.per_expert_scale;
    j["branch_norms"] = c.branch_norms;
    j["norm_eps"] = c.norm_eps;
  }
  if (c3) {
    j["act_beta"] = c.act_beta;
    j["act_linear_beta"] = c.act_linear_beta;
    j["latent_norm"] = c.latent_norm;
  }
  // The 2026d keys stand on their own, as in the golden files.
  if (c.has_2026d_options()) {
    j["jitter_eps"] = c.jitter_eps;
    j["zero_experts"] = c.zero_experts;
    j["router_softcap"] = c.router_softcap;
    j["shared_act"] =
        c.shared_act.has_value() ? ActivationName(*c.shared_act) : "";
    j["shared_act_limit"] = c.shared_act_limit;
    j["output_scale"] = c.output_scale;
    j["output_bias"] = c.output_bias;
  }
  return j.dump();
}

int64_t ExpertChoiceCapacity(const MoeLayerConfig& c, int64_t tokens) {
  if (tokens <= 0) return 0;
  int64_t cap;
  if (c.capacity_factor > 0.0) {
    cap = static_cast<int64_t>(
        std::floor(c.capacity_factor * tokens / c.num_experts));
  } else {
    cap = tokens * c.top_k / c.num_experts;
  }
  return std::clamp<int64_t>(cap, 1, tokens);
}

int64_t TokenChoiceCapacity(const MoeLayerConfig& c, int64_t tokens) {
  return static_cast<int64_t>(
      std::ceil(c.capacity_factor * tokens * c.top_k / c.num_experts));
}

}  // namespace moe
