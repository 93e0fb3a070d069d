// Dynamic batching: concurrent requests for the same layer are packed into
// one step (up to max_batch_tokens, waiting at most `window` for company
// while other steps are in flight), and up to one step per runner is in
// flight at once, so the router's routing of the next step overlaps the
// workers' compute of this one. The Batcher is the glue of its parts: the
// RequestQueue (admission, deadlines, SelectBatch) hands each step thread
// its requests, BatchStaging puts their rows together, the thread's
// StepRunner runs the step, and AnswerBatch hands each request its share;
// the Batcher records the step in the stats and metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/serving_defaults.h"
#include "server/batching/batch_request.h"
#include "server/batching/batch_selection.h"
#include "server/batching/batch_staging.h"
#include "server/batching/request_queue.h"
#include "server/step/expert_stats.h"
#include "server/step/group_readiness.h"
#include "server/step/router_metrics.h"
#include "server/step/step_runner.h"

namespace moe {

class Batcher {
 public:
  struct Options {
    int64_t max_batch_tokens = kDefaultMaxBatchTokens;
    std::chrono::microseconds window{0};
    std::chrono::milliseconds step_timeout{kDefaultStepTimeoutMs};
    // Bounds the tokens queued (0: unbounded); Admit refuses requests beyond
    // it.
    int64_t max_queue_tokens = 0;
    // A step whose requests all want bf16 answers (and send bf16) gets the
    // workers' answers in bf16 where that is lossless for the client
    // (StepRunner::Run's bf16_out); false: always fp32.
    bool bf16_steps = true;
    // Points to the worker group's readiness (null: no workers, always ready).
    // A request is refused while the group is not ready, unless steps wait for
    // it (--hold-while-regrouping-ms).
    const GroupReadiness* readiness = nullptr;
  };
  // One runner (and one step thread) per step allowed in flight.
  // `stats` and `metrics` may be null.
  Batcher(Options options, std::vector<std::unique_ptr<StepRunner>> runners,
          ExpertStatsBook* stats, RouterMetrics* metrics);
  ~Batcher();

  // Queues the request, or refuses it at once (and `done` is not called):
  // UNAVAILABLE while the group is not ready (Options::readiness) or once
  // shutting down, RESOURCE_EXHAUSTED when Admit says so.
  absl::Status Submit(std::unique_ptr<BatchRequest> request);
  // Fails queued requests with UNAVAILABLE (on the calling thread, without
  // waiting for the steps in flight), then joins the step threads once
  // their steps have answered.
  void Shutdown();
  size_t queued() const { return queue_.size(); }
  int64_t queued_tokens() const { return queue_.tokens(); }

 private:
  using Clock = std::chrono::steady_clock;
  // Runs step thread `index`, which takes batches from the queue until it
  // closes.
  void Loop(size_t index);
  void RunBatch(size_t index, Batch& batch);
  // Records the step in the expert stats and the metrics.
  void RecordStep(const Batch& batch, const absl::Status& s,
                  const StepRunner::Output& out, int64_t layer, int64_t n,
                  Clock::time_point start);

  const Options options_;
  std::vector<std::unique_ptr<StepRunner>> runners_;
  ExpertStatsBook* const stats_;
  RouterMetrics* const metrics_;
  RequestQueue queue_;
  // Holds each runner's staged rows and output, reused by every step it runs so
  // that a step does not allocate.
  std::vector<BatchStaging> staging_;
  std::vector<StepRunner::Output> outputs_;
  std::vector<std::thread> threads_;
};

}  // namespace moe
