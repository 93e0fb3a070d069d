// server/group_membership: a full group first; after a loss, the members
// left form a smaller group once regroup_after has passed (not before a
// full group has formed); whole again at once when a worker returns.
#include "server/group/group_membership.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

using std::chrono::milliseconds;
using Action = NextGeneration::Action;
const auto kT0 =
    std::chrono::steady_clock::time_point() + std::chrono::hours(1);

GroupPolicy Policy() { return {/*world_size=*/3, milliseconds(5000)}; }

TEST(PlanGeneration, AFullGroupFormsFromTheMembersInSlotOrder) {
  const NextGeneration n =
      PlanGeneration({true, true, true}, GroupHistory(), kT0, Policy());
  EXPECT_EQ(n.action, Action::kForm);
  EXPECT_EQ(n.slots, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(n.history.formed_full);
  EXPECT_FALSE(n.history.lost_at);
}

TEST(PlanGeneration, NoSmallerGroupBeforeAFullOneHasFormed) {
  EXPECT_EQ(
      PlanGeneration({true, false, true}, GroupHistory(), kT0, Policy()).action,
      Action::kNone);
  EXPECT_EQ(PlanGeneration({false, false, false}, GroupHistory(), kT0, Policy())
                .action,
            Action::kNone);
}

TEST(PlanGeneration, AfterALossTheMembersLeftWaitThenFormASmallerGroup) {
  GroupHistory h;
  h.formed_full = true;
  const auto at = RegroupAfterLoss(&h, kT0, Policy());
  ASSERT_TRUE(at);
  EXPECT_EQ(*at, kT0 + milliseconds(5000));
  const std::vector<bool> two = {true, false, true};  // slot 1 gone
  NextGeneration n = PlanGeneration(two, h, kT0 + milliseconds(10), Policy());
  EXPECT_EQ(n.action, Action::kWait);
  EXPECT_EQ(n.regroup_at, kT0 + milliseconds(5000));
  n = PlanGeneration(two, h, kT0 + milliseconds(5000), Policy());
  EXPECT_EQ(n.action, Action::kForm);
  EXPECT_EQ(n.slots, (std::vector<int>{0, 2}));
  // Still degraded: the loss stays remembered.
  EXPECT_TRUE(n.history.lost_at);
  // Whole again as soon as the worker returns, however soon.
  n = PlanGeneration({true, true, true}, h, kT0 + milliseconds(1), Policy());
  EXPECT_EQ(n.action, Action::kForm);
  EXPECT_EQ(n.slots.size(), 3u);
  EXPECT_FALSE(n.history.lost_at);
}

TEST(PlanGeneration, ALossBeforeAnyFullGroupSchedulesNoRegroup) {
  GroupHistory h;
  EXPECT_FALSE(RegroupAfterLoss(&h, kT0, Policy()));
  EXPECT_EQ(h.lost_at, kT0);
  // However long after: the workers there wait for the full group.
  EXPECT_EQ(PlanGeneration({true, true, false}, h, kT0 + std::chrono::hours(1),
                           Policy())
                .action,
            Action::kNone);
}

}  // namespace
}  // namespace moe

// RegroupSchedule: the history kept between plans, the regroup scheduled
// and the backoff of failed generations.
namespace moe {
namespace {

RegroupSchedule Schedule() {
  return RegroupSchedule(Policy(), milliseconds(100), /*max_doublings=*/2);
}

TEST(RegroupSchedule, KeepsTheHistoryAndSchedulesTheSmallerGroup) {
  RegroupSchedule s = Schedule();
  EXPECT_FALSE(s.Lost(kT0)) << "no smaller group before a full one";
  EXPECT_EQ(s.Plan({true, true, true}, kT0).action, Action::kForm);
  EXPECT_FALSE(s.next());
  ASSERT_TRUE(s.Lost(kT0 + milliseconds(10)));
  EXPECT_EQ(s.next(), kT0 + milliseconds(5010));
  s.RetryLater(kT0);  // a failed rendezvous meanwhile: sooner
  EXPECT_EQ(s.next(), kT0 + milliseconds(100));
  // The members left wait for the smaller group: the later time.
  const NextGeneration wait =
      s.Plan({true, false, true}, kT0 + milliseconds(20));
  EXPECT_EQ(wait.action, Action::kWait);
  EXPECT_EQ(s.next(), kT0 + milliseconds(5010));
  EXPECT_FALSE(s.Due(kT0 + milliseconds(5009)));
  EXPECT_TRUE(s.Due(kT0 + milliseconds(5010)));
  EXPECT_FALSE(s.Due(kT0 + milliseconds(5010))) << "due once";
  EXPECT_EQ(s.Plan({true, false, true}, kT0 + milliseconds(5010)).action,
            Action::kForm);
}

TEST(RegroupSchedule, AFormedGenerationDropsTheScheduledRegroup) {
  RegroupSchedule s = Schedule();
  s.Plan({true, true, true}, kT0);
  ASSERT_TRUE(s.Lost(kT0));
  EXPECT_EQ(s.Plan({true, true, true}, kT0 + milliseconds(1)).action,
            Action::kForm);
  EXPECT_FALSE(s.next());
  EXPECT_FALSE(s.Due(kT0 + std::chrono::hours(1)));
}

TEST(RegroupSchedule, FailedGenerationsBackOffUntilOneSucceeds) {
  RegroupSchedule s = Schedule();
  s.RetryLater(kT0);  // none failed yet: the delay itself
  EXPECT_EQ(s.next(), kT0 + milliseconds(100));
  ASSERT_TRUE(s.Due(kT0 + milliseconds(100)));
  s.Failed(7);
  s.Failed(7);  // counted once per generation
  s.RetryLater(kT0);
  EXPECT_EQ(s.next(), kT0 + milliseconds(100));
  ASSERT_TRUE(s.Due(kT0 + milliseconds(100)));
  s.Failed(8);
  s.RetryLater(kT0);
  EXPECT_EQ(s.next(), kT0 + milliseconds(200));
  ASSERT_TRUE(s.Due(kT0 + milliseconds(200)));
  s.Failed(9);
  s.Failed(10);  // at most 2 doublings
  s.RetryLater(kT0);
  EXPECT_EQ(s.next(), kT0 + milliseconds(400));
  // A regroup due sooner keeps its time.
  s.RetryLater(kT0 - milliseconds(350));
  EXPECT_EQ(s.next(), kT0 + milliseconds(50));
  s.RetryLater(kT0 + milliseconds(900));
  EXPECT_EQ(s.next(), kT0 + milliseconds(50));
  ASSERT_TRUE(s.Due(kT0 + milliseconds(50)));
  s.Succeeded();
  s.RetryLater(kT0);
  EXPECT_EQ(s.next(), kT0 + milliseconds(100)) << "the backoff starts over";
}

}  // namespace
}  // namespace moe
