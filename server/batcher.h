// Dynamic batching: concurrent requests for the same layer are packed into
// one step (up to max_batch_tokens, waiting at most `window` for company),
// and up to one step per runner is in flight at once, so the router's
// routing of the next step overlaps the workers' compute of this one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "proto/tensor_codec.h"
#include "server/expert_stats.h"
#include "server/router_metrics.h"
#include "server/step_runner.h"

namespace moe {

struct BatchResult {
  std::vector<float> y;  // this request's rows, [n, H]
  Routing routing;       // this request's tokens
  StageTimes times;      // of the step the request rode in
  double queue_us = 0;
  int64_t batch_tokens = 0;
  int batch_requests = 0;
};

struct BatchRequest {
  int64_t layer = 0;
  DecodedMatrix x;
  std::chrono::steady_clock::time_point arrival;
  std::chrono::steady_clock::time_point deadline;  // the client's
  // Called exactly once, on a batcher thread.
  std::function<void(const absl::Status&, BatchResult&)> done;
};

class Batcher {
 public:
  struct Options {
    int64_t max_batch_tokens = 4096;
    std::chrono::microseconds window{0};
    std::chrono::milliseconds step_timeout{10000};
  };
  // One runner per step allowed in flight.
  // `metrics` may be null.
  Batcher(Options options, std::vector<std::unique_ptr<StepRunner>> runners,
          ExpertStatsBook* stats, RouterMetrics* metrics);
  ~Batcher();

  // False (and `done` is not called) once shutting down.
  bool Submit(std::unique_ptr<BatchRequest> request);
  // Fails queued requests with UNAVAILABLE and joins the step threads.
  void Shutdown();
  size_t queued() const;

 private:
  void Loop(size_t index);
  std::vector<std::unique_ptr<BatchRequest>> TakeBatch(
      std::unique_lock<std::mutex>& lock);
  void RunBatch(size_t index,
                std::vector<std::unique_ptr<BatchRequest>>& batch);

  Options options_;
  std::vector<std::unique_ptr<StepRunner>> runners_;
  ExpertStatsBook* stats_;
  RouterMetrics* metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<BatchRequest>> queue_;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
  // Per-thread staging of the batch's rows.
  std::vector<std::vector<float>> staging_;
};

}  // namespace moe
