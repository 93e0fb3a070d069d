#include "server/batcher.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

Batcher::Batcher(Options options,
                 std::vector<std::unique_ptr<StepRunner>> runners,
                 ExpertStatsBook* stats, RouterMetrics* metrics)
    : options_(options),
      runners_(std::move(runners)),
      stats_(stats),
      metrics_(metrics) {
  staging_.resize(runners_.size());
  for (size_t i = 0; i < runners_.size(); ++i) {
    threads_.emplace_back([this, i] { Loop(i); });
  }
}

Batcher::~Batcher() { Shutdown(); }

bool Batcher::Submit(std::unique_ptr<BatchRequest> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return false;
    queue_.push_back(std::move(request));
  }
  cv_.notify_all();
  return true;
}

size_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Batcher::Shutdown() {
  std::deque<std::unique_ptr<BatchRequest>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_ && threads_.empty()) return;
    shutdown_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  BatchResult none;
  for (auto& r : left)
    r->done(absl::UnavailableError("router shutting down"), none);
}

std::vector<std::unique_ptr<BatchRequest>> Batcher::TakeBatch(
    std::unique_lock<std::mutex>& lock) {
  std::vector<std::unique_ptr<BatchRequest>> batch;
  while (!shutdown_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    // The oldest request picks the layer; wait for company until its
    // window closes or the step is full.
    const int64_t layer = queue_.front()->layer;
    const Clock::time_point close = queue_.front()->arrival + options_.window;
    int64_t tokens = 0;
    for (const auto& r : queue_) {
      if (r->layer == layer) tokens += r->x.rows;
    }
    if (tokens < options_.max_batch_tokens && Clock::now() < close) {
      cv_.wait_until(lock, close);
      continue;
    }
    tokens = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->layer == layer &&
          (batch.empty() ||
           tokens + (*it)->x.rows <= options_.max_batch_tokens)) {
        tokens += (*it)->x.rows;
        batch.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    break;
  }
  return batch;
}

void Batcher::Loop(size_t index) {
  while (true) {
    std::vector<std::unique_ptr<BatchRequest>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      batch = TakeBatch(lock);
    }
    if (batch.empty()) return;  // shutting down
    // Another thread may be able to start the next batch now.
    cv_.notify_all();
    RunBatch(index, batch);
  }
}

void Batcher::RunBatch(size_t index,
                       std::vector<std::unique_ptr<BatchRequest>>& batch) {
  StepRunner& runner = *runners_[index];
  const Clock::time_point start = Clock::now();
  BatchResult none;
  // Requests whose client gave up while queued cost no work.
  std::erase_if(batch, [&](std::unique_ptr<BatchRequest>& r) {
    if (r->deadline > start) return false;
    r->done(absl::DeadlineExceededError(absl::StrCat(
                "request waited ",
                static_cast<int64_t>(Micros(start - r->arrival) / 1000),
                " ms in the queue, past its deadline")),
            none);
    return true;
  });
  if (batch.empty()) return;
  const int64_t layer = batch.front()->layer;
  const int64_t H = batch.front()->x.cols;
  std::vector<int64_t> ends;
  int64_t n = 0;
  for (const auto& r : batch) {
    n += r->x.rows;
    ends.push_back(n);
  }
  std::vector<float>& x = staging_[index];
  x.resize(n * H);
  int64_t at = 0;
  for (const auto& r : batch) {
    std::memcpy(x.data() + at * H, r->x.data.data(),
                r->x.data.size() * sizeof(float));
    at += r->x.rows;
  }
  StepRunner::Output out;
  const absl::Status s =
      runner.Run(layer, x.data(), n, ends, start + options_.step_timeout, &out);
  if (s.ok() && stats_ != nullptr) {
    stats_->Record(layer, out.routing.expert_counts, n, out.routing.dropped);
  }
  if (metrics_ != nullptr) {
    for (const auto& r : batch)
      metrics_->Queued(Micros(start - r->arrival) / 1e6);
    if (s.ok()) {
      metrics_->Step(n, static_cast<int>(batch.size()), out.times);
      if (stats_ != nullptr) {
        metrics_->Layer(layer, n, out.routing.dropped, stats_->Balance(layer));
      }
    }
  }
  int64_t begin = 0;
  for (auto& r : batch) {
    const int64_t rows = r->x.rows;
    BatchResult res;
    if (s.ok()) {
      res.y.assign(out.y.begin() + begin * H,
                   out.y.begin() + (begin + rows) * H);
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

}  // namespace moe
