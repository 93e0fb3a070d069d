// The router's side of the worker group: registration and rank
// assignment, heartbeats, and the generations of the group. Any change of
// membership, or a failed step that may have left a worker's collectives
// broken, starts a new generation, in which every worker rebuilds its
// collective group; in-flight steps then fail with UNAVAILABLE. A step that
// every worker refused before its collectives (StepResult.collectives_broken
// unset), or a direct step, fails with the workers' own error and keeps the
// group. Elastic: once a full group has formed, a worker gone (disconnected
// or stalled) for longer than regroup_after no longer blocks the service:
// the remaining workers form a group of their own (world size = workers
// there, experts re-split evenly), and the group grows back, in a new
// generation, as soon as workers return.
// The pool is the coordinator, with one lock; its rooms: who is in the group
// (group_roster) and when the next generation forms (group_membership), both
// plain state under the pool's lock; whether ranks are alive (liveness, pure)
// and the thread that looks (group_timer); the rendezvous store
// (rendezvous_store), the steps sent and answered (step_channel, over
// step_tracker), the placement and its switch (placement_switch) and the
// state's notifications (state_notifier), each with its own lock. Its gRPC
// side is the WorkerControl service (worker_control_service), which calls it
// with plain values and members (group_member.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/placement.h"
#include "server/group_member.h"
#include "server/group_membership.h"
#include "server/group_roster.h"
#include "server/group_timer.h"
#include "server/liveness.h"
#include "server/placement_switch.h"
#include "server/rendezvous_store.h"
#include "server/state_notifier.h"
#include "server/step_channel.h"
#include "server/step_group.h"

namespace moe {

struct WorkerPoolOptions {
  int world_size = 1;  // P
  int64_t num_experts = 0;
  // Delay before retrying a generation that a worker could not join (its
  // load or rendezvous failed), doubled for each such generation in a row
  // up to kMaxRetryDoublings times, so that a worker that cannot load its
  // experts (a wrong checkpoint, too little memory) is retried, not
  // hammered; back to this once a group is ready.
  std::chrono::milliseconds retry_delay{1000};
  static constexpr int kMaxRetryDoublings = 5;
  // StoreGet waits parked at once per rank (RESOURCE_EXHAUSTED beyond).
  int max_store_waits_per_rank = 64;
  // Workers send a heartbeat this often (Assignment.heartbeat_interval_ms);
  // one silent for heartbeat_misses intervals is stalled: the group is not
  // ready, steps in flight fail UNAVAILABLE naming it, and the group is
  // rebuilt once it sends again.
  std::chrono::milliseconds heartbeat_interval{500};
  int heartbeat_misses = 4;
  // After a loss, how long before the workers left form a smaller group.
  std::chrono::milliseconds regroup_after{5000};
  // How long a step waits for a group that is not ready (bounded by its
  // deadline) before failing UNAVAILABLE; 0: fail at once.
  std::chrono::milliseconds hold_while_regrouping{0};
  // Redundant experts (engine/placement.h) for world_size workers, sent in
  // each Assignment; null: experts in contiguous ranges.
  std::shared_ptr<const ExpertPlacement> placement;
};

class WorkerPool final : public StepGroup, private StepRanks {
 public:
  using State = GroupState;
  using PlacementInForce = moe::PlacementInForce;

  explicit WorkerPool(WorkerPoolOptions options);
  ~WorkerPool() override;

  // What a member's stream brings (worker_control_service calls these).
  // Takes a slot for a registering worker (and starts a generation when
  // the group can form), or says why it is refused (GroupRoster::Admit).
  absl::Status Admit(const std::shared_ptr<GroupMember>& member,
                     const std::string& peer);
  // Any message from `member` proves it alive; one that was stalled gets
  // a new generation.
  void Seen(const std::shared_ptr<GroupMember>& member);
  // The member joined `generation` (its collectives are up), or could not
  // (`error`): the group is retried with backoff.
  void OnReady(const std::shared_ptr<GroupMember>& member, uint64_t generation,
               const std::string& error);
  // Its answer to a step (the reply is moved out).
  void OnResult(const GroupMember& member, StepReply& reply);
  void OnPlacementLoaded(const std::shared_ptr<GroupMember>& member,
                         uint64_t generation, uint64_t epoch,
                         const std::string& error);
  // Its stream ended.
  void Remove(const std::shared_ptr<GroupMember>& member);

