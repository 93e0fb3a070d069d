// Which queued requests the next step takes (SelectBatch), and whether a
// new request may queue at all (Admit): pure functions of the queue's view
// and the clock, so that the batching policy is tested without threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/serving_defaults.h"

namespace moe {

// Holds what batch selection looks at of one queued request.
struct QueuedRequestView {
  int64_t layer = 0;
  int64_t tokens = 0;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point deadline;
};

struct BatchPolicy {
  int64_t max_batch_tokens = kDefaultMaxBatchTokens;
  // Bounds how long the oldest queued request may wait for others to share its
  // step; 0 means it does not wait.
  std::chrono::microseconds window{0};
};

struct BatchDecision {
  // Lists the queue positions (ascending, i.e. FIFO) of the requests the next
  // step takes; empty when no step should start now.
  std::vector<size_t> take;
  // Lists the queue positions (ascending) of requests whose deadline has
  // passed: they leave the queue and are answered DEADLINE_EXCEEDED without any
  // work.
  std::vector<size_t> expired;
  // Says, when `take` is empty, when to decide again (nullopt: not before the
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

// Holds the queue as admission sees it: `queued_tokens` already queued, the
// bound `max_queue_tokens` (0: unbounded), `seconds_per_token` (the lowest
// per-token time of the recent steps, 0 = none yet: no estimate) and
// `parallel_steps` (steps that may run at once).
struct QueueLoad {
  int64_t queued_tokens = 0;
  int64_t max_queue_tokens = 0;
  double seconds_per_token = 0;
  int parallel_steps = 1;
};

// Decides the admission of a request of `tokens` behind `queue` (before any
// work): RESOURCE_EXHAUSTED naming the limit when the queue would pass
// max_queue_tokens, or when the queue ahead cannot be worked off before
// `deadline`. That estimate is deliberately simple and errs toward admitting:
// queued tokens x seconds_per_token / parallel_steps; the request's own step is
// not counted. A request admitted on a wrong guess still leaves the queue
// DEADLINE_EXCEEDED, without any work, once its deadline passes.
// `refusal_reason` (may be null) gets "queue_full" or "deadline".
absl::Status Admit(int64_t tokens, const QueueLoad& queue,
                   std::chrono::steady_clock::time_point now,
                   std::chrono::steady_clock::time_point deadline,
                   const char** refusal_reason = nullptr);

}  // namespace moe
