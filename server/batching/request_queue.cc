#include "server/batching/request_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status Expired(const BatchRequest& r, Clock::time_point now) {
  const double waited_us =
      std::chrono::duration<double, std::micro>(now - r.arrival).count();
  return absl::DeadlineExceededError(
      absl::StrCat("request waited ", static_cast<int64_t>(waited_us / 1000),
                   " ms in the queue, past its deadline"));
}

}  // namespace

RequestQueue::RequestQueue(Options options, RouterMetrics* metrics)
    : options_(options), metrics_(metrics) {}

absl::Status RequestQueue::Push(std::unique_ptr<BatchRequest> request) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("router shutting down");
    const int64_t tokens = request->x.rows;
    const char* reason = nullptr;
    absl::Status s = Admit(tokens,
                           {.queued_tokens = tokens_,
                            .max_queue_tokens = options_.max_queue_tokens,
                            .seconds_per_token = min_seconds_per_token_,
                            .parallel_steps = options_.parallel_steps},
                           Clock::now(), request->deadline, &reason);
    if (!s.ok()) {
      if (metrics_ != nullptr && reason != nullptr) metrics_->Refused(reason);
      return s;
    }
    queue_.push_back(std::move(request));
    tokens_ += tokens;
    if (metrics_ != nullptr) metrics_->QueueTokens(tokens_);
  }
  cv_.SignalAll();
  return absl::OkStatus();
}

std::optional<Batch> RequestQueue::Next() {
  for (;;) {
    Batch batch, expired;
    Clock::time_point now;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (closed_) return std::nullopt;
        now = Clock::now();
        views_.clear();
        for (const auto& r : queue_) {
          views_.push_back({r->layer, r->x.rows, r->arrival, r->deadline});
        }
        const BatchDecision d =
            SelectBatch(views_, now, options_.policy, steps_in_flight_);
        if (!d.take.empty() || !d.expired.empty()) {
          TakeLocked(d, &batch, &expired);
          break;
        }
        if (d.wake_at) {
          cv_.WaitWithTimeout(&mu_,
                              absl::FromChrono(*d.wake_at - Clock::now()));
        } else {
          cv_.Wait(&mu_);
        }
      }
      if (!batch.empty()) ++steps_in_flight_;
    }
    // Another thread may be able to start the next batch now.
    if (!batch.empty()) cv_.SignalAll();
    // Requests whose client gave up while queued cost no work.
    BatchResult none;
    for (auto& r : expired) r->done(Expired(*r, now), none);
    if (!batch.empty()) return batch;
  }
}

void RequestQueue::TakeLocked(const BatchDecision& decision, Batch* batch,
                              Batch* expired) {
  for (size_t i : decision.take) {
    tokens_ -= queue_[i]->x.rows;
    batch->push_back(std::move(queue_[i]));
  }
  for (size_t i : decision.expired) {
    tokens_ -= queue_[i]->x.rows;
    expired->push_back(std::move(queue_[i]));
  }
  std::erase(queue_, nullptr);
  if (metrics_ != nullptr) metrics_->QueueTokens(tokens_);
}

void RequestQueue::StepDone() {
  {
    absl::MutexLock lock(&mu_);
    --steps_in_flight_;
  }
  // Fewer steps in flight: a waiting thread may start at once.
  cv_.SignalAll();
}

void RequestQueue::RecordStepCost(double seconds_per_token) {
  absl::MutexLock lock(&mu_);
  if (recent_seconds_per_token_.size() < kRecentSteps) {
    recent_seconds_per_token_.push_back(seconds_per_token);
  } else {
    recent_seconds_per_token_[recent_next_] = seconds_per_token;
    recent_next_ = (recent_next_ + 1) % kRecentSteps;
  }
  min_seconds_per_token_ = *std::min_element(recent_seconds_per_token_.begin(),
                                             recent_seconds_per_token_.end());
}

void RequestQueue::Close() {
  std::deque<std::unique_ptr<BatchRequest>> left;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    left.swap(queue_);
    tokens_ = 0;
    if (metrics_ != nullptr) metrics_->QueueTokens(0);
  }
  cv_.SignalAll();
  // Queued requests are answered now, not after the steps in flight.
  BatchResult none;
  for (auto& r : left) {
    r->done(absl::UnavailableError("router shutting down"), none);
  }
}

size_t RequestQueue::size() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

int64_t RequestQueue::tokens() const {
  absl::MutexLock lock(&mu_);
  return tokens_;
}

}  // namespace moe
