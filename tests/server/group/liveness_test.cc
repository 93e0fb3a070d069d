// The watchdog's rules as a pure function: who is stalled and when to look
// again.
#include "server/group/liveness.h"

#include <chrono>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const LivenessPolicy kPolicy{milliseconds(50), 4};  // limit: 200 ms

TEST(LivenessTest, StalledOnlyAfterTheLimitAndOnlyWhenWatched) {
  const Clock::time_point now = Clock::now();
  const std::vector<std::optional<Clock::time_point>> seen = {
      now - milliseconds(200),  // at the limit: alive
      now - milliseconds(201),  // past it
      std::nullopt,             // not watched, however long silent
      now - milliseconds(5000),
      now,
  };
  const LivenessCheck check = CheckLiveness(seen, now, kPolicy);
  ASSERT_EQ(check.stalled.size(), 2u);
  EXPECT_EQ(check.stalled[0].index, 1);
  EXPECT_EQ(check.stalled[0].silent, milliseconds(201));
  EXPECT_EQ(check.stalled[1].index, 3);
  EXPECT_EQ(check.stalled[1].silent, milliseconds(5000));
}

TEST(LivenessTest, LooksAgainEveryIntervalOrWhenARankWouldPassTheLimit) {
  const Clock::time_point now = Clock::now();
  // Nobody watched: every interval.
  EXPECT_EQ(CheckLiveness({std::nullopt}, now, kPolicy).next_check,
            now + milliseconds(50));
  EXPECT_EQ(CheckLiveness({}, now, kPolicy).next_check, now + milliseconds(50));
  // A rank silent for 180 ms passes the limit in 20 ms (checked 1 ms
  // after); one just heard of does not move the check.
  const LivenessCheck check = CheckLiveness(
      {now, now - milliseconds(180), now - milliseconds(10)}, now, kPolicy);
  EXPECT_TRUE(check.stalled.empty());
  EXPECT_EQ(check.next_check, now + milliseconds(21));
  // A stalled rank does not pull the check to now.
  EXPECT_EQ(CheckLiveness({now - milliseconds(900)}, now, kPolicy).next_check,
            now + milliseconds(50));
}

TEST(LivenessTest, MessagesNameTheWorkerAndTheSilence) {
  const absl::Status s =
      StallError("rank 1 (h pid 7)", milliseconds(230), kPolicy);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "worker rank 1 (h pid 7) stopped answering: no heartbeat for 230 "
            "ms (4 x 50 ms)");
  EXPECT_EQ(NotAnswering("rank 0 (h pid 3)", milliseconds(1500)),
            "; worker rank 0 (h pid 3) not answering (no heartbeat for 1500 "
            "ms)");
}

}  // namespace
}  // namespace moe
