// The router's side of the worker group: registration and rank
// assignment, heartbeats, and the generations of the group. Any change of
// membership, or a failed step that may have left a worker's collectives
// broken, starts a new generation, in which every worker rebuilds its
// collective group; in-flight steps then fail with UNAVAILABLE. A step that
// every worker refused before its collectives fails with the workers' own error
// and keeps the group. Elastic: once a full group has formed, a worker gone
// (disconnected or stalled) for longer than regroup_after no longer blocks the
// service: the remaining workers form a group of their own (world size =
// workers there, experts re-split evenly), and the group grows back, in a new
// generation, as soon as workers return. Its parts, each with its own lock,
// below the pool's: when a generation forms (group_membership), the rendezvous
// store (rendezvous_store), the steps sent and their answers gathered
// (step_channel, over step_tracker), the placement in force and its switch
// (placement_switch). Its gRPC side is the WorkerControl service
// (worker_control_service), which calls it with plain values and members
// (group_member.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/serving_defaults.h"
#include "engine/placement.h"
#include "server/group_member.h"
#include "server/group_membership.h"
#include "server/group_timer.h"
#include "server/liveness.h"
#include "server/placement_switch.h"
#include "server/rendezvous_store.h"
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
  explicit WorkerPool(WorkerPoolOptions options);
  ~WorkerPool() override;

  // What a member's stream brings (worker_control_service calls these).
  // Takes a slot for a registering worker (and starts a generation when
  // the group can form), or says why it is refused (worker_admission.h;
  // RESOURCE_EXHAUSTED when every slot is taken).
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
  // StoreGet calls parked now.
  size_t store_waits() const { return store_.waits(); }

  struct State {
    int world_size = 0;  // configured (P)
    // The current generation's world size: P, or fewer while degraded;
    // 0 before any group formed.
    int group_size = 0;
    int connected = 0;
    int ready_workers = 0;
    bool ready = false;
    uint64_t generation = 0;
    // Why the last worker was refused at registration (e.g. a second NCCL
    // worker on one GPU) or could not join a generation (its load or
    // rendezvous error, naming the worker), until a group is ready; empty
    // if none was.
    std::string refusal;
    // "; worker rank R (...) not answering (...)" for each stalled rank.
    std::string stalled;
    // Ready with fewer workers than configured.
    bool degraded() const { return ready && group_size < world_size; }
  };
  State state() const;
  // Called (outside the pool's locks) after every change of membership or
  // readiness, with the state at the time it runs.
  void SetStateCallback(std::function<void(const State&)> callback);

  // True when AwaitGroup waits for a group that is not ready (requests then
  // queue instead of being refused at admission).
  bool holds_steps() const {
    return options_.hold_while_regrouping.count() > 0;
  }
  // The world size to plan a step for: waits while the group is not ready,
  // at most hold_while_regrouping and until `deadline` (the router passes
  // none: the client's deadline bounds the wait on its side), then
  // UNAVAILABLE.
  absl::StatusOr<int> AwaitGroup(
      std::chrono::steady_clock::time_point deadline) override;

  // Sends steps[r] to rank r (steps.size() is AwaitGroup's world size; a
  // group re-formed since then fails the step UNAVAILABLE), all in one ordered
  // send, runs `overlap` (the router's own share of the step) while the workers
  // compute, and waits for every rank's answer until `deadline`. UNAVAILABLE
  // when the group is not ready, a worker is lost or the deadline passes. When
  // a worker reports an error, the first one comes back with its code and
  // message, prefixed "worker rank R: "; the group is rebuilt unless every rank
  // refused the step before its first collective (StepResult.collectives_broken
  // unset). The error of a rank that refused the step can take until its peers'
  // collectives time out (the deadline) when the peers did not refuse it.
  // Direct steps (StepContent.direct) touch no collective: a rank with no rows
  // (IdleInDirectStep) that already had a step of this generation and
  // placement epoch is not sent its step, and its result stays empty (one
  // whose placement moved gets it, to switch with the others); a failure
  // leaves the group as it is.
  // The steps are encoded into wire Steps (proto/step_codec.h) and sent by
  // the step channel, and the results come back as views into the received
  // messages.
  absl::Status RunStep(const std::vector<StepContent>& steps,
                       std::chrono::steady_clock::time_point deadline,
                       const std::function<void()>& overlap,
                       std::vector<StepReply>* results) override;

  // The placement steps are planned with now (null: contiguous ranges, and
  // while the group is degraded).
  using PlacementInForce = moe::PlacementInForce;
  PlacementInForce placement() const override;
  // Live rebalancing: sends `next` to every rank of the current generation,
  // which loads it while steps go on; once every rank has, `next` becomes
  // the placement of every step sent from then on (RunStep refuses steps
  // planned with an older one with IsPlacementChanged, to be planned
  // again), so all ranks switch at the same step. UNAVAILABLE when the
  // group is not ready or regroups meanwhile, DEADLINE_EXCEEDED when a rank
  // is not done by `deadline`, FAILED_PRECONDITION while another rebalance
  // runs, a worker's error when one could not load it.
  absl::Status Rebalance(std::shared_ptr<const ExpertPlacement> next,
                         std::chrono::steady_clock::time_point deadline,
                         uint64_t* epoch);

  // Fails everything in flight and stops the timer.
  void Shutdown();

 private:
  using Clock = std::chrono::steady_clock;
  using Outbox =
      std::vector<std::pair<std::shared_ptr<GroupMember>,
                            std::variant<GroupAssignment, PlacementUpdate>>>;
  using Notify = std::vector<std::function<void()>>;

  // A new generation if every configured worker is there, or (see
  // regroup_after) with those there; the assignments to send (under
  // the send order, after releasing mu_) go to `out`.
  void StartGenerationLocked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank r's assignment in a new generation of `world` ranks.
  GroupAssignment AssignmentLocked(int r, int world,
                                   const std::string& store_token) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A member of the current generation is gone (disconnected or stalled);
  // the workers left may form a group after regroup_after.
  void LostLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The not-ready message (connected, ready, stalled).
  std::string NotReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  State StateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a state notification to run after the locks are released.
  void NotifyLocked(Notify* notify) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(Outbox& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(channel_.send_order());
  // Admit's slot for `member`, or why it is refused.
  absl::Status AdmitLocked(const std::shared_ptr<GroupMember>& member,
                           const std::string& peer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // StepRanks: the channel's step opened under mu_ if the group can take
  // `steps` now.
  absl::Status OpenStep(const std::vector<StepContent>& steps,
                        StepRanks::Open open) override;
  // Marks the ranks silent for too long as stalled (liveness.h); true if
  // one was. When to look again goes to `next_check`.
  bool CheckStallsLocked(Clock::time_point now, Notify* notify,
                         Clock::time_point* next_check)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // State::stalled.
  std::string StalledLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a new generation with the same members (after a failed step or
  // rendezvous), now or after retry_delay.
  void Regroup(bool delayed);
  // The timer's round: parked StoreGets past their timeout, stalls, a
  // regroup that is due; returns when it is due again.
  Clock::time_point Tick(Clock::time_point now);

  const WorkerPoolOptions options_;
  const GroupPolicy policy_;
  const LivenessPolicy liveness_;
  RendezvousStore store_;
  PlacementSwitch placement_;
  StepChannel channel_{this};
  // Lock order: the channel's send order, mu_, then the parts' own locks
  // (store_, the channel's tracker, placement_, timer_'s), which call
  // nothing back (the timer's thread ticks outside its lock).
  // The send order makes every stream see assignments, placements and
  // steps in one global order.
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(channel_.send_order());
  // Registered workers, by slot (at most world_size; null: free slot).
  std::vector<std::shared_ptr<GroupMember>> members_ ABSL_GUARDED_BY(mu_);
  // The current generation's ranks (members, in slot order).
  std::vector<std::shared_ptr<GroupMember>> ranks_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  GroupHistory history_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  int ready_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::string refusal_ ABSL_GUARDED_BY(mu_);  // see State::refusal
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point regroup_at_ ABSL_GUARDED_BY(mu_){};
  bool regroup_pending_ ABSL_GUARDED_BY(mu_) = false;
  // Generations in a row that a worker could not join (see retry_delay).
  int failed_generations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failed_generation_ ABSL_GUARDED_BY(mu_) = 0;  // the last counted
  std::function<void(const State&)> state_callback_ ABSL_GUARDED_BY(mu_);
  absl::Mutex notify_mu_;  // keeps notifications in order
  // Stall checks, regroups when due, StoreGet timeouts. Last: its thread
  // starts once everything above is built, and stops first.
  GroupTimer timer_;
};

}  // namespace moe
