// The worker group's steps in flight: each rank's answer gathered by step
// id, failures recorded with their cause, and the caller woken when every
// rank has answered, the step was aborted (a worker lost, a new
// generation, shutdown) or its deadline passed; then whether the group's
// collectives are still intact. The step channel opens and sends the steps
// and feeds the answers in (WorkerGroup::OnResult passes them on).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/step_views.h"

namespace moe {

class StepTracker {
 public:
  // A step of `generation` to skipped.size() ranks, where the ranks with
  // skipped[r] are not sent one (their result stays empty); `direct`: no
  // rank's step touches a collective. Returns the step's id.
  uint64_t Open(uint64_t generation, const std::vector<bool>& skipped,
                bool direct);
  // Rank `rank`'s answer (`who` names its worker, for the log of a
  // failure). Answers of another generation, to a step that ended, or a
  // second one are ignored; a successful reply is moved out of `reply`
  // (with its owner: the rows stay where they arrived).
  void Answer(int rank, absl::FunctionRef<std::string()> who, StepReply& reply);
  // Step `id` cannot complete (a send failed): `status` unless it already
  // failed.
  void Fail(uint64_t id, const absl::Status& status);
  // No answer will come to any step in flight: `status` for those not
  // failed already.
  void AbortAll(const absl::Status& status);
  // As AbortAll, and `status` is the cause of every step in flight or
  // already failed, whatever was reported first (a stalled rank: its
  // peers' errors are consequences).
  void Blame(const absl::Status& status);

  struct Outcome {
    absl::Status status;
    // Every rank answered and the collectives were left as they were: all
    // refused the step before its first collective, or it was direct.
    bool intact = false;
    uint64_t generation = 0;
  };
  // Waits for step `id` until `deadline` (UNAVAILABLE naming the ranks
  // that did not answer after it), forgets it, and on success moves the
  // ranks' results into `results`.
  Outcome Wait(uint64_t id, std::chrono::steady_clock::time_point deadline,
               std::vector<StepReply>* results);

 private:
  struct Pending {
    uint64_t generation = 0;
    std::vector<StepReply> results;
    std::vector<bool> have;  // rank answered (a result or an error)
    int remaining = 0;       // ranks yet to answer
    int failed = 0;          // ranks that answered with an error
    bool broken = false;     // some rank's collective group is broken
    bool direct = false;     // every rank's step is direct: no collective
    // Is set once no more answers will come.
    bool aborted = false;
    absl::Status status;  // first failure
    bool done() const { return aborted || remaining == 0; }
  };

  absl::Mutex mu_;
  std::map<uint64_t, std::unique_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_step_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace moe
