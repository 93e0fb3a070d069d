// The router's Prometheus metrics. Per-expert counts stay in GetExpertStats;
// labels here are bounded (method, status code, stage, layer, replica
// count).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "engine/placement.h"
#include "engine/stage_times.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/step/expert_stats.h"

namespace moe {

class RouterMetrics {
 public:
  explicit RouterMetrics(prometheus::Registry& registry);

  void RequestStarted();
  // Requests started and not yet done (moe_inflight_requests).
  double inflight() const { return inflight_.Value(); }
  void RequestDone(const std::string& method, grpc::StatusCode code,
                   double seconds);
  void Queued(double seconds);
  void Step(int64_t tokens, int requests, const StageTimes& times);
  void Workers(int world_size, int connected, int ready, uint64_t generation);
  // Reports the current generation's world size (below expected while
  // degraded).
  void Group(int world_size);
  void Layer(int64_t layer, int64_t tokens, int64_t dropped,
             const LoadBalance& balance);
  // Records expert parallelism: each worker's rows of one step of `layer`, and
  // the most loaded worker over the mean, averaged over the layer's steps.
  void WorkerRows(int64_t layer, absl::Span<const int64_t> rows,
                  double max_over_mean);
  // Reports the placement in force: experts by replica count, per layer.
  void Placement(const ExpertPlacement& placement, int64_t num_experts);
  // Records a live rebalance, done or failed, and how long it took.
  void Rebalanced(bool ok, double seconds);
  // Reports the tokens waiting in the batcher's queue.
  void QueueTokens(int64_t tokens);
  // Counts a request refused at admission; `reason` is queue_full or deadline.
  void Refused(const char* reason);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Histogram& queue_;
  prometheus::Histogram& step_tokens_;
  prometheus::Histogram& step_requests_;
  prometheus::Family<prometheus::Histogram>& stages_;
  prometheus::Gauge& inflight_;
  prometheus::Gauge& workers_wanted_;
  prometheus::Gauge& workers_connected_;
  prometheus::Gauge& workers_ready_;
  prometheus::Gauge& generation_;
  prometheus::Gauge& group_size_;
  prometheus::Family<prometheus::Counter>& layer_tokens_;
  prometheus::Family<prometheus::Counter>& layer_dropped_;
  prometheus::Family<prometheus::Gauge>& layer_max_over_mean_;
  prometheus::Family<prometheus::Gauge>& layer_entropy_;
  prometheus::Gauge& queue_tokens_;
  prometheus::Histogram& worker_rows_;
  prometheus::Family<prometheus::Gauge>& worker_max_over_mean_;
  prometheus::Family<prometheus::Gauge>& replicas_;
  prometheus::Family<prometheus::Counter>& rebalances_;
  prometheus::Histogram& rebalance_seconds_;
  prometheus::Family<prometheus::Counter>& refusals_;
};

}  // namespace moe
