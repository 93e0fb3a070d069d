// Where live rebalancing reads and switches the expert placement, in a
// header of its own so that the rebalancer depends on it, not on the
// worker pool that implements it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "engine/placement.h"

namespace moe {

// Is where the rebalancer reads and switches the placement: the worker pool in
// the router, a fake in tests.
class PlacementTarget {
 public:
  virtual ~PlacementTarget() = default;
  // Returns the placement in force (null: none yet, the contiguous ranges).
  virtual std::shared_ptr<const ExpertPlacement> Current() = 0;
  // Has every worker load `next` and switch to it by `deadline`; `epoch`
  // gets its number (the worker pool's Rebalance).
  virtual absl::Status Switch(std::shared_ptr<const ExpertPlacement> next,
                              std::chrono::steady_clock::time_point deadline,
                              uint64_t* epoch) = 0;
};

}  // namespace moe
