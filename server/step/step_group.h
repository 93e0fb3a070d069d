// What a step run on the workers needs of the worker group (RemoteStep's
// view of WorkerPool): the group's world size, the placement to plan with,
// and one step sent to every rank and answered. An interface so that
// RemoteStep is tested in-process against a fake group.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/step_views.h"
#include "server/step/placement_in_force.h"

namespace moe {

// RunStep's answer to steps planned with a placement that is no longer in
// force (a rebalance switched meanwhile): plan them again.
absl::Status PlacementChangedError(uint64_t planned, uint64_t in_force);
bool IsPlacementChanged(const absl::Status& status);

class StepGroup {
 public:
  virtual ~StepGroup() = default;

  // The world size to plan a step for: waits while the group is not ready
  // (bounded by the group's own policy and `deadline`), then UNAVAILABLE.
  virtual absl::StatusOr<int> AwaitGroup(
      std::chrono::steady_clock::time_point deadline) = 0;

  virtual PlacementInForce placement() const = 0;

  // Sends steps[r] to rank r (steps.size() is AwaitGroup's world size;
  // their views are read before the ranks compute, their step ids and
  // timeouts are the group's to set), runs `overlap` while the ranks
  // compute, and gathers every rank's reply into (*results)[r] until
  // `deadline`: views into the received messages, which each reply's owner
  // keeps alive. A rank with no rows in a direct step may not be sent its
  // step; its reply is then left empty. IsPlacementChanged when the steps
  // name an epoch no longer in force.
  virtual absl::Status RunStep(const std::vector<StepContent>& steps,
                               std::chrono::steady_clock::time_point deadline,
                               const std::function<void()>& overlap,
                               std::vector<StepReply>* results) = 0;
};

}  // namespace moe
