// The worker group's settings (WorkerPool and its WorkerGroup), filled by
// the router from its flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "engine/placement.h"

namespace moe {

struct WorkerPoolOptions {
  int world_size = 1;  // P
  int64_t num_experts = 0;
  // Sets the delay before retrying a generation that a worker could not join
  // (its load or rendezvous failed), doubled for each such generation in a row
  // up to kMaxRetryDoublings times, so that a worker that cannot load its
  // experts (a wrong checkpoint, too little memory) is retried, not hammered;
  // back to this once a group is ready.
  std::chrono::milliseconds retry_delay{1000};
  static constexpr int kMaxRetryDoublings = 5;
  // Bounds the StoreGet waits parked at once per rank (RESOURCE_EXHAUSTED
  // beyond).
  int max_store_waits_per_rank = 64;
  // Workers send a heartbeat this often (Assignment.heartbeat_interval_ms);
  // one silent for heartbeat_misses intervals is stalled: the group is not
  // ready, steps in flight fail UNAVAILABLE naming it, and the group is
  // rebuilt once it sends again.
  std::chrono::milliseconds heartbeat_interval{500};
  int heartbeat_misses = 4;
  // Sets how long after a loss the workers left wait before they form a smaller
  // group.
  std::chrono::milliseconds regroup_after{5000};
  // Bounds how long a step waits for a group that is not ready (bounded by its
  // deadline) before failing UNAVAILABLE; 0: fail at once.
  std::chrono::milliseconds hold_while_regrouping{0};
  // Holds the redundant experts (engine/placement.h) for world_size workers,
  // sent in each Assignment; null: experts in contiguous ranges.
  std::shared_ptr<const ExpertPlacement> placement;
};

}  // namespace moe
