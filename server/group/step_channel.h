// The worker group's step channel: one step sent to the ranks of the
// current generation and their replies gathered by deadline. It encodes
// each rank's StepContent (proto/encoded_step.h, reusing the buffers of
// earlier steps), writes them in the one order every rank's stream sees, leaves
// out a rank with no rows in a direct step that is already up to date,
// and waits on the StepTracker for every rank's reply, or the failure
// that ends the step (a rank lost, stalled or refusing it, the deadline).
// What it needs of the group (its ranks, whether a step can go now) comes
// through StepRanks; the group decides what a failed step means (regroup).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/encoded_step.h"
#include "proto/step_views.h"
#include "server/group/step_rank.h"
#include "server/group/step_tracker.h"

namespace moe {

// A direct step that gives its rank no rows: the channel need not send it.
bool IdleInDirectStep(const StepContent& step);

// Declares what the channel needs of the worker group.
class StepRanks {
 public:
  using Open = absl::FunctionRef<void(
      uint64_t generation,
      const std::vector<std::shared_ptr<StepRank>>& ranks)>;
  virtual ~StepRanks() = default;
  // Under the group's own lock, so that no generation starts and no rank
  // is lost unseen meanwhile: calls `open` with the current generation and
  // its ranks (steps.size() of them) if `steps` can be sent now, else says
  // why not (not ready, re-formed, planned with another placement).
  virtual absl::Status OpenStep(const std::vector<StepContent>& steps,
                                Open open) = 0;
};

class StepChannel {
 public:
  explicit StepChannel(StepRanks* group) : group_(group) {}

  struct Outcome {
    StepTracker::Outcome step;
    uint64_t id = 0;  // 0: the step was not sent (step.status says why)
  };
  // Sends steps[r] to rank r of the group (see StepGroup::RunStep), runs
  // `overlap` while the ranks compute and gathers their replies into
  // `results` until `deadline`. A step the group refused (OpenStep) is not
  // sent and comes back intact.
  Outcome Run(const std::vector<StepContent>& steps,
              std::chrono::steady_clock::time_point deadline,
              const std::function<void()>& overlap,
              std::vector<StepReply>* results);

  // The send order: every message to the ranks (the group's assignments
  // and placements too) is written under it, so that every stream sees
  // them in one global order. Taken before the group's own lock.
  absl::Mutex& send_order() ABSL_LOCK_RETURNED(send_mu_) { return send_mu_; }

  // Passes the replies and failures on to the tracker (StepTracker).
  void Answer(int rank, absl::FunctionRef<std::string()> who,
              StepReply& reply) {
    tracker_.Answer(rank, who, reply);
  }
  void AbortAll(const absl::Status& status) { tracker_.AbortAll(status); }
  void Blame(const absl::Status& status) { tracker_.Blame(status); }

 private:
  // Records the generation and placement epoch of the last step written to a
  // rank (by rank: within a generation a rank is one connection).
  struct Sent {
    uint64_t generation = 0, epoch = 0;
  };
  // Holds the step opened in the tracker for `generation`, and which ranks it
  // leaves out (`skip`).
  uint64_t OpenLocked(uint64_t generation,
                      const std::vector<StepContent>& steps,
                      std::vector<bool>* skip)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_);
  // Sends `wire` (steps encoded) in order to the ranks of the group's
  // generation, as step `*id` (0: the group refused it, nothing was sent).
  absl::Status Send(const std::vector<StepContent>& steps,
                    std::vector<EncodedStep>& wire,
                    std::chrono::steady_clock::time_point deadline,
                    uint64_t* id);

  StepRanks* const group_;
  StepTracker tracker_;
  EncodedStepPool buffers_;
  absl::Mutex send_mu_;
  // A direct step with no rows for a rank is not sent to it if it already
  // had a step of this generation and placement epoch (see Send).
  std::vector<Sent> sent_ ABSL_GUARDED_BY(send_mu_);
};

}  // namespace moe
