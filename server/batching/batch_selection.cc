#include "server/batching/batch_selection.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe {

using Clock = std::chrono::steady_clock;

BatchDecision SelectBatch(absl::Span<const QueuedRequestView> queue,
                          Clock::time_point now, const BatchPolicy& policy,
                          int steps_in_flight) {
  BatchDecision d;
  // The oldest live request picks the layer.
  size_t first = queue.size();
  std::optional<Clock::time_point> earliest_deadline;
  int64_t layer_tokens = 0;
  for (size_t i = 0; i < queue.size(); ++i) {
    const QueuedRequestView& r = queue[i];
    if (r.deadline <= now) {
      d.expired.push_back(i);
      continue;
    }
    if (!earliest_deadline || r.deadline < *earliest_deadline) {
      earliest_deadline = r.deadline;
    }
    if (first == queue.size()) first = i;
    if (r.layer == queue[first].layer) layer_tokens += r.tokens;
  }
  if (first == queue.size()) return d;  // nothing live: wait for a request
  const Clock::time_point close = queue[first].arrival + policy.window;
  const bool start = steps_in_flight == 0 ||
                     layer_tokens >= policy.max_batch_tokens || now >= close;
  if (!start) {
    d.wake_at = std::min(close, *earliest_deadline);
    return d;
  }
  const int64_t layer = queue[first].layer;
  int64_t tokens = 0;
  for (size_t i = first; i < queue.size(); ++i) {
    const QueuedRequestView& r = queue[i];
    if (r.deadline <= now || r.layer != layer) continue;
    if (!d.take.empty() && tokens + r.tokens > policy.max_batch_tokens) {
      continue;
    }
    tokens += r.tokens;
    d.take.push_back(i);
  }
  return d;
}

absl::Status Admit(int64_t tokens, const QueueLoad& queue,
                   Clock::time_point now, Clock::time_point deadline,
                   const char** refusal_reason) {
  const int64_t queued_tokens = queue.queued_tokens;
  const int64_t max_queue_tokens = queue.max_queue_tokens;
  const double seconds_per_token = queue.seconds_per_token;
  const int parallel_steps = queue.parallel_steps;
  if (max_queue_tokens > 0 && tokens > 0 &&
      queued_tokens + tokens > max_queue_tokens) {
    if (refusal_reason != nullptr) *refusal_reason = "queue_full";
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", queued_tokens, " tokens queued, ", tokens,
                     " more would pass --max-queue-tokens ", max_queue_tokens,
                     "; retry later"));
  }
  if (seconds_per_token > 0 && queued_tokens > 0) {
    const double wait_s = static_cast<double>(queued_tokens) *
                          seconds_per_token / std::max(parallel_steps, 1);
    const double left_s = std::chrono::duration<double>(deadline - now).count();
    if (wait_s > left_s) {
      if (refusal_reason != nullptr) *refusal_reason = "deadline";
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot meet the deadline: about ",
          static_cast<int64_t>(wait_s * 1000), " ms of queued work ahead (",
          queued_tokens, " tokens at ",
          static_cast<int64_t>(seconds_per_token * 1e6), " us per token), ",
          static_cast<int64_t>(std::max(left_s, 0.0) * 1000),
          " ms left; retry later or with a longer deadline"));
    }
  }
  return absl::OkStatus();
}

}  // namespace moe
