// What each event does to the worker group's membership, at a given time:
// a worker admitted or gone, a rank ready or unable to join, a stalled one
// answering again, a regroup, and the timer's round (ranks silent too long,
// a regroup that is due). It keeps the roster and the regroup schedule,
// starts generations (their assignments to send), tells GroupParts what
// happened, and says when the timer must look sooner. Plain state with no
// lock, thread or timer of its own: WorkerGroup keeps it under its one
// lock, sends and delivers what it leaves to do once the lock is released,
// and runs its timer; so each event's rules are tested step by step, at
// times the test chooses.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/group/group_member.h"
#include "server/group/group_membership.h"
#include "server/group/group_parts.h"
#include "server/group/group_roster.h"
#include "server/group/liveness.h"
#include "server/group/worker_pool_options.h"

namespace moe {

class GroupEvents {
 public:
  using Clock = std::chrono::steady_clock;

  // `parts` outlives the events (WorkerGroup owns both). `look_sooner` is
  // called when a regroup is scheduled: the timer must look again before
  // the time its last round said.
  GroupEvents(const WorkerPoolOptions& options, GroupParts* parts,
              std::function<void()> look_sooner);

  const GroupRoster& roster() const { return roster_; }

  // A registering worker's slot, or why it is refused (GroupRoster::Admit);
  // a generation started if the group can form, its assignments added to
  // `out`.
  absl::Status Admit(const std::shared_ptr<GroupMember>& member,
                     const std::string& peer, Clock::time_point now,
                     GroupOutbox* out);
  // `member`'s stream ended: true when it held a slot. A rank of the
  // current generation is revoked from the parts, and the members left may
  // form a smaller group after regroup_after.
  bool Remove(const std::shared_ptr<GroupMember>& member,
              Clock::time_point now);

  // A stalled `member` answers again: true, once, when it was still
  // stalled (then the group regroups with it).
  bool Answered(GroupMember& member);

  enum class AfterReady {
    kIgnored,  // nothing changed
    kDeliver,  // counted (or the group is ready): tell the router
    kRetry,    // it could not join: regroup after the backoff
  };
  // Tells the group that `member` joined `generation`, or could not (`error`).
  AfterReady Ready(const std::shared_ptr<GroupMember>& member,
                   uint64_t generation, const std::string& error);

  // A new generation with the same members now (after a failed step or
  // rendezvous, or a stalled rank answering again), its assignments added
  // to `out`.
  void Regroup(Clock::time_point now, GroupOutbox* out);
  // Does the same after the backoff of failed generations; a regroup due sooner
  // keeps its time.
  void RegroupLater(Clock::time_point now);

  // Runs the timer's round at `now`: the ranks silent too long stalled (told to
  // the parts), else a regroup that is due, else when to look again.
  struct Round {
    bool stalled = false;  // the group changed
    bool regroup = false;  // due now: Regroup
    // Returns `now` when something happened, else the earliest of the next
    // liveness check, the regroup scheduled and `also_at`.
    Clock::time_point wake;
  };
  // `also_at` is another time the timer keeps (a parked StoreGet's timeout).
  Round Look(Clock::time_point now, std::optional<Clock::time_point> also_at);

 private:
  // A new generation if every configured worker is there, or (see
  // regroup_after) with those there; its assignments go to `out`.
  void StartGeneration(Clock::time_point now, GroupOutbox* out);
  // A member of the current generation is gone (disconnected or stalled):
  // the workers left may form a group after regroup_after.
  void Lost(Clock::time_point now);

  const LivenessPolicy liveness_;
  GroupParts* const parts_;
  const std::function<void()> look_sooner_;
  GroupRoster roster_;
  RegroupSchedule schedule_;
};

}  // namespace moe
