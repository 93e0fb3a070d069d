// The router's metrics as /metrics shows them: requests by method and code
// with the in-flight gauge, a step's stages, per-layer load, the placement
// by replica count (stale counts zeroed), rebalances and refusals.
#include "server/step/router_metrics.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testutil/metric_text.h"

namespace moe {
namespace {

using testing::MetricsText;
using testing::MetricValue;

TEST(RouterMetrics, RequestsByMethodAndCodeAndInFlight) {
  prometheus::Registry registry;
  RouterMetrics m(registry);
  m.RequestStarted();
  m.RequestStarted();
  EXPECT_EQ(m.inflight(), 2);
  m.RequestDone("Forward", grpc::StatusCode::OK, 0.5);
  m.RequestDone("Forward", grpc::StatusCode::RESOURCE_EXHAUSTED, 0.25);
  EXPECT_EQ(m.inflight(), 0);
  const std::string text = MetricsText(registry);
  EXPECT_EQ(
      MetricValue(text, R"(moe_requests_total{code="OK",method="Forward"})"),
      1);
  EXPECT_EQ(
      MetricValue(
          text,
          R"(moe_requests_total{code="RESOURCE_EXHAUSTED",method="Forward"})"),
      1);
  EXPECT_EQ(
      MetricValue(
          text,
          R"(moe_request_duration_seconds_sum{code="OK",method="Forward"})"),
      0.5);
  EXPECT_EQ(MetricValue(text, "moe_inflight_requests"), 0);
}

TEST(RouterMetrics, StepStagesAndLayerLoad) {
  prometheus::Registry registry;
  RouterMetrics m(registry);
  StageTimes t;
  t.route_us = 1000;
  t.experts_us = 3000;
  t.total_us = 5000;
  m.Step(24, 3, t);
  LoadBalance b;
  b.max_over_mean = 1.5;
  b.normalized_entropy = 0.75;
  m.Layer(2, 24, 4, b);
  m.Layer(2, 8, 0, b);
  const std::string text = MetricsText(registry);
  EXPECT_EQ(MetricValue(text, "moe_step_tokens_sum"), 24);
  EXPECT_EQ(MetricValue(text, "moe_step_requests_sum"), 3);
  EXPECT_NEAR(
      MetricValue(text, R"(moe_stage_duration_seconds_sum{stage="route"})"),
      0.001, 1e-12);
  EXPECT_NEAR(
      MetricValue(text, R"(moe_stage_duration_seconds_sum{stage="experts"})"),
      0.003, 1e-12);
  EXPECT_NEAR(
      MetricValue(text, R"(moe_stage_duration_seconds_sum{stage="step"})"),
      0.005, 1e-12);
  EXPECT_EQ(MetricValue(text, R"(moe_layer_tokens_total{layer="2"})"), 32);
  EXPECT_EQ(MetricValue(text, R"(moe_layer_dropped_slots_total{layer="2"})"),
            4);
  EXPECT_EQ(MetricValue(text, R"(moe_layer_load_max_over_mean{layer="2"})"),
            1.5);
  EXPECT_EQ(MetricValue(text, R"(moe_layer_load_entropy{layer="2"})"), 0.75);
}

TEST(RouterMetrics, PlacementByReplicaCountReplacesTheLastOne) {
  prometheus::Registry registry;
  RouterMetrics m(registry);
  // Four experts in six slots: experts 0 and 3 twice.
  ExpertPlacement p;
  p.redundant = 2;
  p.layers[0].workers = {{0, 1, 3}, {2, 3, 0}};
  m.Placement(p, 4);
  std::string text = MetricsText(registry);
  const auto experts = [&](const char* replicas) {
    return MetricValue(
        text,
        absl::StrCat(R"(moe_layer_experts_by_replicas{layer="0",replicas=")",
                     replicas, "\"}"));
  };
  EXPECT_EQ(experts("1"), 2);
  EXPECT_EQ(experts("2"), 2);
  EXPECT_EQ(experts("3"), 0);
  // Expert 0 now three times: the two-replica count drops, not lingers.
  p.layers[0].workers = {{0, 1, 0}, {2, 3, 0}};
  m.Placement(p, 4);
  text = MetricsText(registry);
  EXPECT_EQ(experts("1"), 3);
  EXPECT_EQ(experts("2"), 0);
  EXPECT_EQ(experts("3"), 1);
}

TEST(RouterMetrics, RebalancesAndRefusals) {
  prometheus::Registry registry;
  RouterMetrics m(registry);
  m.Rebalanced(true, 2.0);
  m.Rebalanced(false, 9.0);
  m.Refused("queue_full");
  m.Refused("queue_full");
  m.Refused("deadline");
  m.QueueTokens(640);
  const std::string text = MetricsText(registry);
  EXPECT_EQ(MetricValue(text, R"(moe_rebalances_total{result="ok"})"), 1);
  EXPECT_EQ(MetricValue(text, R"(moe_rebalances_total{result="failed"})"), 1);
  // Only a rebalance that happened has a duration.
  EXPECT_EQ(MetricValue(text, "moe_rebalance_duration_seconds_sum"), 2.0);
  EXPECT_EQ(
      MetricValue(text, R"(moe_admission_refusals_total{reason="queue_full"})"),
      2);
  EXPECT_EQ(
      MetricValue(text, R"(moe_admission_refusals_total{reason="deadline"})"),
      1);
  EXPECT_EQ(MetricValue(text, "moe_queue_tokens"), 640);
}

}  // namespace
}  // namespace moe
