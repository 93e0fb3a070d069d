// What each event does to the worker group's membership, at times the test
// chooses (no threads, no timer): generations formed and assigned, a lost
// rank leaving a smaller group once regroup_after has passed, a silent rank
// stalled and answering again, failed generations retried with a doubling
// backoff, and when the timer must look again.
#include "server/group/group_events.h"

#include <chrono>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/group/fake_member.h"
#include "tests/server/group/idle_channel.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using AfterReady = GroupEvents::AfterReady;
using testing::IdleChannel;
using testing::Member;

constexpr char kPeer[] = "ipv4:127.0.0.1:4000";

// Two workers; times short enough to reason about: a rank silent for 40
// ms is stalled, the members left regroup 100 ms after a loss, a failed
// generation is retried after 10 ms, then 20.
WorkerPoolOptions Options() {
  WorkerPoolOptions o;
  o.world_size = 2;
  o.heartbeat_interval = milliseconds(20);
  o.heartbeat_misses = 2;
  o.regroup_after = milliseconds(100);
  o.retry_delay = milliseconds(10);
  o.num_experts = 6;
  return o;
}

class GroupEventsTest : public ::testing::Test {
 protected:
  // a and b admitted at t0_ (generation 1) and, unless `ready` is false,
  // both ready in it.
  void Form(bool ready = true) {
    ASSERT_TRUE(events_.Admit(a_, kPeer, t0_, &out_).ok());
    ASSERT_TRUE(events_.Admit(b_, kPeer, t0_, &out_).ok());
    ASSERT_EQ(out_.size(), 2u);
    out_.clear();
    a_->last_seen = b_->last_seen = t0_.time_since_epoch().count();
    if (!ready) return;
    ASSERT_EQ(events_.Ready(a_, 1, ""), AfterReady::kDeliver);
    ASSERT_EQ(events_.Ready(b_, 1, ""), AfterReady::kDeliver);
    ASSERT_TRUE(events_.roster().ready());
  }
  // The world size of each assignment in out_, which is then cleared.
  std::vector<int> Sent() {
    std::vector<int> worlds;
    for (const auto& [member, message] : out_) {
      worlds.push_back(std::get<GroupAssignment>(message).world_size);
    }
    out_.clear();
    return worlds;
  }

  IdleChannel idle_;
  GroupParts parts_{Options(), &idle_.channel, &idle_.placement};
  int pokes_ = 0;
  GroupEvents events_{Options(), &parts_, [this] { ++pokes_; }};
  const Clock::time_point t0_ = Clock::now();
  std::shared_ptr<testing::FakeMember> a_ = Member("a"), b_ = Member("b");
  GroupOutbox out_;
};

