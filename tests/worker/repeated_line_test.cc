#include "worker/repeated_line.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

using std::chrono::seconds;

TEST(RepeatedLineTest, RepeatsAreLeftOutAndCountedOncePerPeriod) {
  RepeatedLine log(seconds(10));
  const auto t0 = RepeatedLine::Clock::time_point{} + seconds(100);
  EXPECT_EQ(log.Next("gone", t0), "gone");
  EXPECT_EQ(log.Next("gone", t0 + seconds(1)), "");
  EXPECT_EQ(log.Next("gone", t0 + seconds(2)), "");
  EXPECT_EQ(log.Next("gone", t0 + seconds(12)),
            "gone (2 more like it in the last 12 s not logged)");
  EXPECT_EQ(log.Next("gone", t0 + seconds(13)), "");
  // Another line at once, saying what was left out before it.
  EXPECT_EQ(log.Next("refused", t0 + seconds(14)),
            "refused (the previous line came 1 more times, not logged)");
}

TEST(RepeatedLineTest, ResetLogsTheNextLineWhateverItIs) {
  RepeatedLine log(seconds(10));
  const auto t0 = RepeatedLine::Clock::time_point{} + seconds(100);
  EXPECT_EQ(log.Next("gone", t0), "gone");
  log.Reset();
  EXPECT_EQ(log.Next("gone", t0 + seconds(1)), "gone");
}

}  // namespace
}  // namespace moe
