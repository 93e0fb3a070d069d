// The worker group's membership, with the group's one lock: members
// registering and leaving, generations started, ranks said ready or
// stalled, regroups when due, and steps held while the group re-forms. It
// applies GroupEvents (what each event does to the roster, the regroup
// schedule and GroupParts: the rendezvous store, the steps in flight, a
// placement loading) under its lock, and what they leave to do once it is
// released. Its GroupTimer looks when due, its StateNotifier tells the
// router. WorkerPool runs steps and rebalances on it through Read and
// Reconfigure.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/group/group_events.h"
#include "server/group/group_member.h"
#include "server/group/group_parts.h"
#include "server/group/group_roster.h"
#include "server/group/group_timer.h"
#include "server/group/state_notifier.h"
#include "server/group/worker_pool_options.h"

namespace moe {

class WorkerGroup {
 public:
  using Clock = std::chrono::steady_clock;

  // `channel` and `placement` outlive the group (WorkerPool owns them).
  WorkerGroup(const WorkerPoolOptions& options, StepChannel* channel,
              PlacementSwitch* placement);
  ~WorkerGroup();  // Shutdown, and the timer stopped

  // Returns a registering worker's slot (and starts a generation when the group
  // can form), or why it is refused (GroupRoster::Admit).
  absl::Status Admit(const std::shared_ptr<GroupMember>& member,
                     const std::string& peer);
  // Any message from `member` proves it alive; one that was stalled gets a
  // new generation.
  void Seen(const std::shared_ptr<GroupMember>& member);
  // The member joined `generation`, or could not (`error`): then the group
  // is retried with backoff.
  void OnReady(const std::shared_ptr<GroupMember>& member, uint64_t generation,
               const std::string& error);
  void Remove(const std::shared_ptr<GroupMember>& member);  // stream ended
  // A member's answer to a step (the reply is moved out), passed to the
  // step channel as its rank's in the current generation (StepTracker drops
  // an answer to a step of another one).
  void OnResult(const GroupMember& member, StepReply& reply);
  // Records that a member loaded the placement of `epoch` (a rebalance), or
  // could not.
  void OnPlacementLoaded(const GroupMember& member, uint64_t generation,
                         uint64_t epoch, const std::string& error);
  // Starts a new generation with the same members (after a failed step or
  // rendezvous), now or after the backoff.
  void Regroup(bool delayed);

  // Returns the current generation's rendezvous store: StoreSet and a
  // StoreGet's cancel go to it directly; a StoreGet parks through ParkStoreGet,
  // which keeps its timeout.
  RendezvousStore& store() { return parts_.store(); }
  absl::Status ParkStoreGet(uint64_t generation, const std::string& token,
                            std::vector<std::string> keys,
                            Clock::time_point deadline, StoreWaiter* waiter);

  GroupState state() const;
  void SetStateCallback(StateNotifier::Callback callback) {
    notifier_.Set(std::move(callback));
  }
  // Returns the group's world size once it is ready: waits at most `hold` and
  // until `deadline`, then UNAVAILABLE.
  absl::StatusOr<int> AwaitReady(Clock::time_point deadline,
                                 std::chrono::milliseconds hold);

  // What a change leaves to do once the lock is released: the messages to
  // send (in the send order) and whether to deliver the state.
  struct Effects {
    GroupOutbox out;
    bool changed = false;
  };
  using Change =
      absl::FunctionRef<absl::Status(const GroupRoster& roster, Effects* fx)>;
  // In the channel's send order: `change` under the lock, then the store's
  // ended waits finished, `out` sent and the state delivered.
  absl::Status Reconfigure(Change change);
  // Calls `read` on the roster under the lock (no generation starts and no
  // rank is lost meanwhile) and returns what it returns.
  template <typename F>
  auto Read(F read) const {
    absl::MutexLock lock(&mu_);
    return read(events_.roster());
  }

  void Shutdown();  // fails everything in flight, stops the timer

 private:
  // After a change under the lock without sends: the state delivered if it
  // `changed` (the store's ended waits were finished as the lock went).
  void Settle(bool changed);
  // Runs the timer's round: parked StoreGets past their timeout, stalls, a
  // regroup that is due; returns when it is due again.
  Clock::time_point Tick(Clock::time_point now);

  StepChannel* const channel_;
  // Points to the placement switch the parts also hold; the group tells it of
  // placements loaded.
  PlacementSwitch* const placement_;
  // Told what happened under mu_, in the order it happened; its parts
  // lock themselves (the store is also called directly).
  GroupParts parts_;
  StateNotifier notifier_;
  // Lock order: the notifier's, the channel's send order, mu_, then the
  // parts' own (the store's, the channel's tracker, the placement's,
  // timer_'s), which call nothing back (the timer ticks outside its lock).
  // The send order makes every stream see assignments, placements and
  // steps in one order.
  mutable absl::Mutex mu_ ABSL_ACQUIRED_AFTER(channel_->send_order());
  GroupEvents events_ ABSL_GUARDED_BY(mu_);  // the roster and schedule
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Runs the stall checks, the regroups when due and the StoreGet timeouts.
  // Last: its thread starts once everything above is built, and stops first.
  GroupTimer timer_;

  // The group's lock, held for a scope that may change the group; once it
  // is released, the rendezvous store's ended waits are finished (outside
  // the group's lock), so that no change leaves them for a caller to
  // remember. Read-only scopes (state, Read, AwaitReady) take mu_ as is.
  class ABSL_SCOPED_LOCKABLE Locked {
   public:
    explicit Locked(WorkerGroup* group) ABSL_EXCLUSIVE_LOCK_FUNCTION(group->mu_)
        : group_(group) {
      group_->mu_.Lock();
    }
    ~Locked() ABSL_UNLOCK_FUNCTION() {
      group_->mu_.Unlock();
      group_->parts_.store().FinishEnded();
    }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    WorkerGroup* const group_;
  };
};

}  // namespace moe