TEST_F(GroupEventsTest, AFullGroupFormsWhenTheLastWorkerIsAdmitted) {
  ASSERT_TRUE(events_.Admit(a_, kPeer, t0_, &out_).ok());
  EXPECT_TRUE(out_.empty()) << "a rank still open";
  ASSERT_TRUE(events_.Admit(b_, kPeer, t0_, &out_).ok());
  ASSERT_EQ(out_.size(), 2u);
  EXPECT_EQ(out_[0].first, a_);
  EXPECT_EQ(out_[1].first, b_);
  const auto& gb = std::get<GroupAssignment>(out_[1].second);
  EXPECT_EQ(gb.generation, 1u);
  EXPECT_EQ(gb.rank, 1);
  EXPECT_EQ(gb.world_size, 2);
  EXPECT_EQ(events_.roster().generation(), 1u);
  EXPECT_EQ(pokes_, 0);
  EXPECT_EQ(events_.Admit(Member("c"), kPeer, t0_, &out_).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(GroupEventsTest, ALostRankLeavesASmallerGroupOnceRegroupAfterPassed) {
  Form();
  const Clock::time_point lost = t0_ + milliseconds(5);
  a_->last_seen = (lost + milliseconds(90)).time_since_epoch().count();
  EXPECT_TRUE(events_.Remove(b_, lost));
  EXPECT_FALSE(events_.Remove(b_, lost)) << "it holds no slot any more";
  EXPECT_EQ(pokes_, 1) << "a regroup scheduled";
  EXPECT_FALSE(events_.roster().ready());
  GroupEvents::Round early = events_.Look(lost + milliseconds(99), {});
  EXPECT_FALSE(early.regroup);
  EXPECT_FALSE(early.stalled);
  EXPECT_EQ(early.wake, lost + milliseconds(100));
  const Clock::time_point due = lost + milliseconds(100);
  GroupEvents::Round round = events_.Look(due, {});
  EXPECT_TRUE(round.regroup);
  EXPECT_EQ(round.wake, due) << "at once";
  events_.Regroup(due, &out_);
  EXPECT_EQ(Sent(), std::vector<int>{1});
  EXPECT_EQ(events_.roster().generation(), 2u);
}

TEST_F(GroupEventsTest, ASilentRankIsStalledAndAnswersAgainOnce) {
  Form();
  const Clock::time_point now = t0_ + milliseconds(50);
  a_->last_seen = now.time_since_epoch().count();
  GroupEvents::Round round = events_.Look(now, {});
  EXPECT_TRUE(round.stalled);
  EXPECT_FALSE(round.regroup);
  EXPECT_EQ(round.wake, now);
  EXPECT_TRUE(b_->stalled);
  EXPECT_FALSE(a_->stalled);
  EXPECT_FALSE(events_.roster().ready());
  EXPECT_EQ(pokes_, 1) << "the members left may regroup";
  EXPECT_FALSE(events_.Answered(*a_));
  EXPECT_TRUE(events_.Answered(*b_));
  EXPECT_FALSE(b_->stalled);
  EXPECT_FALSE(events_.Answered(*b_)) << "once";
  events_.Regroup(now, &out_);
  EXPECT_EQ(Sent(), (std::vector<int>{2, 2}));
}

TEST_F(GroupEventsTest, AFailedGenerationIsRetriedWithADoublingBackoff) {
  Form(/*ready=*/false);
  EXPECT_EQ(events_.Ready(a_, 2, ""), AfterReady::kIgnored) << "generation";
  EXPECT_EQ(events_.Ready(a_, 1, ""), AfterReady::kDeliver);
  EXPECT_EQ(events_.Ready(a_, 1, ""), AfterReady::kIgnored) << "said twice";
  EXPECT_EQ(events_.Ready(b_, 1, "no checkpoint"), AfterReady::kRetry);
  events_.RegroupLater(t0_);
  EXPECT_EQ(pokes_, 1);
  EXPECT_FALSE(events_.Look(t0_ + milliseconds(9), {}).regroup);
  ASSERT_TRUE(events_.Look(t0_ + milliseconds(10), {}).regroup);
  events_.Regroup(t0_ + milliseconds(10), &out_);
  EXPECT_EQ(Sent(), (std::vector<int>{2, 2}));
  // Failed again in generation 2: twice the delay.
  const Clock::time_point t1 = t0_ + milliseconds(15);
  a_->last_seen = b_->last_seen = t1.time_since_epoch().count();
  EXPECT_EQ(events_.Ready(b_, 2, "no checkpoint"), AfterReady::kRetry);
  events_.RegroupLater(t1);
  EXPECT_FALSE(events_.Look(t1 + milliseconds(19), {}).regroup);
  EXPECT_TRUE(events_.Look(t1 + milliseconds(20), {}).regroup);
}

TEST_F(GroupEventsTest, WithNothingDueTheTimerWakesAtTheEarliestTime) {
  Form();
  // The next liveness check is within an interval of t0_.
  EXPECT_LE(events_.Look(t0_, {}).wake, t0_ + milliseconds(20));
  EXPECT_GT(events_.Look(t0_, {}).wake, t0_);
  const Clock::time_point store = t0_ + milliseconds(3);
  EXPECT_EQ(events_.Look(t0_, store).wake, store);
}

}  // namespace
}  // namespace moe
