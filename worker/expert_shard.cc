#include "worker/expert_shard.h"

#include "absl/strings/str_cat.h"

namespace moe {

absl::Status CheckShard(const ModelInfo& info, const ExpertShard& shard) {
  if (shard.redundant < 0 ||
      (shard.redundant > 0 && shard.layer_slots.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment: redundant_experts ", shard.redundant,
                     " needs layer_slots for every MoE layer"));
  }
  for (int64_t layer : info.moe_layers) {
    if (!shard.layer_slots.empty() && shard.layer_slots.count(layer) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "assignment: layer_slots has no entry for MoE layer ", layer));
    }
  }
  return absl::OkStatus();
}

LoadOptions WorkerLoadOptions(const ExpertShard& shard) {
  LoadOptions opts;
  opts.load_gate = false;
  opts.load_shared = false;
  opts.expert_begin = shard.begin;
  opts.expert_end = shard.end;
  opts.layer_experts = shard.layer_slots;
  return opts;
}

}  // namespace moe
