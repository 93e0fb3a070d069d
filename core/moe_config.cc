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
  return f == ScoreFunc::kSoftmax ? "softmax" : "sigmoid";
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
  if (top_k <= 0 || top_k > num_experts) {
    return Bad("top_k",
               absl::StrCat("must be in [1, experts=", num_experts, "]"));
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
  return absl::OkStatus();
}

absl::StatusOr<MoeLayerConfig> ParseMoeLayerConfigJson(absl::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("moe config is not a JSON object");
  }
  MoeLayerConfig c;
  std::string score = "softmax", group = "top2_sum", routing = "token_choice";
  double scale = c.route_scale, cf = c.capacity_factor;
  for (auto s :
       {Read(j, "hidden", &c.hidden), Read(j, "inter", &c.inter),
        Read(j, "experts", &c.num_experts), Read(j, "top_k", &c.top_k),
        Read(j, "score_func", &score), Read(j, "route_norm", &c.route_norm),
        Read(j, "route_scale", &scale), Read(j, "n_groups", &c.n_groups),
        Read(j, "topk_groups", &c.topk_groups), Read(j, "group_score", &group),
        Read(j, "use_bias", &c.use_bias),
        Read(j, "shared_inter", &c.shared_inter),
        Read(j, "shared_gate", &c.shared_gate),
        Read(j, "score_before_experts", &c.score_before_experts),
        Read(j, "capacity_factor", &cf), Read(j, "routing", &routing)}) {
    MOE_RETURN_IF_ERROR(s);
  }
  c.route_scale = static_cast<float>(scale);
  c.capacity_factor = cf;
  if (score == "softmax") {
    c.score_func = ScoreFunc::kSoftmax;
  } else if (score == "sigmoid") {
    c.score_func = ScoreFunc::kSigmoid;
  } else {
    return Bad("score_func", "must be 'softmax' or 'sigmoid'");
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
