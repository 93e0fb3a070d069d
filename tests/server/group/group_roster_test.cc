// Who is in the worker group, without threads or gRPC: slots, the ranks of
// a generation, readiness, refusals and the group's state; and the
// assignments of a generation.
#include "server/group/group_roster.h"

#include <set>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/group/group_roster.h"
#include "tests/server/group/fake_member.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using Readiness = GroupRoster::Readiness;
using Removed = GroupRoster::Removed;
using testing::Member;

constexpr char kPeer[] = "ipv4:127.0.0.1:4000";

TEST(GroupRoster, SlotsFillInOrderAndRefuseBeyondTheWorldSize) {
  GroupRoster roster(2);
  auto a = Member("a"), b = Member("b"), c = Member("c");
  ASSERT_TRUE(roster.Admit(a, kPeer).ok());
  ASSERT_TRUE(roster.Admit(b, kPeer).ok());
  EXPECT_EQ(roster.SlotOf(*a), 0);
  EXPECT_EQ(roster.SlotOf(*b), 1);
  EXPECT_EQ(roster.Admit(c, kPeer).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).connected, 2);
  // A freed slot is taken again.
  EXPECT_EQ(roster.Remove(a), Removed::kMember);
  EXPECT_EQ(roster.Remove(a), Removed::kNone);
  ASSERT_TRUE(roster.Admit(c, kPeer).ok());
  EXPECT_EQ(roster.SlotOf(*c), 0);
}

TEST(GroupRoster, ARefusedWorkerIsKeptAsTheRefusalUntilReady) {
  GroupRoster roster(1);
  auto a = Member("a", /*collective_host=*/"127.0.0.1");
  const absl::Status s = roster.Admit(a, "ipv4:10.1.2.3:5000");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(roster.SlotOf(*a), -1);
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).refusal, s.message());
  EXPECT_TRUE(absl::StrContains(NotReady(roster, Clock::now()), s.message()));
  auto b = Member("b");
  ASSERT_TRUE(roster.Admit(b, kPeer).ok());
  roster.StartGeneration({0});
  EXPECT_EQ(roster.Ready(b, 1, ""), Readiness::kGroupReady);
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).refusal, "");
}

TEST(GroupRoster, AGenerationIsReadyWhenEveryRankSaidSoOnce) {
  GroupRoster roster(3);
  auto a = Member("a"), b = Member("b"), c = Member("c");
  for (const auto& m : {a, b, c}) ASSERT_TRUE(roster.Admit(m, kPeer).ok());
  roster.StartGeneration({0, 2});  // b left out (e.g. stalled)
  EXPECT_EQ(roster.generation(), 1u);
  EXPECT_EQ(roster.RankOf(*a), 0);
  EXPECT_EQ(roster.RankOf(*c), 1);
  EXPECT_EQ(roster.RankOf(*b), -1);
  EXPECT_EQ(roster.NameOf(*c), "rank 1 (c pid 1)");
  EXPECT_EQ(roster.NameOf(*b), "(b pid 1)");
  ASSERT_EQ(roster.Watched().size(), 2u);
  EXPECT_TRUE(roster.Watched()[1]) << "c is held to the heartbeat interval";
  EXPECT_FALSE(roster.IsRank(*b));
  EXPECT_EQ(roster.Ready(b, 1, ""), Readiness::kIgnored) << "not a rank";
  EXPECT_EQ(roster.Ready(a, 2, ""), Readiness::kIgnored) << "generation";
  EXPECT_EQ(roster.Ready(a, 1, ""), Readiness::kCounted);
  EXPECT_EQ(roster.Ready(a, 1, ""), Readiness::kIgnored) << "said twice";
  EXPECT_FALSE(roster.ready());
  EXPECT_EQ(roster.Ready(c, 1, ""), Readiness::kGroupReady);
  const GroupState st = GroupStateOf(roster, Clock::now());
  EXPECT_TRUE(st.ready);
  EXPECT_EQ(st.ready_workers, 2);
  EXPECT_EQ(st.group_size, 2);
  EXPECT_TRUE(st.degraded());
  // Losing a rank: not ready, its Ready no longer counted.
  EXPECT_EQ(roster.Remove(c), Removed::kRank);
  EXPECT_FALSE(roster.ready());
  EXPECT_EQ(GroupStateOf(roster, Clock::now()).ready_workers, 1);
  EXPECT_FALSE(roster.Watched()[1]) << "c, gone, is not watched";
  EXPECT_EQ(roster.RankOf(*c), 1) << "kept, for its token to be revoked";
}

// A degraded group that was ready takes a returning worker: the new
// generation is not ready until its ranks are (steps must not go to ranks
// still loading).
TEST(GroupRoster, ANewGenerationIsNotReadyUntilItsRanksAre) {
  GroupRoster roster(2);
  auto a = Member("a"), b = Member("b");
  ASSERT_TRUE(roster.Admit(a, kPeer).ok());
  roster.StartGeneration({0});
  ASSERT_EQ(roster.Ready(a, 1, ""), Readiness::kGroupReady);
  ASSERT_TRUE(roster.Admit(b, kPeer).ok());
  roster.StartGeneration({0, 1});
  EXPECT_FALSE(roster.ready());
  const GroupState st = GroupStateOf(roster, Clock::now());
  EXPECT_FALSE(st.ready);
  EXPECT_EQ(st.ready_workers, 0);
  EXPECT_EQ(st.group_size, 2);
  EXPECT_EQ(roster.Ready(a, 2, ""), Readiness::kCounted);
  EXPECT_EQ(roster.Ready(b, 2, ""), Readiness::kGroupReady);
  EXPECT_TRUE(roster.ready());
}