  // The rendezvous store of the current generation: StoreSet and a
  // StoreGet's cancel go to it directly; a StoreGet parks through
  // ParkStoreGet, which keeps its timeout.
  RendezvousStore& store() { return store_; }
  absl::Status ParkStoreGet(uint64_t generation, const std::string& token,
                            std::vector<std::string> keys,
                            std::chrono::steady_clock::time_point deadline,
                            StoreWaiter* waiter);
  size_t store_waits() const { return store_.waits(); }  // parked now

  State state() const;
  // Called (outside the pool's lock, in order) after every change of
  // membership or readiness, with the state at the time it runs.
  void SetStateCallback(StateNotifier::Callback callback) {
    notifier_.Set(std::move(callback));
  }

  // True when AwaitGroup waits for a group that is not ready (requests then
  // queue instead of being refused at admission).
  bool holds_steps() const {
    return options_.hold_while_regrouping.count() > 0;
  }
  // StepGroup (step_group.h). AwaitGroup waits at most
  // hold_while_regrouping (the router passes no deadline: the client's
  // bounds the wait on its side). RunStep fails UNAVAILABLE when the group
  // is not ready or re-formed since AwaitGroup, and rebuilds it when the
  // failed step may have broken a rank's collectives. placement() is null
  // while the group is degraded.
  absl::StatusOr<int> AwaitGroup(
      std::chrono::steady_clock::time_point deadline) override;
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

  // Fails everything in flight and stops the timer.
  void Shutdown();

 private:
  using Clock = std::chrono::steady_clock;
  // What a change under the lock leaves to do once it is released: the
  // messages to send (in the send order) and whether to deliver the state.
  struct Effects {
    std::vector<std::pair<std::shared_ptr<GroupMember>,
                          std::variant<GroupAssignment, PlacementUpdate>>>
        out;
    bool changed = false;
  };
  using Change = absl::FunctionRef<absl::Status(Effects*)>;

  // In the send order: `change` under mu_, then the ended store waits
  // finished, `out` sent, and the state delivered. `change`'s status.
  absl::Status Reconfigure(Change change);
  // After a change under mu_ without sends: the ended store waits
  // finished and the state delivered if it changed.
  void Settle(bool changed);
  // A new generation if every configured worker is there, or (see
  // regroup_after) with those there; its assignments go to `fx`.
  void StartGenerationLocked(Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A member of the current generation is gone (disconnected or stalled):
  // the workers left may form a group after regroup_after.
  void LostLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the ranks silent for too long as stalled (liveness.h); true if
  // one was. When to look again goes to `next_check`.
  bool CheckStallsLocked(Clock::time_point now, Clock::time_point* next_check)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a new generation with the same members (after a failed step or
  // rendezvous), now or after the backoff.
  void Regroup(bool delayed);
  // The timer's round: parked StoreGets past their timeout, stalls, a
  // regroup that is due; returns when it is due again.
  Clock::time_point Tick(Clock::time_point now);
  // StepRanks: the channel's step opened under mu_ if the group can take
  // `steps` now.
  absl::Status OpenStep(const std::vector<StepContent>& steps,
                        StepRanks::Open open) override;

  const WorkerPoolOptions options_;
  const LivenessPolicy liveness_;
  RendezvousStore store_;
  PlacementSwitch placement_;
  StepChannel channel_{this};
  StateNotifier notifier_;
  // Lock order: the notifier's, the channel's send order, mu_, then the
  // parts' own (store_, the channel's tracker, placement_, timer_'s), which
  // call nothing back (the timer ticks outside its lock). The send order
  // makes every stream see assignments, placements and steps in one order.
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(channel_.send_order());
  GroupRoster roster_ ABSL_GUARDED_BY(mu_);
  RegroupSchedule schedule_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Stall checks, regroups when due, StoreGet timeouts. Last: its thread
  // starts once everything above is built, and stops first.
  GroupTimer timer_;
};

}  // namespace moe
