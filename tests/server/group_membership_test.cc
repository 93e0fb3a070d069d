// server/group_membership: a full group first; after a loss, the members
// left form a smaller group once regroup_after has passed (not before a
// full group has formed); whole again at once when a worker returns.
#include "server/group_membership.h"

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
