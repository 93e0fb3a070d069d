// Dynamic batching: concurrent requests for the same layer are packed into
// one step (up to max_batch_tokens, waiting at most `window` for company
// while other steps are in flight), and up to one step per runner is in
// flight at once, so the router's routing of the next step overlaps the
// workers' compute of this one. Which requests a step takes is decided by
// SelectBatch, a pure function; the batcher's threads only wait and hand
// over.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/serving_defaults.h"
#include "core/wire_matrix.h"
#include "server/expert_stats.h"
#include "server/router_metrics.h"
#include "server/step_runner.h"

namespace moe {

struct BatchResult {
  // This request's rows [n, H]: a view of the step's output, valid only
  // while `done` runs (the next step reuses the buffer).
  absl::Span<const float> y;
  Routing routing;   // this request's tokens
  StageTimes times;  // of the step the request rode in
  double queue_us = 0;
  int64_t batch_tokens = 0;
  int batch_requests = 0;
};

// What batch selection looks at of one queued request.
struct QueuedRequestView {
  int64_t layer = 0;
  int64_t tokens = 0;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point deadline;
};

struct BatchPolicy {
  int64_t max_batch_tokens = kDefaultMaxBatchTokens;
  // How long the oldest queued request may wait for others to share its
  // step; 0 = no wait.
  std::chrono::microseconds window{0};
};

struct BatchDecision {
  // Queue positions (ascending, i.e. FIFO) of the requests the next step
  // takes; empty when no step should start now.
  std::vector<size_t> take;
  // Queue positions (ascending) of requests whose deadline has passed: they
  // leave the queue and are answered DEADLINE_EXCEEDED without any work.
  std::vector<size_t> expired;
  // When `take` is empty: when to decide again (nullopt: not before the
  // queue or the steps in flight change).
  std::optional<std::chrono::steady_clock::time_point> wake_at;
};

// The next step's requests (after Triton's dynamic batch scheduler):
// - the oldest unexpired request picks the layer; the step takes the
//   requests of that layer in FIFO order while they fit in
//   max_batch_tokens (the oldest is always taken, and a request that does
//   not fit is passed over for later, smaller ones);
// - it starts at once when nothing else is in flight (`steps_in_flight` is
//   0: waiting cannot help a lone request), when the queued tokens of the
//   layer already fill the step, or when the oldest request's window has
//   closed; otherwise it waits until the window closes (or the earliest
//   queued deadline, whichever comes first);
// - requests whose deadline is at or before `now` are reported in
//   `expired`, whatever else is decided.
BatchDecision SelectBatch(absl::Span<const QueuedRequestView> queue,
                          std::chrono::steady_clock::time_point now,
                          const BatchPolicy& policy, int steps_in_flight);

// Admission of a request of `tokens` behind `queued_tokens` already queued
// (before any work): RESOURCE_EXHAUSTED naming the limit when the queue
// would pass `max_queue_tokens` (0: unbounded), or when the queue ahead
// cannot be worked off before `deadline`. That estimate is deliberately
// simple and errs toward admitting: queued tokens x `seconds_per_token`
// (the lowest per-token time of the recent steps, 0 = none yet: no
// estimate) / `parallel_steps` (steps that may run at once); the
// request's own step is not counted. A request admitted on a wrong guess
// still leaves the queue DEADLINE_EXCEEDED, without any work, once its
// deadline passes. `refusal_reason` (may be null) gets "queue_full" or
// "deadline".
absl::Status Admit(int64_t tokens, int64_t queued_tokens,
                   int64_t max_queue_tokens, double seconds_per_token,
                   int parallel_steps,
                   std::chrono::steady_clock::time_point now,
                   std::chrono::steady_clock::time_point deadline,
                   const char** refusal_reason = nullptr);

struct BatchRequest {
  int64_t layer = 0;
  // The request's rows, viewed in the request message (which the caller
  // keeps until `done` has run); decoded straight into the step's buffer.
  WireMatrix x;
  DType output_dtype = DType::kF32;  // what the client asked for
  // One per row, or empty (viewed in the request message, like x).
  absl::Span<const int64_t> token_ids;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point deadline;  // the client's
  // Called exactly once: on a batcher thread, or on the thread calling
  // Batcher::Shutdown for a request still queued.
  std::function<void(const absl::Status&, BatchResult&)> done;
};

class Batcher {
 public:
  struct Options {
    int64_t max_batch_tokens = kDefaultMaxBatchTokens;
    std::chrono::microseconds window{0};
    std::chrono::milliseconds step_timeout{kDefaultStepTimeoutMs};
    // Tokens queued at most (0: unbounded); see Admit.
    int64_t max_queue_tokens = 0;
    // A step whose requests all want bf16 answers (and send bf16) gets the
    // workers' answers in bf16 where that is lossless for the client
    // (StepRunner::Run's bf16_out); false: always fp32.
    bool bf16_steps = true;
  };
  // One runner per step allowed in flight.
  // `metrics` may be null.
  Batcher(Options options, std::vector<std::unique_ptr<StepRunner>> runners,
          ExpertStatsBook* stats, RouterMetrics* metrics);
  ~Batcher();

