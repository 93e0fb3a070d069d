// The worker group as the router wires it: the factory builds the pool and
// hands out only its seams, so that the process's files depend on the
// seams (StepGroup, GroupReadiness, PlacementTarget and the membership the
// WorkerControl service serves) and never on WorkerPool itself.
#pragma once

#include <memory>

#include "server/group/state_notifier.h"
#include "server/group/worker_group.h"
#include "server/group/worker_pool_options.h"
#include "server/placement/placement_target.h"
#include "server/step/group_readiness.h"
#include "server/step/step_group.h"

namespace moe {

// Hands out one worker group's seams; the object owns the group, and destroying
// it shuts the group down.
class WorkerGroupSeams {
 public:
  virtual ~WorkerGroupSeams() = default;

  // Returns the group the steps run on (the step runners take it).
  virtual StepGroup* steps() = 0;
  // Returns the group's readiness (the batcher's admission and the read-only
  // RPCs read it).
  virtual GroupReadiness* readiness() = 0;
  // Returns the placement switched on the group (the rebalancer drives it).
  virtual PlacementTarget* placements() = 0;
  // Returns the membership, which the WorkerControl service feeds from each
  // worker's stream.
  virtual WorkerGroup* membership() = 0;
  // Calls `callback` (outside the group's lock, in order) after every
  // change of membership or readiness.
  virtual void SetStateCallback(StateNotifier::Callback callback) = 0;
  // Fails everything in flight and stops the group's timer; later calls do
  // nothing.
  virtual void Shutdown() = 0;
};

// Builds the router's worker group (a WorkerPool) from `options`.
std::unique_ptr<WorkerGroupSeams> MakeWorkerGroup(WorkerPoolOptions options);

}  // namespace moe
