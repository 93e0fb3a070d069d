#include "server/batcher.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/thread_slice.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

absl::Status Expired(const BatchRequest& r, Clock::time_point now) {
  return absl::DeadlineExceededError(absl::StrCat(
      "request waited ", static_cast<int64_t>(Micros(now - r.arrival) / 1000),
      " ms in the queue, past its deadline"));
}

}  // namespace

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

absl::Status Admit(int64_t tokens, int64_t queued_tokens,
                   int64_t max_queue_tokens, double seconds_per_token,
                   int parallel_steps, Clock::time_point now,
                   Clock::time_point deadline, const char** refusal_reason) {
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

Batcher::Batcher(Options options,
                 std::vector<std::unique_ptr<StepRunner>> runners,
                 ExpertStatsBook* stats, RouterMetrics* metrics)
    : options_(options),
      runners_(std::move(runners)),
      stats_(stats),
      metrics_(metrics) {
  staging_.resize(runners_.size());
  token_ids_.resize(runners_.size());
  outputs_.resize(runners_.size());
  for (size_t i = 0; i < runners_.size(); ++i) {
    threads_.emplace_back([this, i] { Loop(i); });
  }
}

Batcher::~Batcher() { Shutdown(); }

absl::Status Batcher::Submit(std::unique_ptr<BatchRequest> request) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("router shutting down");
    const int64_t tokens = request->x.rows;
    const char* reason = nullptr;
    absl::Status s =
        Admit(tokens, queued_tokens_, options_.max_queue_tokens,
              min_seconds_per_token_, static_cast<int>(runners_.size()),
              Clock::now(), request->deadline, &reason);
    if (!s.ok()) {
      if (metrics_ != nullptr && reason != nullptr) metrics_->Refused(reason);
      return s;
    }
    queue_.push_back(std::move(request));
    queued_tokens_ += tokens;
    if (metrics_ != nullptr) metrics_->QueueTokens(queued_tokens_);
  }
  cv_.SignalAll();
  return absl::OkStatus();
}

size_t Batcher::queued() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

int64_t Batcher::queued_tokens() const {
  absl::MutexLock lock(&mu_);
  return queued_tokens_;
}

void Batcher::Shutdown() {
  std::deque<std::unique_ptr<BatchRequest>> left;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_ && threads_.empty()) return;
    shutdown_ = true;
    left.swap(queue_);
    queued_tokens_ = 0;
    if (metrics_ != nullptr) metrics_->QueueTokens(0);
  }
  cv_.SignalAll();
  // Queued requests are answered now, not after the steps in flight.
  BatchResult none;
  for (auto& r : left)
    r->done(absl::UnavailableError("router shutting down"), none);
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Batcher::TakeFromQueueLocked(
    const BatchDecision& decision,
    std::vector<std::unique_ptr<BatchRequest>>* batch,
    std::vector<std::unique_ptr<BatchRequest>>* expired) {
  for (size_t i : decision.take) {
    queued_tokens_ -= queue_[i]->x.rows;
    batch->push_back(std::move(queue_[i]));
  }
  for (size_t i : decision.expired) {
    queued_tokens_ -= queue_[i]->x.rows;
    expired->push_back(std::move(queue_[i]));
  }
  std::erase(queue_, nullptr);
  if (metrics_ != nullptr) metrics_->QueueTokens(queued_tokens_);
}

void Batcher::Loop(size_t index) {
  const BatchPolicy policy{options_.max_batch_tokens, options_.window};
  mu_.Lock();
  while (!shutdown_) {
    const Clock::time_point now = Clock::now();
    views_.clear();
    for (const auto& r : queue_) {
      views_.push_back({r->layer, r->x.rows, r->arrival, r->deadline});
    }
    const BatchDecision d = SelectBatch(views_, now, policy, steps_in_flight_);
    if (d.take.empty() && d.expired.empty()) {
      if (d.wake_at) {
        cv_.WaitWithTimeout(&mu_, absl::FromChrono(*d.wake_at - Clock::now()));
      } else {
        cv_.Wait(&mu_);
      }
      continue;
    }
    std::vector<std::unique_ptr<BatchRequest>> batch, expired;
    TakeFromQueueLocked(d, &batch, &expired);
    if (!batch.empty()) ++steps_in_flight_;
    mu_.Unlock();
    // Another thread may be able to start the next batch now.
    if (!batch.empty()) cv_.SignalAll();
    // Requests whose client gave up while queued cost no work.
    BatchResult none;
    for (auto& r : expired) r->done(Expired(*r, now), none);
    if (!batch.empty()) {
      const ScopedThreadRole computing(ThreadRole::kCompute,
                                       ThreadRole::kLatency);
      RunBatch(index, batch);
    }
    mu_.Lock();
    if (!batch.empty()) {
      --steps_in_flight_;
      // Fewer steps in flight: a waiting thread may start at once.
      cv_.SignalAll();
    }
  }
  mu_.Unlock();
}

