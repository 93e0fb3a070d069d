// Hugging Face config.json -> MoE layer ids, routing options and tensor
// names, for the families in tests/golden/README.md.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_source.h"

namespace moe {

enum class HfFamily {
  kMixtral,
  kQwen2Moe,
  kQwen3Moe,
  kOlmoe,
  kDeepseekV2,
  kDeepseekV3,
};

struct HfModelSpec {
  HfFamily family = HfFamily::kMixtral;
  ModelInfo info;
  // DeepSeek-V3 FP8 checkpoints: [rows, cols] of a weight_scale_inv block.
  int64_t fp8_block_rows = 128;
  int64_t fp8_block_cols = 128;
};

// Parses config.json. Besides each family's own keys it honours three
// extension keys for options no HF family expresses: "moe_capacity_factor"
// (number), "moe_routing" ("token_choice" | "expert_choice") and
// "moe_score_before_experts" (bool). `label` prefixes error messages.
absl::StatusOr<HfModelSpec> ParseHfConfig(absl::string_view json_text,
                                          absl::string_view label);

// The checkpoint tensor name of a role in MoE layer `layer`.
std::string HfTensorName(HfFamily family, int64_t layer, WeightRole role,
                         int64_t expert);

const char* HfFamilyName(HfFamily family);

}  // namespace moe
