// Where the router puts the routed experts on its P workers
// (engine/placement.h): pinned by --expert-placement, or computed with EPLB
// from per-expert load (--expert-load, the JSON `moe-cli stats --save`
// writes; without one, even load). Null when neither redundant experts nor
// a file was asked for: the contiguous ranges of old.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model_source.h"
#include "engine/placement.h"

namespace moe {

struct PlacementFlags {
  int64_t redundant = 0;       // --redundant-experts
  std::string load_file;       // --expert-load
  std::string placement_file;  // --expert-placement
};

// Returns INVALID_ARGUMENT naming the flag and what is wrong (a layer missing
// from a file, a placement that does not fit P workers and R slots, a load of
// the wrong length); NOT_FOUND for a file that cannot be read.
absl::StatusOr<std::shared_ptr<const ExpertPlacement>> MakeRouterPlacement(
    const ModelInfo& info, int P, const PlacementFlags& flags);

}  // namespace moe
