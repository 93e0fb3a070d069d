// server/step_channel: each rank is written its own step, in rank order,
// under the group's generation and one step id; the replies come back by
// rank; an idle rank of a direct step is left out only once it is up to
// date; a lost rank, a refusing group and a silent rank end the step with
// the error that names them.
#include "server/group/step_channel.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "moe/v1/worker.pb.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A rank that keeps the steps written to it (in `log`, shared by the
// ranks, to see the order) and can be made to lose its connection.
class FakeRank : public StepRank {
 public:
  FakeRank(int rank, std::vector<int>* log) : rank_(rank), log_(log) {}
  bool Write(const EncodedStep& step) override {
    if (lost) return false;
    steps.push_back(step.message().step());
    log_->push_back(rank_);
    return true;
  }
  std::string Name() const override {
    return absl::StrCat("(fake ", rank_, ")");
  }

  bool lost = false;
  std::vector<moe::v1::Step> steps;

 private:
  const int rank_;
  std::vector<int>* const log_;
};

// A group of `world` fake ranks in one generation, or refusing steps.
class FakeGroup : public StepRanks {
 public:
  explicit FakeGroup(int world) {
    for (int r = 0; r < world; ++r) {
      fakes.push_back(std::make_shared<FakeRank>(r, &log));
    }
  }
  absl::Status OpenStep(const std::vector<StepContent>& steps,
                        Open open) override {
    if (!refusal.ok()) return refusal;
    EXPECT_EQ(steps.size(), fakes.size());
    open(generation,
         std::vector<std::shared_ptr<StepRank>>(fakes.begin(), fakes.end()));
    return absl::OkStatus();
  }

  uint64_t generation = 7;
  absl::Status refusal;
  std::vector<int> log;
  std::vector<std::shared_ptr<FakeRank>> fakes;
};

// One rank's step: `tokens` rows of width 2.
StepContent Content(int64_t tokens, bool direct = false, uint64_t epoch = 0) {
  static const float kRows[4] = {1, 2, 3, 4};
  static const int32_t kIds[2] = {0, 1};
  static const float kWeights[2] = {1, 1};
  StepContent c;
  c.in.tokens = tokens;
  c.in.rows = tokens > 0 ? kRows : nullptr;
  c.in.slots = 1;
  c.in.expert_ids = absl::MakeConstSpan(kIds, tokens);
  c.in.weights = absl::MakeConstSpan(kWeights, tokens);
  c.hidden = 2;
  c.direct = direct;
  c.placement_epoch = epoch;
  return c;
}

// Each written rank answers the last step it was sent (through the
// channel, as WorkerGroup::OnResult does), with its rank as step_us.
std::function<void()> AnswerAll(StepChannel& channel, FakeGroup& group,
                                std::vector<int> silent = {}) {
  return [&channel, &group, silent] {
    for (int r = 0; r < static_cast<int>(group.fakes.size()); ++r) {
      if (std::find(silent.begin(), silent.end(), r) != silent.end()) continue;
      if (group.fakes[r]->steps.empty()) continue;
      const moe::v1::Step& s = group.fakes[r]->steps.back();
      StepReply reply;
      reply.generation = s.generation();
      reply.step_id = s.step_id();
      reply.times.step_us = static_cast<double>(r);
      channel.Answer(
          r, [] { return "fake"; }, reply);
    }
  };
}

TEST(StepChannel, SendsEachRankItsStepInOrderAndGathersTheRepliesByRank) {
  FakeGroup group(3);
  StepChannel channel(&group);
  const auto deadline = Clock::now() + milliseconds(5000);
  std::vector<StepReply> results;
  const StepChannel::Outcome out =
      channel.Run({Content(1), Content(2), Content(0)}, deadline,
                  AnswerAll(channel, group), &results);
  ASSERT_TRUE(out.step.status.ok()) << out.step.status;
  EXPECT_NE(out.id, 0u);
  EXPECT_EQ(out.step.generation, 7u);
  EXPECT_EQ(group.log, (std::vector<int>{0, 1, 2}));
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(group.fakes[r]->steps.size(), 1u);
    const moe::v1::Step& s = group.fakes[r]->steps[0];
    EXPECT_EQ(s.generation(), 7u);
    EXPECT_EQ(s.step_id(), out.id);
    EXPECT_GT(s.timeout_ms(), 4000);
    EXPECT_LE(s.timeout_ms(), 5000);
    EXPECT_EQ(s.expert_ids_size(), r == 2 ? 0 : r + 1);
  }
  ASSERT_EQ(results.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(results[r].times.step_us, r);
  // The next step gets another id (the buffers of this one reused).
  const StepChannel::Outcome next =
      channel.Run({Content(2), Content(1), Content(1)}, deadline,
                  AnswerAll(channel, group), &results);
  ASSERT_TRUE(next.step.status.ok()) << next.step.status;
  EXPECT_NE(next.id, out.id);
  EXPECT_EQ(group.fakes[0]->steps[1].expert_ids_size(), 2);
}

