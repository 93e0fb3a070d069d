// The shape and routing options of one MoE layer (docs/architecture.md
// section 3).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe {

enum class ScoreFunc { kSoftmax, kSigmoid };
enum class GroupScore { kTop2Sum, kMax };
enum class RoutingMode { kTokenChoice, kExpertChoice };

struct MoeLayerConfig {
  int64_t hidden = 0;       // H
  int64_t inter = 0;        // I, routed expert intermediate size
  int64_t num_experts = 0;  // E
  int64_t top_k = 0;        // k
  ScoreFunc score_func = ScoreFunc::kSoftmax;
  bool route_norm = true;
  float route_scale = 1.0f;
  int64_t n_groups = 0;  // 0 = no group-limited routing
  int64_t topk_groups = 0;
  GroupScore group_score = GroupScore::kTop2Sum;
  bool use_bias = false;     // expert bias, for choosing only
  int64_t shared_inter = 0;  // 0 = no shared expert
  bool shared_gate = false;  // sigmoid(x g^T) scales the shared expert
  bool score_before_experts = false;
  // Double, like the reference's Python arithmetic: the capacity is
  // ceil(cf*N*k/E) and must land on the same integer.
  double capacity_factor = 0.0;  // 0 = no capacity limit
  RoutingMode routing = RoutingMode::kTokenChoice;

  // Checks sizes and option combinations; messages name the offending key.
  absl::Status Validate() const;
  bool has_shared() const { return shared_inter > 0; }
  bool operator==(const MoeLayerConfig&) const = default;
};

absl::string_view ScoreFuncName(ScoreFunc f);
absl::string_view GroupScoreName(GroupScore g);
absl::string_view RoutingModeName(RoutingMode r);

// The JSON form used by the golden files' `config` metadata and by the
// synthetic model ({"hidden": 64, "inter": 32, "experts": 8, ...}); keys not
// given keep their defaults.
absl::StatusOr<MoeLayerConfig> ParseMoeLayerConfigJson(absl::string_view text);
std::string MoeLayerConfigToJson(const MoeLayerConfig& config);

// Expert-choice capacity: floor(cf*N/E) when cf > 0, else floor(N*k/E),
// clamped to [1, N] (0 when N is 0).
int64_t ExpertChoiceCapacity(const MoeLayerConfig& config, int64_t tokens);
// Token-choice capacity: ceil(cf*N*k/E); only meaningful when cf > 0.
int64_t TokenChoiceCapacity(const MoeLayerConfig& config, int64_t tokens);

}  // namespace moe
