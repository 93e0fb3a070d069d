// The rendezvous store of one worker-group generation: the keys the ranks'
// collectives set up their connections with (Gloo's pair addresses, NCCL's
// unique id). A rank proves who it is with its generation's store token and
// may set only its own keys (KeyOwner). A Get parks until its keys are set,
// its deadline passes, it is cancelled, or the generation ends, and holds no
// thread meanwhile. Knows no gRPC: the StoreSet and StoreGet handlers of
// the group's gRPC edge adapt it (worker_control_service.cc).
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
#include "server/rendezvous_access.h"

namespace moe {

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
  // Rank `rank` left: its token no longer opens the store.
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

  // Runs End for every Get that ended. The methods above only queue
  // them, so that a caller may hold its own lock; call this after
  // releasing it.
  void FinishEnded();

  size_t waits() const;  // Gets parked now

 private:
  struct Wait {
    StoreWaiter* waiter;
    std::vector<std::string> keys;
    int rank;
    Clock::time_point deadline;
  };
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
