#include "server/router_metrics.h"

#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
}

prometheus::Histogram::BucketBoundaries CountBuckets(double max) {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1; v <= max; v *= 2) b.push_back(v);
  return b;
}

RouterMetrics::RouterMetrics(prometheus::Registry& r)
    : requests_(prometheus::BuildCounter()
                    .Name("moe_requests_total")
                    .Help("Finished requests by method and gRPC status code")
                    .Register(r)),
      latency_(prometheus::BuildHistogram()
                   .Name("moe_request_duration_seconds")
                   .Help("End-to-end request latency in the router")
                   .Register(r)),
      queue_(prometheus::BuildHistogram()
                 .Name("moe_queue_duration_seconds")
                 .Help("Time requests wait in the batcher")
                 .Register(r)
                 .Add({}, LatencyBuckets())),
      step_tokens_(prometheus::BuildHistogram()
                       .Name("moe_step_tokens")
                       .Help("Tokens per step")
                       .Register(r)
                       .Add({}, CountBuckets(65536))),
      step_requests_(prometheus::BuildHistogram()
                         .Name("moe_step_requests")
                         .Help("Requests batched into one step")
                         .Register(r)
                         .Add({}, CountBuckets(4096))),
      stages_(prometheus::BuildHistogram()
                  .Name("moe_stage_duration_seconds")
                  .Help("Time of each stage of a step: route, plan, dispatch, "
                        "experts, combine, shared, step")
                  .Register(r)),
      inflight_(prometheus::BuildGauge()
                    .Name("moe_inflight_requests")
                    .Help("Requests accepted and not yet answered")
                    .Register(r)
                    .Add({})),
      workers_wanted_(prometheus::BuildGauge()
                          .Name("moe_workers_expected")
                          .Help("Expert workers the router runs with (P)")
                          .Register(r)
                          .Add({})),
      workers_connected_(prometheus::BuildGauge()
                             .Name("moe_workers_connected")
                             .Help("Expert workers connected")
                             .Register(r)
                             .Add({})),
      workers_ready_(prometheus::BuildGauge()
                         .Name("moe_workers_ready")
                         .Help("Expert workers ready in the current generation")
                         .Register(r)
                         .Add({})),
      generation_(
          prometheus::BuildGauge()
              .Name("moe_worker_group_generation")
              .Help("Generation of the worker group (bumps on every regroup)")
              .Register(r)
              .Add({})),
      group_size_(prometheus::BuildGauge()
                      .Name("moe_worker_group_size")
                      .Help("World size of the current worker group: below "
                            "moe_workers_expected while degraded")
                      .Register(r)
                      .Add({})),
      layer_tokens_(prometheus::BuildCounter()
                        .Name("moe_layer_tokens_total")
                        .Help("Tokens routed per MoE layer")
                        .Register(r)),
      layer_dropped_(prometheus::BuildCounter()
                         .Name("moe_layer_dropped_slots_total")
                         .Help("Routing slots dropped by the capacity limit")
                         .Register(r)),
      layer_max_over_mean_(
          prometheus::BuildGauge()
              .Name("moe_layer_load_max_over_mean")
              .Help("Most loaded expert over the mean, since start "
                    "or the last stats reset")
              .Register(r)),
      layer_entropy_(
          prometheus::BuildGauge()
              .Name("moe_layer_load_entropy")
              .Help("Entropy of the expert load over ln(E); 1 = even")
              .Register(r)),
      queue_tokens_(prometheus::BuildGauge()
                        .Name("moe_queue_tokens")
                        .Help("Tokens waiting in the batcher's queue")
                        .Register(r)
                        .Add({})),
      worker_rows_(prometheus::BuildHistogram()
                       .Name("moe_worker_step_rows")
                       .Help("Rows each expert worker computes per step")
                       .Register(r)
                       .Add({}, CountBuckets(65536))),
      worker_max_over_mean_(
          prometheus::BuildGauge()
              .Name("moe_layer_worker_max_over_mean")
              .Help("Per step, the most loaded worker's rows over the mean "
                    "worker's, averaged since start or the last stats reset")
              .Register(r)),
      replicas_(prometheus::BuildGauge()
                    .Name("moe_layer_experts_by_replicas")
                    .Help("Experts of a layer with this many replicas in "
                          "the placement in force (--redundant-experts)")
                    .Register(r)),
      rebalances_(prometheus::BuildCounter()
                      .Name("moe_rebalances_total")
                      .Help("Live rebalances of the expert placement by "
                            "result (ok, failed)")
                      .Register(r)),
      rebalance_seconds_(prometheus::BuildHistogram()
                             .Name("moe_rebalance_duration_seconds")
                             .Help("Time of a live rebalance: placement, "
                                   "background loading, switch")
                             .Register(r)
                             .Add({}, LatencyBuckets())),
      refusals_(prometheus::BuildCounter()
                    .Name("moe_admission_refusals_total")
                    .Help("Requests refused at admission by reason: "
                          "queue_full (--max-queue-tokens), deadline (the "
                          "queue ahead outlasts the request's deadline)")
                    .Register(r)) {
  // Series present at zero from the start, so that rates and alert rules
  // see 0 rather than nothing until the first event.
  for (const char* reason : {"queue_full", "deadline"}) {
    refusals_.Add({{"reason", reason}});
  }
  for (const char* result : {"ok", "failed"}) {
    rebalances_.Add({{"result", result}});
  }
  for (const char* method : {"Forward", "ForwardStream"}) {
    for (grpc::StatusCode code :
         {grpc::StatusCode::OK, grpc::StatusCode::UNAVAILABLE,
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::INTERNAL}) {
      requests_.Add({{"method", method},
                     {"code", absl::StatusCodeToString(
                                  static_cast<absl::StatusCode>(code))}});
    }
  }
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
