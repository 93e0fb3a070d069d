// moe-loadtest's arithmetic: token distributions, ranges, percentiles,
// status counts, histogram totals.
#include "client/loadtest/report.h"
#include "gtest/gtest.h"

namespace moe::loadtest {
namespace {

TEST(TokenDistribution, Forms) {
  std::mt19937_64 rng(1);
  auto fixed = TokenDistribution::Parse("8");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(fixed->Sample(rng), 8);
  auto range = TokenDistribution::Parse("2:5");
  ASSERT_TRUE(range.ok());
  for (int i = 0; i < 100; ++i) {
    const int64_t v = range->Sample(rng);
    EXPECT_TRUE(v >= 2 && v <= 5);
  }
  auto list = TokenDistribution::Parse("1,64");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->max(), 64);
  for (const char* bad : {"", "x", "5:2", "-1", "1,,2", "1:2:3"}) {
    EXPECT_FALSE(TokenDistribution::Parse(bad).ok()) << bad;
  }
  EXPECT_EQ(*ParseRange("1:7:3"), (std::vector<int>{1, 4, 7}));
  EXPECT_FALSE(ParseRange("0:4").ok());
}

TEST(Report, PercentilesAndCounts) {
  RunSpec spec;
  spec.concurrency = 4;
  RunResult run;
  run.seconds = 2;
  for (int i = 1; i <= 100; ++i) run.samples.push_back({double(i), 0, 10, {}});
  run.samples.push_back({500, 14, 10, {}});  // an UNAVAILABLE
  const Summary s = Summarize(run, spec);
  EXPECT_EQ(s.requests, 101);
  EXPECT_EQ(s.ok, 100);
  EXPECT_EQ(s.errors, 1);
  EXPECT_EQ(s.codes.at("OK"), 100);
  EXPECT_EQ(s.codes.at("UNAVAILABLE"), 1);
  EXPECT_DOUBLE_EQ(s.p50_ms, 50);
  EXPECT_DOUBLE_EQ(s.p99_ms, 99);
  EXPECT_DOUBLE_EQ(s.max_ms, 100);  // of successful requests
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 500);
  int64_t total = 0;
  for (const auto& [b, c] : s.histogram) total += c;
  EXPECT_EQ(total, 100);
  EXPECT_EQ(CsvRow(s).substr(0, 2), "4,");
  EXPECT_NE(FormatText(s).find("UNAVAILABLE=1"), std::string::npos);
}

}  // namespace
}  // namespace moe::loadtest