TEST(StepChannel, AnIdleRankOfADirectStepIsLeftOutOnceUpToDate) {
  FakeGroup group(2);
  StepChannel channel(&group);
  const auto deadline = Clock::now() + milliseconds(5000);
  std::vector<StepReply> results;
  auto run = [&](uint64_t epoch) {
    const StepChannel::Outcome out =
        channel.Run({Content(1, true, epoch), Content(0, true, epoch)},
                    deadline, AnswerAll(channel, group), &results);
    ASSERT_TRUE(out.step.status.ok()) << out.step.status;
  };
  run(0);  // rank 1 has had no step of this generation yet
  EXPECT_EQ(group.fakes[1]->steps.size(), 1u);
  run(0);  // now it has: left out, its reply empty
  EXPECT_EQ(group.fakes[1]->steps.size(), 1u);
  EXPECT_EQ(group.fakes[0]->steps.size(), 2u);
  EXPECT_EQ(results[1].step_id, 0u);
  run(1);  // the placement moved: it gets the step, to switch with rank 0
  EXPECT_EQ(group.fakes[1]->steps.size(), 2u);
  ++group.generation;  // and so in a new generation
  run(1);
  EXPECT_EQ(group.fakes[1]->steps.size(), 3u);
}

TEST(StepChannel, ALostRankFailsTheStepNamingItAndLaterRanksAreNotSent) {
  FakeGroup group(3);
  group.fakes[1]->lost = true;
  StepChannel channel(&group);
  std::vector<StepReply> results;
  const StepChannel::Outcome out =
      channel.Run({Content(1), Content(1), Content(1)},
                  Clock::now() + milliseconds(5000), nullptr, &results);
  EXPECT_EQ(out.step.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(out.step.status.message(),
            absl::StrCat("lost worker rank 1 (fake 1) sending step ", out.id));
  EXPECT_FALSE(out.step.intact);
  EXPECT_EQ(group.log, (std::vector<int>{0}));
}

TEST(StepChannel, AStepTheGroupRefusesIsNotSentAndLeavesItIntact) {
  FakeGroup group(2);
  group.refusal = absl::UnavailableError("worker group not ready");
  StepChannel channel(&group);
  std::vector<StepReply> results;
  bool overlapped = false;
  const StepChannel::Outcome out = channel.Run(
      {Content(1), Content(1)}, Clock::now() + milliseconds(5000),
      [&] { overlapped = true; }, &results);
  EXPECT_EQ(out.step.status, group.refusal);
  EXPECT_TRUE(out.step.intact);
  EXPECT_EQ(out.id, 0u);
  EXPECT_FALSE(overlapped);
  EXPECT_TRUE(group.log.empty());
}

TEST(StepChannel, ARankSilentPastTheDeadlineIsNamed) {
  FakeGroup group(3);
  StepChannel channel(&group);
  std::vector<StepReply> results;
  // The tracker's grace for a report's trip back is 1 s past the deadline.
  const StepChannel::Outcome out = channel.Run(
      {Content(1), Content(1), Content(1)}, Clock::now() + milliseconds(10),
      AnswerAll(channel, group, /*silent=*/{2}), &results);
  EXPECT_EQ(out.step.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      out.step.status.message(),
      absl::StrCat("step ", out.id, " timed out waiting for worker ranks [2]"));
  EXPECT_FALSE(out.step.intact);
}

}  // namespace
}  // namespace moe