int64_t Batcher::StageBatch(size_t index, const Batch& batch,
                            std::vector<int64_t>* ends) {
  const int64_t H = batch.front()->x.cols;
  int64_t n = 0;
  for (const auto& r : batch) {
    n += r->x.rows;
    ends->push_back(n);
  }
  std::vector<float>& x = staging_[index];
  if (x.size() < static_cast<size_t>(n * H)) x.resize(n * H);
  int64_t at = 0;
  for (const auto& r : batch) {
    DecodeRows(r->x, 0, r->x.rows, x.data() + at * H);
    at += r->x.rows;
  }
  // Token ids ride with their rows; a request without them (a layer that
  // is not hash-routed ignores them) contributes zeros.
  std::vector<int64_t>& ids = token_ids_[index];
  ids.clear();
  const bool any_ids =
      std::any_of(batch.begin(), batch.end(),
                  [](const auto& r) { return !r->token_ids.empty(); });
  if (any_ids) {
    for (const auto& r : batch) {
      if (r->token_ids.empty()) {
        ids.insert(ids.end(), r->x.rows, 0);
      } else {
        ids.insert(ids.end(), r->token_ids.begin(), r->token_ids.end());
      }
    }
  }
  return n;
}

void Batcher::RecordStepCost(Clock::time_point start, int64_t n) {
  // The admission estimate's per-token cost of recent steps.
  const double per_token =
      std::chrono::duration<double>(Clock::now() - start).count() /
      static_cast<double>(n);
  absl::MutexLock lock(&mu_);
  if (recent_seconds_per_token_.size() < kRecentSteps) {
    recent_seconds_per_token_.push_back(per_token);
  } else {
    recent_seconds_per_token_[recent_next_] = per_token;
    recent_next_ = (recent_next_ + 1) % kRecentSteps;
  }
  min_seconds_per_token_ = *std::min_element(recent_seconds_per_token_.begin(),
                                             recent_seconds_per_token_.end());
}

void Batcher::RecordStep(const Batch& batch, const absl::Status& s,
                         const StepRunner::Output& out, int64_t layer,
                         int64_t n, Clock::time_point start) {
  if (s.ok() && stats_ != nullptr) {
    stats_->Record(layer, out.routing.expert_counts, n, out.routing.dropped,
                   out.worker_rows);
  }
  if (metrics_ == nullptr) return;
  for (const auto& r : batch)
    metrics_->Queued(Micros(start - r->arrival) / 1e6);
  if (!s.ok()) return;
  metrics_->Step(n, static_cast<int>(batch.size()), out.times);
  if (stats_ != nullptr) {
    metrics_->Layer(layer, n, out.routing.dropped, stats_->Balance(layer));
    if (!out.worker_rows.empty()) {
      metrics_->WorkerRows(layer, out.worker_rows,
                           stats_->WorkerImbalance(layer));
    }
  }
}

void Batcher::Answer(Batch& batch, const absl::Status& s,
                     const StepRunner::Output& out, int64_t n,
                     Clock::time_point start) {
  const int64_t H = batch.front()->x.cols;
  int64_t begin = 0;
  for (auto& r : batch) {
    const int64_t rows = r->x.rows;
    BatchResult res;
    if (s.ok()) {
      res.y = absl::MakeConstSpan(out.y).subspan(begin * H, rows * H);
      const int64_t S = out.routing.slots;
      res.routing.tokens = rows;
      res.routing.slots = S;
      res.routing.expert.assign(
          out.routing.expert.begin() + begin * S,
          out.routing.expert.begin() + (begin + rows) * S);
      res.routing.weight.assign(
          out.routing.weight.begin() + begin * S,
          out.routing.weight.begin() + (begin + rows) * S);
      res.times = out.times;
      res.queue_us = Micros(start - r->arrival);
      res.batch_tokens = n;
      res.batch_requests = static_cast<int>(batch.size());
    }
    r->done(s, res);
    begin += rows;
  }
}

void Batcher::RunBatch(size_t index, Batch& batch) {
  StepRunner& runner = *runners_[index];
  const Clock::time_point start = Clock::now();
  const int64_t layer = batch.front()->layer;
  std::vector<int64_t> ends;
  const int64_t n = StageBatch(index, batch, &ends);
  StepRunner::Output& out = outputs_[index];
  // bf16 through and through: nothing finer than bf16 is wanted back.
  const bool bf16 =
      options_.bf16_steps &&
      std::all_of(batch.begin(), batch.end(), [](const auto& r) {
        return r->x.dtype == DType::kBF16 && r->output_dtype == DType::kBF16;
      });
  const absl::Status s =
      runner.Run(layer, staging_[index].data(), n, ends, bf16,
                 start + options_.step_timeout, &out, token_ids_[index]);
  if (s.ok() && n > 0) RecordStepCost(start, n);
  RecordStep(batch, s, out, layer, n, start);
  Answer(batch, s, out, n, start);
}

}  // namespace moe
