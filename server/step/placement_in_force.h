// The expert placement a step is planned with, in a header of its own so
// that the group (which switches it) and the step (which plans with it)
// share it without including each other.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/placement.h"

namespace moe {

// Holds the placement steps are planned with now (null: contiguous ranges),
// and its epoch, which every step names so that no worker runs a step with
// another placement than the one it was planned for.
struct PlacementInForce {
  std::shared_ptr<const ExpertPlacement> placement;
  uint64_t epoch = 0;
};

}  // namespace moe