  // Queues the request, or refuses it at once (and `done` is not called):
  // UNAVAILABLE once shutting down, RESOURCE_EXHAUSTED when Admit says so.
  absl::Status Submit(std::unique_ptr<BatchRequest> request);
  // Fails queued requests with UNAVAILABLE (on the calling thread, without
  // waiting for the steps in flight), then joins the step threads once
  // their steps have answered.
  void Shutdown();
  size_t queued() const;
  int64_t queued_tokens() const;

 private:
  void Loop(size_t index);
  // Moves the requests `decision` names out of the queue.
  void TakeFromQueueLocked(const BatchDecision& decision,
                           std::vector<std::unique_ptr<BatchRequest>>* batch,
                           std::vector<std::unique_ptr<BatchRequest>>* expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  using Batch = std::vector<std::unique_ptr<BatchRequest>>;
  using Clock = std::chrono::steady_clock;
  void RunBatch(size_t index, Batch& batch);
  // RunBatch's parts: the step's rows (and token ids) into runner `index`'s
  // staging, returning the token count; the admission estimate's cost of a
  // successful step; stats and metrics; each request's answer.
  int64_t StageBatch(size_t index, const Batch& batch,
                     std::vector<int64_t>* ends);
  void RecordStepCost(Clock::time_point start, int64_t n);
  void RecordStep(const Batch& batch, const absl::Status& s,
                  const StepRunner::Output& out, int64_t layer, int64_t n,
                  Clock::time_point start);
  void Answer(Batch& batch, const absl::Status& s,
              const StepRunner::Output& out, int64_t n,
              Clock::time_point start);

  Options options_;
  std::vector<std::unique_ptr<StepRunner>> runners_;
  ExpertStatsBook* stats_;
  RouterMetrics* metrics_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::unique_ptr<BatchRequest>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  // Seconds per token of the last kRecentSteps successful steps (a ring),
  // and their minimum, for Admit.
  static constexpr size_t kRecentSteps = 64;
  std::vector<double> recent_seconds_per_token_ ABSL_GUARDED_BY(mu_);
  size_t recent_next_ ABSL_GUARDED_BY(mu_) = 0;
  double min_seconds_per_token_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  int steps_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
  // Scratch for SelectBatch.
  std::vector<QueuedRequestView> views_ ABSL_GUARDED_BY(mu_);
  // Per runner, reused by every step it runs: the step's rows (each
  // request decoded straight from its message) and its output. Steady
  // steps allocate neither.
  std::vector<std::vector<float>> staging_;
  std::vector<std::vector<int64_t>> token_ids_;  // per runner, like staging_
  std::vector<StepRunner::Output> outputs_;
};

}  // namespace moe
