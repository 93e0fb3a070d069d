// The worker group's state as the router sees it, read off a roster: the
// counts, the generation, degraded, the refusal only until ready, the
// stalled ranks, and the UNAVAILABLE message made of them.
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/group/group_roster.h"
#include "tests/server/group/fake_member.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using Readiness = GroupRoster::Readiness;
using testing::Member;

constexpr char kPeer[] = "ipv4:127.0.0.1:4000";

// `members` admitted and made the ranks of generation 1, the first `ready`
// of them ready.
void Form(GroupRoster* roster,
          const std::vector<std::shared_ptr<testing::FakeMember>>& members,
          int ready) {
  std::vector<int> slots;
  for (const auto& m : members) {
    ASSERT_TRUE(roster->Admit(m, kPeer).ok());
    slots.push_back(roster->SlotOf(*m));
  }
  roster->StartGeneration(slots);
  for (int r = 0; r < ready; ++r) roster->Ready(members[r], 1, "");
}

TEST(GroupState, CountsTheRosterAndIsDegradedWhenReadyWithFewer) {
  GroupRoster roster(3);
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).world_size, 3);
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).group_size, 0);
  auto a = Member("a"), b = Member("b");
  Form(&roster, {a, b}, 1);
  GroupState st = GroupStateOf(roster, Clock::now());
  EXPECT_EQ(st.world_size, 3);
  EXPECT_EQ(st.group_size, 2);
  EXPECT_EQ(st.connected, 2);
  EXPECT_EQ(st.ready_workers, 1);
  EXPECT_FALSE(st.ready);
  EXPECT_FALSE(st.degraded()) << "not ready";
  EXPECT_EQ(st.generation, 1u);
  ASSERT_EQ(roster.Ready(b, 1, ""), Readiness::kGroupReady);
  st = GroupStateOf(roster, Clock::now());
  EXPECT_EQ(st.ready_workers, 2);
  EXPECT_TRUE(st.ready);
  EXPECT_TRUE(st.degraded()) << "2 of 3";
}

TEST(GroupState, TheRefusalIsShownOnlyWhileNotReady) {
  GroupRoster roster(1);
  Form(&roster, {Member("a")}, 1);
  ASSERT_TRUE(roster.ready());
  // Refused while the group is ready: kept, shown once it is not.
  auto b = Member("b", /*collective_host=*/"127.0.0.1");
  const absl::Status refused = roster.Admit(b, "ipv4:10.1.2.3:5000");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).refusal, "");
  roster.Unready();
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).refusal, refused.message());
}

TEST(GroupState, NotReadySaysTheCountsTheStalledAndTheLastRefusal) {
  GroupRoster roster(2);
  auto a = Member("a"), b = Member("b");
  Form(&roster, {a, b}, 1);
  EXPECT_EQ(NotReady(roster, Clock::now()),
            "worker group not ready: 2 of 2 workers connected, 1 ready");
  roster.Stall(1);
  const Clock::time_point now = Clock::now();
  const std::string stalled = GroupStateOf(roster, now).stalled;
  EXPECT_TRUE(
      absl::StrContains(stalled, "worker rank 1 (b pid 1) not answering"))
      << stalled;
  EXPECT_EQ(
      NotReady(roster, now),
      "worker group not ready: 2 of 2 workers connected, 1 ready" + stalled);
  ASSERT_EQ(roster.Ready(b, 1, "out of memory"), Readiness::kFailed);
  EXPECT_TRUE(absl::EndsWith(
      NotReady(roster, now),
      "; last refused: worker rank 1 (b pid 1) could not join generation 1: "
      "out of memory"))
      << NotReady(roster, now);
}

}  // namespace
}  // namespace moe