TEST(GroupRoster, ARankThatCannotJoinIsTheRefusal) {
  GroupRoster roster(1);
  auto a = Member("a");
  ASSERT_TRUE(roster.Admit(a, kPeer).ok());
  roster.StartGeneration({0});
  EXPECT_EQ(roster.Ready(a, 1, "no such checkpoint"), Readiness::kFailed);
  const std::string refusal = GroupStateOf(roster, Clock::now()).refusal;
  EXPECT_TRUE(absl::StrContains(refusal, "could not join generation 1"));
  EXPECT_TRUE(absl::StrContains(refusal, "no such checkpoint"));
  EXPECT_FALSE(roster.ready());
}

TEST(GroupRoster, StalledRanksAreNotWatchedAndNamedInTheState) {
  GroupRoster roster(2);
  auto a = Member("a"), b = Member("b");
  ASSERT_TRUE(roster.Admit(a, kPeer).ok());
  ASSERT_TRUE(roster.Admit(b, kPeer).ok());
  EXPECT_TRUE(roster.Watched().empty()) << "no generation yet";
  roster.StartGeneration({0, 1});
  ASSERT_EQ(roster.Ready(a, 1, ""), Readiness::kCounted);
  ASSERT_EQ(roster.Ready(b, 1, ""), Readiness::kGroupReady);
  EXPECT_TRUE(roster.Watched()[0] && roster.Watched()[1]);
  roster.Stall(1);
  EXPECT_FALSE(roster.ready());
  EXPECT_TRUE(roster.Watched()[0]);
  EXPECT_FALSE(roster.Watched()[1]);
  EXPECT_EQ(roster.Available(), (std::vector<bool>{true, false}));
  const std::string stalled = GroupStateOf(roster, Clock::now()).stalled;
  EXPECT_TRUE(
      absl::StrContains(stalled, "worker rank 1 (b pid 1) not answering"))
      << stalled;
  EXPECT_FALSE(absl::StrContains(stalled, "(a pid")) << stalled;
  EXPECT_TRUE(absl::StrContains(NotReady(roster, Clock::now()), stalled));
  // A generation without it: it holds no rank and is no longer watched.
  roster.StartGeneration({0});
  EXPECT_EQ(roster.RankOf(*b), -1);
  EXPECT_FALSE(roster.IsRank(*b));
  EXPECT_EQ(roster.Watched().size(), 1u);
}

TEST(GroupRoster, RanksSilentTooLongAreStalledOnceAndNamed) {
  GroupRoster roster(2);
  auto a = Member("a"), b = Member("b");
  ASSERT_TRUE(roster.Admit(a, kPeer).ok());
  ASSERT_TRUE(roster.Admit(b, kPeer).ok());
  roster.StartGeneration({0, 1});
  const LivenessPolicy policy{std::chrono::milliseconds(10), 2};
  const Clock::time_point now = Clock::now();
  a->last_seen = now.time_since_epoch().count();
  b->last_seen =
      (now - std::chrono::milliseconds(50)).time_since_epoch().count();
  Clock::time_point next{};
  const std::vector<absl::Status> stalls =
      roster.StallSilent(now, policy, &next);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(stalls[0].message(), "rank 1 (b pid 1)"))
      << stalls[0];
  EXPECT_TRUE(b->stalled);
  EXPECT_FALSE(a->stalled);
  EXPECT_FALSE(roster.ready());
  EXPECT_GT(next, now);
  EXPECT_TRUE(roster.StallSilent(now, policy, &next).empty()) << "twice";
}

TEST(AssignGeneration, EvenSplitsThePlacementOnlyWhenWholeAndFreshTokens) {
  auto placed = std::make_shared<ExpertPlacement>();
  placed->layers[0].workers = {{0, 1}, {2, 3}, {4, 5}};
  const PlacementInForce in_force{placed, 4};
  const auto whole =
      AssignGeneration(9, 3, 3, 7, in_force, std::chrono::milliseconds(250));
  ASSERT_EQ(whole.size(), 3u);
  std::set<std::string> tokens;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(whole[r].generation, 9u);
    EXPECT_EQ(whole[r].rank, r);
    EXPECT_EQ(whole[r].world_size, 3);
    EXPECT_EQ(whole[r].placement, placed);
    EXPECT_EQ(whole[r].placement_epoch, 4u);
    EXPECT_EQ(whole[r].heartbeat_interval.count(), 250);
    EXPECT_EQ(whole[r].store_token.size(), 16u);
    tokens.insert(whole[r].store_token);
  }
  EXPECT_EQ(tokens.size(), 3u) << "a token per rank";
  EXPECT_EQ(whole[0].expert_begin, 0);
  EXPECT_EQ(whole[2].expert_end, 7);
  const auto degraded =
      AssignGeneration(10, 2, 3, 7, in_force, std::chrono::milliseconds(250));
  ASSERT_EQ(degraded.size(), 2u);
  EXPECT_EQ(degraded[0].placement, nullptr);
  EXPECT_EQ(degraded[1].expert_end, 7);
  EXPECT_EQ(degraded[0].expert_end, degraded[1].expert_begin);
}

}  // namespace
}  // namespace moe
