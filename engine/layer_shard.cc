#include "engine/layer_shard.h"

#include "absl/strings/str_cat.h"

namespace moe {

absl::Status CheckLayerShard(int64_t layer, const LayerShard& s, bool need_gate,
                             bool need_shared, bool need_all_experts) {
  if (need_gate && !s.gate_loaded) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", layer, " was loaded without its gate"));
  }
  if (need_shared && s.has_shared_expert && !s.shared_loaded) {
    return absl::FailedPreconditionError(
        absl::StrCat("layer ", layer, " was loaded without its shared expert"));
  }
  if (need_all_experts &&
      (s.expert_begin != 0 || s.expert_end != s.num_experts ||
       s.local_experts != s.num_experts)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "single-process layer ", layer, " needs all ", s.num_experts,
        " experts loaded, has [", s.expert_begin, ", ", s.expert_end, ") in ",
        s.local_experts, " local slots"));
  }
  return absl::OkStatus();
}

}  // namespace moe
