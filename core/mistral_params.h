// Mistral's own checkpoint config, params.json (mistral-inference's
// TransformerArgs: dim, n_layers, hidden_dim, moe{...}), read as the Hugging
// Face family whose math it has, the way vLLM's Mistral config adapter maps
// it: an MoE with shared experts is Mistral-Large-3 (model_type deepseek_v3,
// MistralLarge3ForCausalLM: softmax, renormalised top-k, routed scale, groups
// scored by their best expert, no correction bias), one without is Mixtral.
// The translated config goes through the one family interpreter
// (ParseHfConfig); the result reads its tensors by Mistral's consolidated
// names (HfExpertLayout::kConsolidated).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/hf_config.h"

namespace moe {

// Which config file a checkpoint directory is read by (README, "Mistral's
// own layout"): config.json when there is one, else params.json.
inline constexpr char kHfConfigFile[] = "config.json";
inline constexpr char kMistralConfigFile[] = "params.json";

// Parses params.json (`label` names the file in errors). A missing or
// mistyped key is named as params.json spells it ('moe.num_experts'); an
// MoE structure that is neither Mixtral's nor Mistral-Large-3's, a dense
// model, another model_type, a quantised release or a routing option whose
// meaning is unconfirmed is refused naming the key, never served as a near
// family.
absl::StatusOr<HfModelSpec> ParseMistralParams(absl::string_view text,
                                               absl::string_view label);

}  // namespace moe
