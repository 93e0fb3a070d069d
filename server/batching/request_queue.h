// The router's bounded queue of requests waiting for a step, with its own
// lock: admission (Admit: the token bound and the estimate of the work
// ahead), the deadlines of queued requests, and handing the next step's
// requests (SelectBatch) to the step threads. It knows nothing of the
// step itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/batching/batch_request.h"
#include "server/batching/batch_selection.h"
#include "server/step/router_metrics.h"

namespace moe {

class RequestQueue {
 public:
  struct Options {
    BatchPolicy policy;
    // Bounds the tokens queued (0: unbounded); Admit refuses requests beyond
    // it.
    int64_t max_queue_tokens = 0;
    // Counts the steps that may run at once (the threads calling Next), which
    // Admit's estimate of the wait takes into account.
    int parallel_steps = 1;
  };
  // `metrics` (may be null) gets the queue's tokens and the refusals.
  RequestQueue(Options options, RouterMetrics* metrics);

  // Queues the request, or refuses it at once (and its `done` is not
  // called): UNAVAILABLE once closed, RESOURCE_EXHAUSTED when Admit says so.
  absl::Status Push(std::unique_ptr<BatchRequest> request);

  // Waits until SelectBatch picks the next step's requests and returns
  // them, counted as a step in flight until StepDone; nullopt once closed.
  // Requests whose deadline passes while queued are answered
  // DEADLINE_EXCEEDED on the calling thread, without any work.
  std::optional<Batch> Next();
  // Tells the queue that a step Next handed out has answered its requests.
  void StepDone();
  // Records the time per token of a successful step, for Admit's estimate (the
  // lowest of the last kRecentSteps steps counts).
  void RecordStepCost(double seconds_per_token);

  // Refuses further requests, answers the queued ones UNAVAILABLE on the
  // calling thread (without waiting for the steps in flight), and wakes
  // the threads waiting in Next, which return nullopt.
  void Close();

  size_t size() const;
  int64_t tokens() const;

 private:
  static constexpr size_t kRecentSteps = 64;

  // Moves the requests `decision` names out of the queue.
  void TakeLocked(const BatchDecision& decision, Batch* batch, Batch* expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  RouterMetrics* const metrics_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::unique_ptr<BatchRequest>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  // Holds the seconds per token of the last kRecentSteps successful steps (a
  // ring), and their minimum, for Admit.
  std::vector<double> recent_seconds_per_token_ ABSL_GUARDED_BY(mu_);
  size_t recent_next_ ABSL_GUARDED_BY(mu_) = 0;
  double min_seconds_per_token_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int steps_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // SelectBatch writes into this scratch so that choosing a batch does not
  // allocate.
  std::vector<QueuedRequestView> views_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe
