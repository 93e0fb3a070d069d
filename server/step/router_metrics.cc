#include "server/step/router_metrics.h"

#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/step/metric_families.h"

namespace moe {
namespace {

void AddZeroSeries(prometheus::Family<prometheus::Counter>& requests,
                   prometheus::Family<prometheus::Counter>& rebalances,
                   prometheus::Family<prometheus::Counter>& refusals) {
  // Series present at zero from the start, so that rates and alert rules
  // see 0 rather than nothing until the first event.
  for (const char* reason : {"queue_full", "deadline"}) {
    refusals.Add({{"reason", reason}});
  }
  for (const char* result : {"ok", "failed"}) {
    rebalances.Add({{"result", result}});
  }
  for (const char* method : {"Forward", "ForwardStream"}) {
    for (grpc::StatusCode code :
         {grpc::StatusCode::OK, grpc::StatusCode::UNAVAILABLE,
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::INTERNAL}) {
      requests.Add({{"method", method},
                    {"code", absl::StatusCodeToString(
                                 static_cast<absl::StatusCode>(code))}});
    }
  }
}

}  // namespace

RouterMetrics::RouterMetrics(prometheus::Registry& r)
    : requests_(Counters(r, "moe_requests_total",
                         "Finished requests by method and gRPC status code")),
      latency_(Histograms(r, "moe_request_duration_seconds",
                          "End-to-end request latency in the router")),
      queue_(OneHistogram(r, "moe_queue_duration_seconds",
                          "Time requests wait in the batcher",
                          LatencyBuckets())),
      step_tokens_(OneHistogram(r, "moe_step_tokens", "Tokens per step",
                                CountBuckets(65536))),
      step_requests_(OneHistogram(r, "moe_step_requests",
                                  "Requests batched into one step",
                                  CountBuckets(4096))),
      stages_(Histograms(r, "moe_stage_duration_seconds",
                         "Time of each stage of a step: route, plan, dispatch, "
                         "experts, combine, shared, step")),
      inflight_(OneGauge(r, "moe_inflight_requests",
                         "Requests accepted and not yet answered")),
      workers_wanted_(OneGauge(r, "moe_workers_expected",
                               "Expert workers the router runs with (P)")),
      workers_connected_(
          OneGauge(r, "moe_workers_connected", "Expert workers connected")),
      workers_ready_(
          OneGauge(r, "moe_workers_ready",
                   "Expert workers ready in the current generation")),
      generation_(
          OneGauge(r, "moe_worker_group_generation",
                   "Generation of the worker group (bumps on every regroup)")),
      group_size_(OneGauge(r, "moe_worker_group_size",
                           "World size of the current worker group: below "
                           "moe_workers_expected while degraded")),
      layer_tokens_(
          Counters(r, "moe_layer_tokens_total", "Tokens routed per MoE layer")),
      layer_dropped_(Counters(r, "moe_layer_dropped_slots_total",
                              "Routing slots dropped by the capacity limit")),
      layer_max_over_mean_(
          Gauges(r, "moe_layer_load_max_over_mean",
                 "Most loaded expert over the mean, since start "
                 "or the last stats reset")),
      layer_entropy_(Gauges(r, "moe_layer_load_entropy",
                            "Entropy of the expert load over ln(E); 1 = even")),
      queue_tokens_(OneGauge(r, "moe_queue_tokens",
                             "Tokens waiting in the batcher's queue")),
      worker_rows_(OneHistogram(r, "moe_worker_step_rows",
                                "Rows each expert worker computes per step",
                                CountBuckets(65536))),
      worker_max_over_mean_(
          Gauges(r, "moe_layer_worker_max_over_mean",
                 "Per step, the most loaded worker's rows over the mean "
                 "worker's, averaged since start or the last stats reset")),
      replicas_(Gauges(r, "moe_layer_experts_by_replicas",
                       "Experts of a layer with this many replicas in "
                       "the placement in force (--redundant-experts)")),
      rebalances_(Counters(r, "moe_rebalances_total",
                           "Live rebalances of the expert placement by "
                           "result (ok, failed)")),
      rebalance_seconds_(OneHistogram(r, "moe_rebalance_duration_seconds",
                                      "Time of a live rebalance: placement, "
                                      "background loading, switch",
                                      LatencyBuckets())),
      refusals_(Counters(r, "moe_admission_refusals_total",
                         "Requests refused at admission by reason: "
                         "queue_full (--max-queue-tokens), deadline (the "
                         "queue ahead outlasts the request's deadline)")) {
  AddZeroSeries(requests_, rebalances_, refusals_);
}

void RouterMetrics::RequestStarted() { inflight_.Increment(); }

void RouterMetrics::RequestDone(const std::string& method,
                                grpc::StatusCode code, double seconds) {
  inflight_.Decrement();
  const std::string code_name =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  requests_.Add({{"method", method}, {"code", code_name}}).Increment();
  // By code too: a refusal's time (RESOURCE_EXHAUSTED) is the router's cost
  // of saying no, which should stay far below an answer's.
  latency_.Add({{"method", method}, {"code", code_name}}, LatencyBuckets())
      .Observe(seconds);
}

void RouterMetrics::Queued(double seconds) { queue_.Observe(seconds); }

void RouterMetrics::Step(int64_t tokens, int requests, const StageTimes& t) {
  step_tokens_.Observe(static_cast<double>(tokens));
  step_requests_.Observe(requests);
  for (auto [name, us] : {std::pair{"route", t.route_us},
                          {"plan", t.plan_us},
                          {"dispatch", t.dispatch_us},
                          {"experts", t.experts_us},
                          {"combine", t.combine_us},
                          {"shared", t.shared_us},
                          {"step", t.total_us}}) {
    stages_.Add({{"stage", name}}, LatencyBuckets()).Observe(us / 1e6);
  }
}

void RouterMetrics::Workers(int world_size, int connected, int ready,
                            uint64_t generation) {
  workers_wanted_.Set(world_size);
  workers_connected_.Set(connected);
  workers_ready_.Set(ready);
  generation_.Set(static_cast<double>(generation));
}

void RouterMetrics::Group(int world_size) { group_size_.Set(world_size); }
void RouterMetrics::WorkerRows(int64_t layer, absl::Span<const int64_t> rows,
                               double max_over_mean) {
  for (int64_t n : rows) worker_rows_.Observe(static_cast<double>(n));
  worker_max_over_mean_.Add({{"layer", absl::StrCat(layer)}})
      .Set(max_over_mean);
}

void RouterMetrics::Placement(const ExpertPlacement& placement,
                              int64_t num_experts) {
  for (const auto& [layer, lp] : placement.layers) {
    std::map<int64_t, int64_t> by_count;
    const ReplicaMap m = MakeReplicaMap(lp, num_experts);
    // Every count a placement of this size can have, so that an earlier
    // placement's counts do not linger.
    for (int64_t c = 1; c <= m.physical - num_experts + 1; ++c) {
      by_count[c] = 0;
    }
    for (int64_t e = 0; e < num_experts; ++e) ++by_count[m.replicas(e)];
    for (const auto& [count, experts] : by_count) {
      replicas_
          .Add({{"layer", absl::StrCat(layer)},
                {"replicas", absl::StrCat(count)}})
          .Set(static_cast<double>(experts));
    }
  }
}

void RouterMetrics::Rebalanced(bool ok, double seconds) {
  rebalances_.Add({{"result", ok ? "ok" : "failed"}}).Increment();
  if (ok) rebalance_seconds_.Observe(seconds);
}

void RouterMetrics::Layer(int64_t layer, int64_t tokens, int64_t dropped,
                          const LoadBalance& b) {
  const prometheus::Labels labels = {{"layer", absl::StrCat(layer)}};
  layer_tokens_.Add(labels).Increment(static_cast<double>(tokens));
  layer_dropped_.Add(labels).Increment(static_cast<double>(dropped));
  layer_max_over_mean_.Add(labels).Set(b.max_over_mean);
  layer_entropy_.Add(labels).Set(b.normalized_entropy);
}

void RouterMetrics::QueueTokens(int64_t tokens) {
  queue_tokens_.Set(static_cast<double>(tokens));
}

void RouterMetrics::Refused(const char* reason) {
  refusals_.Add({{"reason", reason}}).Increment();
}

}  // namespace moe
