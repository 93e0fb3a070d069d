// server/group_parts: what follows the group's membership is told what
// happened: a new generation is assigned and served by the store, and
// ends the old one's rendezvous, steps and placement loading; a rank that
// left fails the steps, ends the rendezvous and loses its token; a stalled
// rank is the cause of the failed steps; shutdown fails everything.
#include "server/group/group_parts.h"

#include <functional>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/group/recording_store_waiter.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using Waiter = RecordingStoreWaiter;

// One rank that takes every step and never answers.
class SilentRank : public StepRank {
 public:
  bool Write(const EncodedStep&) override { return true; }
  std::string Name() const override { return "(silent)"; }
};

class OneRank : public StepRanks {
  absl::Status OpenStep(const std::vector<StepContent>&, Open open) override {
    open(1, {std::make_shared<SilentRank>()});
    return absl::OkStatus();
  }
};

class GroupPartsTest : public ::testing::Test {
 protected:
  static WorkerPoolOptions Options() {
    WorkerPoolOptions o;
    o.world_size = 2;
    o.num_experts = 4;
    o.heartbeat_interval = milliseconds(100);
    o.max_store_waits_per_rank = 4;
    return o;
  }
  // The status of a step in flight while `event` happens (the step is
  // never answered: only the event ends it before its deadline).
  absl::Status StepDuring(const std::function<void()>& event) {
    std::vector<StepReply> results;
    const auto deadline = Clock::now() + milliseconds(2000);
    return channel_.Run({StepContent{}}, deadline, event, &results).step.status;
  }
  // Generation 1 of 2 ranks, and a Get of rank 0 parked in it.
  void StartParked() {
    g1_ = parts_.StartGeneration(1, 2);
    ASSERT_EQ(g1_.size(), 2u);
    ASSERT_TRUE(parts_.store()
                    .Get(1, g1_[0].store_token, {"never"},
                         Clock::now() + milliseconds(20000), &waiter_)
                    .ok());
  }

  OneRank ranks_;
  StepChannel channel_{&ranks_};
  PlacementSwitch placement_{nullptr};
  GroupParts parts_{Options(), &channel_, &placement_};
  std::vector<GroupAssignment> g1_;
  Waiter waiter_;
};

TEST_F(GroupPartsTest, ANewGenerationIsServedAndEndsTheOldOnesWork) {
  StartParked();
  EXPECT_EQ(g1_[1].rank, 1);
  EXPECT_EQ(g1_[1].world_size, 2);
  EXPECT_EQ(g1_[1].expert_begin, 2);
  EXPECT_EQ(g1_[1].heartbeat_interval, milliseconds(100));
  EXPECT_NE(g1_[0].store_token, g1_[1].store_token);
  EXPECT_TRUE(parts_.store().Set(1, g1_[1].store_token, "1", "x").ok());
  ASSERT_TRUE(placement_.Begin(1, 2).ok());
  std::vector<GroupAssignment> g2;
  const absl::Status step =
      StepDuring([&] { g2 = parts_.StartGeneration(2, 1); });
  EXPECT_EQ(step,
            absl::UnavailableError("worker group reconfigured (generation 2)"));
  ASSERT_EQ(g2.size(), 1u);
  EXPECT_EQ(g2[0].generation, 2u);
  EXPECT_EQ(g2[0].world_size, 1);
  EXPECT_EQ(g2[0].expert_end, 4);
  parts_.store().FinishEnded();
  EXPECT_EQ(waiter_.ended, 1);
  EXPECT_EQ(waiter_.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(parts_.store().Set(2, g2[0].store_token, "0", "x").ok());
  EXPECT_EQ(parts_.store().Set(1, g1_[1].store_token, "1", "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(placement_.AwaitLoaded(Clock::now() + milliseconds(500)).code(),
            absl::StatusCode::kUnavailable)
      << "a placement loading for generation 1 could still switch";
}

TEST_F(GroupPartsTest, ARankThatLeftFailsTheStepsAndLosesItsToken) {
  StartParked();
  const absl::Status step =
      StepDuring([&] { parts_.RankLeft("rank 1 (b pid 1)", 1, 1); });
  EXPECT_EQ(step,
            absl::UnavailableError("worker rank 1 (b pid 1) disconnected"));
  parts_.store().FinishEnded();
  EXPECT_EQ(waiter_.status, absl::UnavailableError(
                                "worker rank 1 (b pid 1) left generation 1"));
  EXPECT_EQ(parts_.store().Set(1, g1_[1].store_token, "1", "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(parts_.store().Set(1, g1_[0].store_token, "0", "x").ok());
}

TEST_F(GroupPartsTest, AStalledRankIsTheCauseOfTheFailedSteps) {
  StartParked();
  const absl::Status stall =
      absl::UnavailableError("worker rank 1 stopped answering");
  const absl::Status step = StepDuring([&] {
    // Its peer's timeout is reported first, a consequence.
    channel_.AbortAll(absl::UnavailableError("rank 0: collective timed out"));
    parts_.RankStalled(stall);
  });
  EXPECT_EQ(step, stall);
  parts_.store().FinishEnded();
  EXPECT_EQ(waiter_.status, stall);
}

TEST_F(GroupPartsTest, ShutdownFailsEverythingInFlight) {
  StartParked();
  ASSERT_TRUE(placement_.Begin(1, 2).ok());
  const absl::Status step = StepDuring([&] { parts_.Shutdown(); });
  EXPECT_EQ(step, absl::UnavailableError("router shutting down"));
  parts_.store().FinishEnded();
  EXPECT_EQ(waiter_.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(placement_.AwaitLoaded(Clock::now() + milliseconds(500)).code(),
            absl::StatusCode::kUnavailable);
  Waiter late;
  EXPECT_EQ(parts_.store()
                .Get(1, g1_[0].store_token, {"k"},
                     Clock::now() + milliseconds(20000), &late)
                .code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace moe
