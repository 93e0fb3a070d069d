// A worker's metrics as /metrics shows them: steps by outcome, the stages
// and rows of the steps that succeeded only, and its place in the group.
#include "worker/worker_metrics.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testutil/metric_text.h"

namespace moe {
namespace {

using testing::MetricsText;
using testing::MetricValue;

TEST(WorkerMetrics, StepsByOutcomeAndTheStagesOfGoodOnes) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  std::string text = MetricsText(registry);
  // Present at zero before any step.
  EXPECT_EQ(MetricValue(text, R"(moe_worker_steps_total{code="OK"})"), 0);
  EXPECT_EQ(MetricValue(text, R"(moe_worker_steps_total{code="UNAVAILABLE"})"),
            0);

  WorkerStageTimes t;
  t.decode_us = 100;
  t.gather_us = 200;
  t.dispatch_wait_us = 300;
  t.experts_us = 400;
  t.combine_wait_us = 500;
  t.sum_us = 600;
  t.step_us = 2500;
  metrics.Step(absl::StatusCode::kOk, t, 12);
  metrics.Step(absl::StatusCode::kUnavailable, t, 99);
  text = MetricsText(registry);
  EXPECT_EQ(MetricValue(text, R"(moe_worker_steps_total{code="OK"})"), 1);
  EXPECT_EQ(MetricValue(text, R"(moe_worker_steps_total{code="UNAVAILABLE"})"),
            1);
  for (auto [stage, seconds] : {std::pair{"decode", 100e-6},
                                {"gather", 200e-6},
                                {"dispatch_wait", 300e-6},
                                {"experts", 400e-6},
                                {"combine_wait", 500e-6},
                                {"sum", 600e-6},
                                {"step", 2500e-6}}) {
    const std::string labels = absl::StrCat("{stage=\"", stage, "\"}");
    EXPECT_EQ(
        MetricValue(text, "moe_worker_stage_duration_seconds_count" + labels),
        1)
        << stage;
    EXPECT_NEAR(
        MetricValue(text, "moe_worker_stage_duration_seconds_sum" + labels),
        seconds, 1e-12)
        << stage;
  }
  // Only the good step's rows.
  EXPECT_EQ(MetricValue(text, "moe_worker_expert_rows_count"), 1);
  EXPECT_EQ(MetricValue(text, "moe_worker_expert_rows_sum"), 12);
}

TEST(WorkerMetrics, PlaceInTheGroup) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  metrics.Group(2, 3, 7, true);
  std::string text = MetricsText(registry);
  EXPECT_EQ(MetricValue(text, "moe_worker_rank"), 2);
  EXPECT_EQ(MetricValue(text, "moe_worker_world_size"), 3);
  EXPECT_EQ(MetricValue(text, "moe_worker_group_generation"), 7);
  EXPECT_EQ(MetricValue(text, "moe_worker_ready"), 1);
  metrics.Group(0, 3, 8, false);
  text = MetricsText(registry);
  EXPECT_EQ(MetricValue(text, "moe_worker_ready"), 0);
  EXPECT_EQ(MetricValue(text, "moe_worker_group_generation"), 8);
}

}  // namespace
}  // namespace moe
