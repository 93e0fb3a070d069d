// WorkerGroup driven by fake members (no gRPC): generations formed and
// assigned, readiness told to the router, a lost rank leaving a smaller
// group after regroup_after, a silent rank stalled and back, and steps
// held while the group re-forms.
#include "server/group/worker_group.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/server/group/fake_member.h"
#include "tests/server/group/idle_channel.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::FakeMember;
using testing::IdleChannel;
using testing::Member;
using testing::WaitFor;

constexpr milliseconds kTimeout(10000);
constexpr char kPeer[] = "ipv4:127.0.0.1:4000";

class WorkerGroupTest : public ::testing::Test {
 protected:
  void Start(milliseconds heartbeat = milliseconds(60000),
             milliseconds regroup_after = milliseconds(60000)) {
    WorkerPoolOptions o;
    o.world_size = 2;
    o.num_experts = 6;
    o.heartbeat_interval = heartbeat;
    o.heartbeat_misses = 2;
    o.regroup_after = regroup_after;
    group_ = std::make_unique<WorkerGroup>(o, &idle_.channel, &idle_.placement);
    group_->SetStateCallback([this](const GroupState& s) {
      notified_ = static_cast<int>(s.generation) * 10 + s.ready_workers;
    });
  }
  // Both fake members admitted and ready in the generation they got.
  void FormReady(const std::shared_ptr<FakeMember>& a,
                 const std::shared_ptr<FakeMember>& b) {
    ASSERT_TRUE(group_->Admit(a, kPeer).ok());
    ASSERT_TRUE(group_->Admit(b, kPeer).ok());
    const uint64_t g = group_->state().generation;
    group_->OnReady(a, g, "");
    group_->OnReady(b, g, "");
    ASSERT_TRUE(group_->state().ready);
  }

  IdleChannel idle_;
  std::atomic<int> notified_{-1};
  std::unique_ptr<WorkerGroup> group_;
};

TEST_F(WorkerGroupTest, AFullGroupIsAssignedAndReadyWhenEveryRankIs) {
  Start();
  auto a = Member("a"), b = Member("b");
  ASSERT_TRUE(group_->Admit(a, kPeer).ok());
  EXPECT_TRUE(a->assignments().empty()) << "a generation with a rank open";
  EXPECT_EQ(notified_, 0);
  ASSERT_TRUE(group_->Admit(b, kPeer).ok());
  ASSERT_EQ(a->assignments().size(), 1u);
  ASSERT_EQ(b->assignments().size(), 1u);
  const GroupAssignment ga = a->assignments()[0], gb = b->assignments()[0];
  EXPECT_EQ(ga.generation, 1u);
  EXPECT_EQ(ga.rank, 0);
  EXPECT_EQ(gb.rank, 1);
  EXPECT_EQ(gb.expert_begin, 3);
  // The store serves the generation, each rank with its own token.
  EXPECT_TRUE(group_->store().Set(1, ga.store_token, "0", "x").ok());
  EXPECT_EQ(group_->store().Set(1, ga.store_token, "1", "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(group_->AwaitReady(Clock::now(), milliseconds(0)).status().code(),
            absl::StatusCode::kUnavailable);
  group_->OnReady(a, 1, "");
  EXPECT_EQ(notified_, 11);
  group_->OnReady(b, 1, "");
  EXPECT_EQ(notified_, 12);
  auto world = group_->AwaitReady(Clock::now(), milliseconds(0));
  ASSERT_TRUE(world.ok()) << world.status();
  EXPECT_EQ(*world, 2);
}

TEST_F(WorkerGroupTest, ALostRankLeavesASmallerGroupAfterRegroupAfter) {
  Start(milliseconds(60000), /*regroup_after=*/milliseconds(100));
  auto a = Member("a"), b = Member("b");
  FormReady(a, b);
  const Clock::time_point lost = Clock::now();
  group_->Remove(b);
  EXPECT_FALSE(group_->state().ready);
  EXPECT_EQ(group_->state().connected, 1);
  ASSERT_TRUE(WaitFor([&] { return a->assignments().size() == 2; }, kTimeout));
  EXPECT_GE(Clock::now() - lost, milliseconds(90));
  const GroupAssignment solo = a->assignments()[1];
  EXPECT_EQ(solo.world_size, 1);
  EXPECT_EQ(solo.expert_end, 6);
  EXPECT_GT(solo.generation, 1u);
}

TEST_F(WorkerGroupTest, ASilentRankIsStalledUntilItIsSeenAgain) {
  Start(/*heartbeat=*/milliseconds(20));  // stalled after 2 x 20 ms
  auto a = Member("a"), b = Member("b");
  FormReady(a, b);
  // a keeps beating (until the test ends, however it ends); b falls silent.
  struct Beats {
    std::atomic<bool> stop{false};
    std::thread thread;
    ~Beats() {
      stop = true;
      thread.join();
    }
  } beats;
  beats.thread = std::thread([&] {
    while (!beats.stop) {
      group_->Seen(a);
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  ASSERT_TRUE(WaitFor([&] { return !group_->state().ready; }, kTimeout));
  const std::string stalled = group_->state().stalled;
  EXPECT_TRUE(absl::StrContains(stalled, "rank 1 (b pid 1)")) << stalled;
  EXPECT_FALSE(absl::StrContains(stalled, "(a pid")) << stalled;
  group_->Seen(b);  // answers again: a new generation for both
  ASSERT_TRUE(WaitFor([&] { return b->assignments().size() == 2; }, kTimeout));
  EXPECT_EQ(b->assignments()[1].world_size, 2);
  EXPECT_EQ(group_->state().stalled, "");
}

TEST_F(WorkerGroupTest, StepsAreHeldUntilTheGroupIsReady) {
  Start();
  auto a = Member("a"), b = Member("b");
  ASSERT_TRUE(group_->Admit(a, kPeer).ok());
  ASSERT_TRUE(group_->Admit(b, kPeer).ok());
  absl::StatusOr<int> held = 0;
  std::thread waiter(
      [&] { held = group_->AwaitReady(Clock::now() + kTimeout, kTimeout); });
  std::this_thread::sleep_for(milliseconds(50));
  group_->OnReady(a, 1, "");
  group_->OnReady(b, 1, "");
  waiter.join();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(*held, 2);
  // Bounded by the hold.
  group_->Remove(b);
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(
      group_->AwaitReady(start + kTimeout, milliseconds(100)).status().code(),
      absl::StatusCode::kUnavailable);
  EXPECT_GE(Clock::now() - start, milliseconds(90));
}

}  // namespace
}  // namespace moe
