// Families registered by name and help as /metrics shows them, the One*
// forms' single unlabelled series, and the shared bucket boundaries.
#include "server/step/metric_families.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/metric_text.h"

namespace moe {
namespace {

using testing::MetricsText;
using testing::MetricValue;

TEST(MetricFamilies, CountBucketsArePowersOfTwoUpToMax) {
  EXPECT_EQ(CountBuckets(8), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(CountBuckets(10), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(CountBuckets(0.5), std::vector<double>{});
}

TEST(MetricFamilies, LatencyBucketsRiseFrom50MicrosecondsTo30Seconds) {
  const auto b = LatencyBuckets();
  ASSERT_EQ(b.size(), 18u);
  EXPECT_EQ(b.front(), 0.00005);
  EXPECT_EQ(b.back(), 30);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]) << i;
}

TEST(MetricFamilies, FamiliesCarryTheirNameAndHelp) {
  prometheus::Registry registry;
  Counters(registry, "c_total", "counted things")
      .Add({{"k", "v"}})
      .Increment(3);
  Gauges(registry, "g", "a level").Add({{"k", "w"}}).Set(2.5);
  Histograms(registry, "h_seconds", "a time")
      .Add({{"k", "x"}}, CountBuckets(4))
      .Observe(3);
  const std::string text = MetricsText(registry);
  EXPECT_NE(text.find("# HELP c_total counted things"), std::string::npos);
  EXPECT_NE(text.find("# TYPE c_total counter"), std::string::npos);
  EXPECT_NE(text.find("# HELP g a level"), std::string::npos);
  EXPECT_NE(text.find("# TYPE g gauge"), std::string::npos);
  EXPECT_NE(text.find("# HELP h_seconds a time"), std::string::npos);
  EXPECT_NE(text.find("# TYPE h_seconds histogram"), std::string::npos);
  EXPECT_EQ(MetricValue(text, R"(c_total{k="v"})"), 3);
  EXPECT_EQ(MetricValue(text, R"(g{k="w"})"), 2.5);
  EXPECT_EQ(MetricValue(text, R"(h_seconds_bucket{k="x",le="2"})"), 0);
  EXPECT_EQ(MetricValue(text, R"(h_seconds_bucket{k="x",le="4"})"), 1);
}

TEST(MetricFamilies, OneFormsHaveASingleUnlabelledSeries) {
  prometheus::Registry registry;
  OneGauge(registry, "level", "one level").Set(7);
  OneHistogram(registry, "wait_seconds", "one wait", {0.5, 1}).Observe(0.75);
  const std::string text = MetricsText(registry);
  EXPECT_NE(text.find("# HELP level one level"), std::string::npos);
  EXPECT_EQ(MetricValue(text, "level"), 7);
  EXPECT_EQ(MetricValue(text, R"(wait_seconds_bucket{le="0.5"})"), 0);
  EXPECT_EQ(MetricValue(text, R"(wait_seconds_bucket{le="1"})"), 1);
  EXPECT_EQ(MetricValue(text, "wait_seconds_count"), 1);
}

}  // namespace
}  // namespace moe
