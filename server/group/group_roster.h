// Who is in the worker group: the registered members by slot, the ranks of
// the current generation, how many of them are ready, and why the last
// worker was refused. Plain state with no lock of its own: GroupEvents
// keeps it under the group's one lock (WorkerGroup's) and applies what it
// answers (the store, the steps, the placement, the notifications), so its
// rules are tested without threads or gRPC. A member's slot, rank and
// readiness are kept here, not in the member, so that the compiler checks
// they are only touched under the group's lock (GroupEvents, which holds
// the roster, is ABSL_GUARDED_BY it). The GroupState the router sees is
// read off it here too (GroupStateOf, NotReady).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/group/group_member.h"
#include "server/group/liveness.h"
#include "server/step/group_readiness.h"

namespace moe {

class GroupRoster {
 public:
  using Clock = std::chrono::steady_clock;
  using Members = std::vector<std::shared_ptr<GroupMember>>;

  explicit GroupRoster(int world_size) : members_(world_size) {}

  // Returns a free slot for a registering worker (from `peer`), or why it is
  // refused: worker_admission.h's checks (kept as the refusal), or
  // RESOURCE_EXHAUSTED when every slot is taken.
  absl::Status Admit(const std::shared_ptr<GroupMember>& member,
                     const std::string& peer);
  enum class Removed { kNone, kMember, kRank };
  // `member`'s stream ended: its slot is free. kRank: it was a rank of the
  // current generation, which is no longer ready (its rank is kept for the
  // caller to revoke); kNone: it held no slot.
  Removed Remove(const std::shared_ptr<GroupMember>& member);

  enum class Readiness { kIgnored, kFailed, kCounted, kGroupReady };
  // `member` said Ready for `generation`, or could not join it (`error`,
  // kept as the refusal: kFailed). kIgnored: another generation, not a
  // rank, or said before; kGroupReady: every rank is now ready.
  Readiness Ready(const std::shared_ptr<GroupMember>& member,
                  uint64_t generation, const std::string& error);

  // Returns which slots could join a generation (registered and not stalled).
  std::vector<bool> Available() const;
  // Generation + 1, whose ranks are the members in `slots` (ascending);
  // none of them is ready yet, and so neither is the group (steps wait
  // until every rank has loaded and joined, also when a worker returns to
  // a degraded group that was ready).
  void StartGeneration(const std::vector<int>& slots);
  // Rank `rank` is stalled: the group is not ready.
  void Stall(int rank);
  // Stalls the ranks silent for longer than `policy` allows (liveness.h):
  // the error naming each; when to look again goes to `next_check`.
  std::vector<absl::Status> StallSilent(Clock::time_point now,
                                        const LivenessPolicy& policy,
                                        Clock::time_point* next_check);
  void Unready() { ready_ = false; }

  // Returns `member`'s slot, or -1 when it holds none.
  int SlotOf(const GroupMember& member) const;
  // Returns `member`'s rank in the current generation, or -1 when it has none
  // (a rank that left keeps it, for its token to be revoked).
  int RankOf(const GroupMember& member) const;
  bool IsRank(const GroupMember& member) const { return RankOf(member) >= 0; }
  // Returns "rank R (host pid N)", or "(host pid N)" outside the generation.
  std::string NameOf(const GroupMember& member) const;
  // Returns when each rank was last heard of (liveness.h), nullopt for a rank
  // not held to the interval (not assigned or already stalled).
  std::vector<std::optional<Clock::time_point>> Watched() const;

  bool ready() const { return ready_; }
  uint64_t generation() const { return generation_; }
  const Members& ranks() const { return ranks_; }
  int world_size() const { return static_cast<int>(members_.size()); }
  // The group's state (GroupStateOf, below) is read off these.
  int Connected() const;
  int ready_workers() const { return ready_count_; }
  const std::string& refusal() const { return refusal_; }
  // Returns "; worker NAME not answering (...)" for each stalled member, its
  // silence measured to `now`.
  std::string Stalled(Clock::time_point now) const;

 private:
  Members members_;  // by slot (null: free)
  Members ranks_;    // the current generation's, in slot order
  // These record, by rank, whether it said Ready for the current generation,
  // and whether it was told the heartbeat interval in its assignment, and so
  // held to it (not once it left).
  std::vector<bool> said_ready_, assigned_;
  uint64_t generation_ = 0;
  bool ready_ = false;
  int ready_count_ = 0;
  std::string refusal_;  // see GroupState::refusal (group_readiness.h)
};

// The group as the router's readiness, metrics and errors see it, read off
// the roster: `roster`'s state at `now` (a stalled rank's silence measured to
// `now`).
GroupState GroupStateOf(const GroupRoster& roster,
                        std::chrono::steady_clock::time_point now);
// Returns UNAVAILABLE's message while `roster` is not ready (NotReadyMessage of
// its state at `now`).
std::string NotReady(const GroupRoster& roster,
                     std::chrono::steady_clock::time_point now);

}  // namespace moe
