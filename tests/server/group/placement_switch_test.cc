// server/placement_switch: a placement is in force only once every rank of
// its generation has loaded it; one loads at a time; a rank's failure, a
// new generation, the deadline or shutdown each stop it.
#include "server/group/placement_switch.h"

#include <thread>

#include "gtest/gtest.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::shared_ptr<const ExpertPlacement> Placement(int redundant) {
  auto p = std::make_shared<ExpertPlacement>();
  p->redundant = redundant;
  return p;
}

TEST(PlacementSwitch, InForceOnlyOnceEveryRankLoadedIt) {
  PlacementSwitch s(Placement(0));
  EXPECT_EQ(s.in_force().epoch, 0u);
  auto epoch = s.Begin(/*generation=*/4, /*world=*/2);
  ASSERT_TRUE(epoch.ok());
  EXPECT_EQ(*epoch, 1u);
  EXPECT_EQ(s.Begin(4, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  s.Loaded(4, 1, 0, "");
  s.Loaded(4, 1, 0, "");  // twice: still one rank
  s.Loaded(3, 1, 1, "");  // another generation's answer
  s.Loaded(4, 7, 1, "");  // another epoch's
  EXPECT_EQ(s.AwaitLoaded(Clock::now() + milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  // The failed one stopped loading: a new one may begin.
  ASSERT_TRUE(s.Begin(4, 2).ok());
  std::thread rank1([&] {
    std::this_thread::sleep_for(milliseconds(20));
    s.Loaded(4, 2, 1, "");
  });
  s.Loaded(4, 2, 0, "");
  EXPECT_TRUE(s.AwaitLoaded(Clock::now() + milliseconds(5000)).ok());
  rank1.join();
  EXPECT_EQ(s.in_force().epoch, 0u);  // not before Commit
  auto next = Placement(3);
  ASSERT_TRUE(s.Commit(next, 4).ok());
  EXPECT_EQ(s.in_force().epoch, 2u);
  EXPECT_EQ(s.in_force().placement, next);
}

TEST(PlacementSwitch, ARanksErrorOrANewGenerationStopsTheSwitch) {
  PlacementSwitch s(nullptr);
  ASSERT_TRUE(s.Begin(1, 2).ok());
  s.Loaded(1, 1, 1, "out of memory");
  const absl::Status failed = s.AwaitLoaded(Clock::now() + milliseconds(5000));
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.message(),
            "worker rank 1 could not load placement 1: out of memory");
  ASSERT_TRUE(s.Begin(1, 2).ok());
  s.Loaded(1, 2, 0, "");
  s.Loaded(1, 2, 1, "");
  ASSERT_TRUE(s.AwaitLoaded(Clock::now()).ok());
  s.GenerationStarted(2);
  EXPECT_EQ(s.Commit(Placement(1), 1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.in_force().epoch, 0u);
  EXPECT_EQ(s.in_force().placement, nullptr);
  // Loaded, but for a generation that is over by the switch.
  ASSERT_TRUE(s.Begin(2, 1).ok());
  s.Loaded(2, 3, 0, "");
  ASSERT_TRUE(s.AwaitLoaded(Clock::now()).ok());
  EXPECT_EQ(s.Commit(Placement(1), 3).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.in_force().epoch, 0u);
}

TEST(PlacementSwitch, ShutdownEndsTheWait) {
  PlacementSwitch s(nullptr);
  ASSERT_TRUE(s.Begin(1, 2).ok());
  std::thread stop([&] {
    std::this_thread::sleep_for(milliseconds(20));
    s.Shutdown();
  });
  const auto start = Clock::now();
  const absl::Status st = s.AwaitLoaded(start + std::chrono::seconds(30));
  stop.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "router shutting down");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace moe
