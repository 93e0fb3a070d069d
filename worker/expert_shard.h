// The routed experts a worker holds, as an Assignment or PlacementUpdate
// asks (worker/assignment.h reads them off the message): checked against
// the model before anything is loaded, and turned into the engine's load
// options.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "core/model_source.h"
#include "engine/layer_weights.h"

namespace moe {

// The routed experts a worker holds: [begin, end) of every layer, or with
// redundant experts (engine/placement.h) each layer's slot list, the
// worker's share of E + `redundant` physical slots.
struct ExpertShard {
  int64_t begin = 0, end = 0;
  int64_t redundant = 0;
  std::map<int64_t, std::vector<int32_t>> layer_slots;
};

// INVALID_ARGUMENT when redundant experts come without slot lists, or the
// slot lists miss one of the model's MoE layers.
absl::Status CheckShard(const ModelInfo& info, const ExpertShard& shard);

// What a worker loads: its shard of the routed experts, no gate and no
// shared expert (the router's).
LoadOptions WorkerLoadOptions(const ExpertShard& shard);

}  // namespace moe
