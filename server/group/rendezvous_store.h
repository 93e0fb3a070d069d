// The rendezvous store of one worker-group generation: the keys the ranks'
// collectives set up their connections with (Gloo's pair addresses, NCCL's
// unique id). A rank proves who it is with its generation's store token and
// may set only its own keys (KeyOwner). A Get parks until its keys are set,
// its deadline passes, it is cancelled, or the generation ends, and holds no
// thread meanwhile. Who may use it (the rank a key belongs to, the rank a
// token proves, the refusal of another generation) are pure functions
// here, applied under its lock. Knows no gRPC: the StoreSet and StoreGet
// handlers of the group's gRPC edge adapt it (worker_control_service.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace moe {

// Returns the rank whose rendezvous key `key` is, or -1 for a key of no rank:
// Gloo's pair addresses ("R", "R/S", "rank_R": the keys
// gloo::rendezvous::Context::connectFullMesh sets, across Gloo versions) are
// rank R's; NCCL's unique id ("nccl-unique-id") is rank 0's.
int KeyOwner(const std::string& key);

// Returns the rank r whose token tokens[r] is `token`, or -1 when none is (an
// empty token, a revoked rank's, opens nothing).
int RankOfToken(const std::vector<std::string>& tokens,
                const std::string& token);

// Returns FAILED_PRECONDITION for a store call (`what`) of generation `asked`
// when the store serves generation `now`.
absl::Status GenerationMismatch(const char* what, uint64_t asked, uint64_t now);

// One parked Get's caller. End runs exactly once, outside the store's
// lock, with the keys' values (in the order asked) or why there are none.
class StoreWaiter {
 public:
  virtual ~StoreWaiter() = default;
  virtual void End(const absl::Status& status,
                   std::vector<std::string> values) = 0;
};

class RendezvousStore {
 public:
  using Clock = std::chrono::steady_clock;

  // At most `max_waits_per_rank` Gets park at once per rank
  // (RESOURCE_EXHAUSTED beyond).
  explicit RendezvousStore(int max_waits_per_rank)
      : max_waits_per_rank_(max_waits_per_rank) {}

  // Serves `generation` from now on, whose rank r proves itself with
  // tokens[r]: the keys are cleared and the Gets parked for the ended one
  // end FAILED_PRECONDITION.
  void StartGeneration(uint64_t generation, std::vector<std::string> tokens);
  // Revokes rank `rank`'s token when it leaves, so the token no longer opens
  // the store.
  void RevokeRank(int rank);
  // Ends every parked Get with `status` (the generation cannot complete).
  void EndWaits(const absl::Status& status);
  // Ends every parked Get and refuses new ones, UNAVAILABLE.
  void Shutdown();

  // Sets `key` for the rank whose token `token` is; PERMISSION_DENIED for
  // a token of no rank or another rank's key, FAILED_PRECONDITION for
  // another generation.
  absl::Status Set(uint64_t generation, const std::string& token,
                   const std::string& key, const std::string& value);
  // Parks `waiter` until every key is set (answered at once when they
  // already are) or `deadline` (DEADLINE_EXCEEDED). A refused Get returns
  // its error and never calls the waiter.
  absl::Status Get(uint64_t generation, const std::string& token,
                   std::vector<std::string> keys, Clock::time_point deadline,
                   StoreWaiter* waiter);
  // The caller gave up: the waiter ends CANCELLED, unless it already ended.
  void Cancel(StoreWaiter* waiter);
  // Ends the Gets whose deadline has passed by `now`; returns the earliest
  // deadline of those still parked.
  std::optional<Clock::time_point> Expire(Clock::time_point now);

  // Runs End for every Get that ended. Set, Get, Cancel and Expire run it
  // themselves before they return (no caller holds a lock around them);
  // StartGeneration, RevokeRank, EndWaits and Shutdown only queue the ends,
  // because the group calls them under its own lock: the group's lock
  // guard (WorkerGroup::Locked) runs this once it releases that lock.
  void FinishEnded();

  size_t waits() const;  // Gets parked now

 private:
  struct Wait {
    StoreWaiter* waiter;
    std::vector<std::string> keys;
    int rank;
    Clock::time_point deadline;
  };
  // Runs Get's checks and parks it, under the store's lock.
  absl::Status Park(uint64_t generation, const std::string& token,
                    std::vector<std::string> keys, Clock::time_point deadline,
                    StoreWaiter* waiter);
  void EndWaitsLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the Gets whose keys are all set; ends those past `now`.
  void WakeLocked(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_waits_per_rank_;
  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mu_);  // by rank
  std::map<std::string, std::string> keys_ ABSL_GUARDED_BY(mu_);
  std::vector<Wait> waits_ ABSL_GUARDED_BY(mu_);
  struct Ended {
    StoreWaiter* waiter;
    absl::Status status;
    std::vector<std::string> values;
  };
  std::vector<Ended> ended_ ABSL_GUARDED_BY(mu_);  // for FinishEnded
};

}  // namespace moe
