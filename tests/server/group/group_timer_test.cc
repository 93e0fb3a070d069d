// The worker group's timer: ticks when the tick says, at once when poked,
// and never after Stop.
#include "server/group/group_timer.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::WaitFor;

constexpr milliseconds kTimeout(10000);

// Records when each tick ran; asks for the next one `every` later.
struct Ticks {
  explicit Ticks(Clock::duration every) : every(every) {}
  Clock::time_point operator()(Clock::time_point now) {
    std::lock_guard<std::mutex> lock(mu);
    at.push_back(now);
    return now + every;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return at.size();
  }
  Clock::duration every;
  std::mutex mu;
  std::vector<Clock::time_point> at;
};

TEST(GroupTimerTest, TicksAtOnceThenWhenDue) {
  Ticks ticks(milliseconds(60));
  GroupTimer timer;
  const Clock::time_point start = Clock::now();
  timer.Start([&](Clock::time_point now) { return ticks(now); });
  ASSERT_TRUE(WaitFor([&] { return ticks.count() >= 3; }, kTimeout));
  timer.Stop();
  std::lock_guard<std::mutex> lock(ticks.mu);
  EXPECT_LT(ticks.at[0] - start, milliseconds(1000)) << "not at once";
  EXPECT_GE(ticks.at[1] - ticks.at[0], milliseconds(60)) << "before due";
  EXPECT_GE(ticks.at[2] - ticks.at[1], milliseconds(60)) << "before due";
}

TEST(GroupTimerTest, APokeTicksAtOnce) {
  Ticks ticks(std::chrono::hours(1));
  GroupTimer timer;
  timer.Start([&](Clock::time_point now) { return ticks(now); });
  ASSERT_TRUE(WaitFor([&] { return ticks.count() == 1; }, kTimeout));
  timer.Poke();
  ASSERT_TRUE(WaitFor([&] { return ticks.count() == 2; }, kTimeout))
      << "a poke did not tick";
  timer.Poke();
  ASSERT_TRUE(WaitFor([&] { return ticks.count() == 3; }, kTimeout));
}

TEST(GroupTimerTest, NoTickAfterStop) {
  Ticks ticks(milliseconds(1));
  GroupTimer timer;
  timer.Start([&](Clock::time_point now) { return ticks(now); });
  ASSERT_TRUE(WaitFor([&] { return ticks.count() >= 2; }, kTimeout));
  timer.Stop();
  // One tick may have been running when Stop came.
  std::this_thread::sleep_for(milliseconds(20));
  const size_t stopped = ticks.count();
  timer.Poke();
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(ticks.count(), stopped);
}

}  // namespace
}  // namespace moe
