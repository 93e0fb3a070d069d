// The router's side of the worker group: the steps run on it (StepGroup)
// and the expert placement switched on it (live rebalancing). Its
// membership is a WorkerGroup (registration, ranks, heartbeats and
// generations): any change of membership, or a failed step that may have
// left a worker's collectives broken, starts a new generation, in which
// every worker rebuilds its collective group; in-flight steps then fail
// with UNAVAILABLE. A step that every worker refused before its collectives
// (StepResult.collectives_broken unset), or a direct step, fails with the
// workers' own error and keeps the group. Elastic: once a full group has
// formed, a worker gone (disconnected or stalled) for longer than
// regroup_after no longer blocks the service: the remaining workers form a
// group of their own (world size = workers there, experts re-split evenly),
// and the group grows back, in a new generation, as soon as workers return.
// No lock of its own: its parts each have theirs (the group's, the step
// channel's, the placement switch's). Its gRPC side is the WorkerControl
// service (worker_control_service).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/placement.h"
#include "server/group/group_member.h"
#include "server/group/placement_switch.h"
#include "server/group/step_channel.h"
#include "server/group/worker_group.h"
#include "server/group/worker_pool_options.h"
#include "server/placement/placement_target.h"
#include "server/step/group_readiness.h"
#include "server/step/step_group.h"

namespace moe {

class WorkerPool final : public StepGroup,
                         public PlacementTarget,
                         public GroupReadiness,
                         private StepRanks {
 public:
  using State = GroupState;
  using PlacementInForce = moe::PlacementInForce;

  explicit WorkerPool(WorkerPoolOptions options);
  ~WorkerPool() override { Shutdown(); }

  // The membership: what a member's stream brings (registration, Ready,
  // step replies, placements loaded, heartbeats, the end) goes there, and
  // the rendezvous store is its.
  WorkerGroup& group() { return group_; }

  // Implements GroupReadiness (group_readiness.h).
  State state() const override { return group_.state(); }
  // Called (outside the group's lock, in order) after every change of
  // membership or readiness, with the state at the time it runs.
  void SetStateCallback(StateNotifier::Callback callback) {
    group_.SetStateCallback(std::move(callback));
  }
  size_t store_waits() { return group_.store().waits(); }  // parked now

  // Returns true when AwaitGroup waits for a group that is not ready.
  bool holds_steps() const override {
    return options_.hold_while_regrouping.count() > 0;
  }
  // StepGroup (step_group.h). AwaitGroup waits at most
  // hold_while_regrouping (the router passes no deadline: the client's
  // bounds the wait on its side). RunStep fails UNAVAILABLE when the group
  // is not ready or re-formed since AwaitGroup, and rebuilds it when the
  // failed step may have broken a rank's collectives. placement() is null
  // while the group is degraded.
  absl::StatusOr<int> AwaitGroup(
      std::chrono::steady_clock::time_point deadline) override {
    return group_.AwaitReady(deadline, options_.hold_while_regrouping);
  }
  absl::Status RunStep(const std::vector<StepContent>& steps,
                       std::chrono::steady_clock::time_point deadline,
                       const std::function<void()>& overlap,
                       std::vector<StepReply>* results) override;
  PlacementInForce placement() const override;

  // Live rebalancing: sends `next` to every rank of the current generation,
  // which loads it while steps go on; once every rank has, `next` becomes
  // the placement of every step sent from then on (RunStep refuses steps
  // planned with an older one with IsPlacementChanged, to be planned
  // again), so all ranks switch at the same step. UNAVAILABLE when the
  // group is not ready or regroups meanwhile, DEADLINE_EXCEEDED when a rank
  // is not done by `deadline`, FAILED_PRECONDITION while another rebalance
  // runs or the group is degraded, a worker's error when one could not
  // load it.
  absl::Status Rebalance(std::shared_ptr<const ExpertPlacement> next,
                         std::chrono::steady_clock::time_point deadline,
                         uint64_t* epoch);

  // Implements PlacementTarget (placement_target.h): the placement in force
  // (null while degraded) and Rebalance.
  std::shared_ptr<const ExpertPlacement> Current() override {
    return placement().placement;
  }
  absl::Status Switch(std::shared_ptr<const ExpertPlacement> next,
                      std::chrono::steady_clock::time_point deadline,
                      uint64_t* epoch) override {
    return Rebalance(std::move(next), deadline, epoch);
  }

  // Fails everything in flight and stops the group's timer.
  void Shutdown() { group_.Shutdown(); }

 private:
  // Implements StepRanks: the channel's step is opened under the group's lock
  // if the group can take `steps` now.
  absl::Status OpenStep(const std::vector<StepContent>& steps,
                        StepRanks::Open open) override;

  const WorkerPoolOptions options_;
  PlacementSwitch placement_;
  StepChannel channel_{this};
  // Comes last: it is built on the parts above, and goes (its timer stopped)
  // first.
  WorkerGroup group_;
};

}  // namespace moe
