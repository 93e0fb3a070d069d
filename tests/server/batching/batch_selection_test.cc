// Batch selection (SelectBatch) and admission (Admit): pure functions of
// the queue's view and the clock, tested without threads.
#include "server/batching/batch_selection.h"

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using Take = std::vector<size_t>;

const Clock::time_point kT0 = Clock::time_point() + std::chrono::hours(1);
const Clock::time_point kFar = kT0 + std::chrono::hours(1);

QueuedRequestView Req(int64_t layer, int64_t tokens, microseconds arrived,
                      Clock::time_point deadline = kFar) {
  return {layer, tokens, kT0 + arrived, deadline};
}

BatchPolicy Policy(int64_t max_tokens, microseconds window) {
  return {max_tokens, window};
}

TEST(SelectBatchTest, EmptyQueueWaitsForARequest) {
  const BatchDecision d =
      SelectBatch({}, kT0, Policy(64, microseconds(500)), 1);
  EXPECT_TRUE((d.take).empty());
  EXPECT_TRUE((d.expired).empty());
  EXPECT_FALSE(d.wake_at.has_value());
}

TEST(SelectBatchTest, LoneRequestStartsAtOnceWithNothingInFlight) {
  const std::vector<QueuedRequestView> q = {Req(0, 4, microseconds(0))};
  const BatchDecision d =
      SelectBatch(q, kT0, Policy(64, microseconds(500)), /*in_flight=*/0);
  EXPECT_EQ(d.take, (Take{0}));
  EXPECT_FALSE(d.wake_at.has_value());
}

TEST(SelectBatchTest, WaitsForTheWindowWhileOtherStepsAreInFlight) {
  const std::vector<QueuedRequestView> q = {Req(0, 4, microseconds(0)),
                                            Req(0, 4, microseconds(100))};
  const BatchPolicy p = Policy(64, microseconds(500));
  BatchDecision d = SelectBatch(q, kT0 + microseconds(200), p, 1);
  EXPECT_TRUE((d.take).empty());
  ASSERT_TRUE(d.wake_at.has_value());
  // The oldest request's window decides.
  EXPECT_EQ(*d.wake_at, kT0 + microseconds(500));
  // Just before it closes: still waiting; when it closes: both go.
  d = SelectBatch(q, kT0 + microseconds(499), p, 1);
  EXPECT_TRUE((d.take).empty());
  d = SelectBatch(q, kT0 + microseconds(500), p, 1);
  EXPECT_EQ(d.take, (Take{0, 1}));
}

TEST(SelectBatchTest, ZeroWindowNeverWaits) {
  const std::vector<QueuedRequestView> q = {Req(0, 4, microseconds(0))};
  const BatchDecision d = SelectBatch(q, kT0, Policy(64, microseconds(0)), 3);
  EXPECT_EQ(d.take, (Take{0}));
}

TEST(SelectBatchTest, StartsAtOnceWhenTheQueuedTokensFillTheStep) {
  const BatchPolicy p = Policy(16, microseconds(500));
  std::vector<QueuedRequestView> q = {Req(0, 8, microseconds(0)),
                                      Req(0, 7, microseconds(1))};
  EXPECT_TRUE((SelectBatch(q, kT0 + microseconds(2), p, 1).take).empty());
  q.push_back(Req(0, 1, microseconds(2)));  // 16 tokens: full
  EXPECT_EQ(SelectBatch(q, kT0 + microseconds(2), p, 1).take, (Take{0, 1, 2}));
}

TEST(SelectBatchTest, TokenCapPassesOverRequestsThatDoNotFit) {
  const BatchPolicy p = Policy(16, microseconds(0));
  const std::vector<QueuedRequestView> q = {
      Req(0, 10, microseconds(0)), Req(0, 10, microseconds(1)),
      Req(0, 6, microseconds(2)), Req(0, 1, microseconds(3))};
  // FIFO first fit: 10 + 6 = 16; the second 10 and the 1 wait.
  EXPECT_EQ(SelectBatch(q, kT0 + microseconds(5), p, 0).take, (Take{0, 2}));
}

TEST(SelectBatchTest, OldestRequestIsTakenEvenAboveTheCap) {
  const std::vector<QueuedRequestView> q = {Req(0, 40, microseconds(0)),
                                            Req(0, 1, microseconds(1))};
  EXPECT_EQ(
      SelectBatch(q, kT0 + microseconds(5), Policy(16, microseconds(0)), 0)
          .take,
      (Take{0}));
}

TEST(SelectBatchTest, OldestRequestPicksTheLayer) {
  const std::vector<QueuedRequestView> q = {
      Req(1, 2, microseconds(0)), Req(0, 2, microseconds(1)),
      Req(1, 2, microseconds(2)), Req(0, 2, microseconds(3)),
      Req(1, 2, microseconds(4))};
  const BatchDecision d =
      SelectBatch(q, kT0 + microseconds(5), Policy(64, microseconds(0)), 0);
  EXPECT_EQ(d.take, (Take{0, 2, 4}));
}

TEST(SelectBatchTest, OtherLayersDoNotFillTheStep) {
  const BatchPolicy p = Policy(8, microseconds(500));
  const std::vector<QueuedRequestView> q = {Req(0, 4, microseconds(0)),
                                            Req(1, 8, microseconds(1))};
  // Layer 0 has 4 of 8 tokens queued: it still waits for its window.
  const BatchDecision d = SelectBatch(q, kT0 + microseconds(2), p, 1);
  EXPECT_TRUE((d.take).empty());
}

TEST(SelectBatchTest, ExpiredRequestsAreReportedAndNeverTaken) {
  const Clock::time_point now = kT0 + microseconds(1000);
  const std::vector<QueuedRequestView> q = {
      Req(0, 4, microseconds(0), now),  // expires exactly now
      Req(1, 4, microseconds(1), now + microseconds(1)),
      Req(0, 4, microseconds(2), kT0 + microseconds(10))};
  const BatchDecision d = SelectBatch(q, now, Policy(64, microseconds(0)), 0);
  EXPECT_EQ(d.expired, (Take{0, 2}));
  // The oldest live request (layer 1) picks the layer.
  EXPECT_EQ(d.take, (Take{1}));
}

TEST(SelectBatchTest, OnlyExpiredRequestsMeansNothingToRun) {
  const std::vector<QueuedRequestView> q = {
      Req(0, 4, microseconds(0), kT0 + microseconds(1))};
  const BatchDecision d =
      SelectBatch(q, kT0 + microseconds(5), Policy(64, microseconds(500)), 1);
  EXPECT_EQ(d.expired, (Take{0}));
  EXPECT_TRUE((d.take).empty());
  EXPECT_FALSE(d.wake_at.has_value());
}

TEST(SelectBatchTest, WakesForTheEarliestDeadlineBeforeTheWindowCloses) {
  const std::vector<QueuedRequestView> q = {
      Req(0, 4, microseconds(0)),
      Req(0, 4, microseconds(1), kT0 + microseconds(200))};
  const BatchDecision d =
      SelectBatch(q, kT0 + microseconds(5), Policy(64, microseconds(500)), 1);
  EXPECT_TRUE((d.take).empty());
  ASSERT_TRUE(d.wake_at.has_value());
  EXPECT_EQ(*d.wake_at, kT0 + microseconds(200));
}

TEST(AdmitTest, QueueBoundRefusesTheExcessNamingTheLimit) {
  const Clock::time_point far = kT0 + std::chrono::hours(1);
  EXPECT_TRUE(Admit(10, {90, 100, 0, 1}, kT0, far).ok());
  const char* reason = nullptr;
  const absl::Status s = Admit(11, {90, 100, 0, 1}, kT0, far, &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max-queue-tokens 100"), std::string::npos)
      << s.message();
  EXPECT_STREQ(reason, "queue_full");
  // 0: unbounded; a request of no tokens always fits.
  EXPECT_TRUE(Admit(1000, {1000, 0, 0, 1}, kT0, far).ok());
  EXPECT_TRUE(Admit(0, {100, 100, 0, 1}, kT0, far).ok());
}

TEST(AdmitTest, DeadlineThatTheQueueAheadOutlastsIsRefused) {
  // 1000 tokens ahead at 100 us each: 100 ms of work; 50 with two steps
  // at once.
  const double per_token = 100e-6;
  const char* reason = nullptr;
  const absl::Status s =
      Admit(1, {1000, 0, per_token, 1}, kT0, kT0 + milliseconds(80), &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("deadline"), std::string::npos) << s.message();
  EXPECT_STREQ(reason, "deadline");
  EXPECT_TRUE(
      Admit(1, {1000, 0, per_token, 2}, kT0, kT0 + milliseconds(80)).ok());
  EXPECT_TRUE(
      Admit(1, {1000, 0, per_token, 1}, kT0, kT0 + milliseconds(120)).ok());
  // No estimate yet, or nothing ahead: admitted.
  EXPECT_TRUE(Admit(1, {1000, 0, 0, 1}, kT0, kT0 + milliseconds(1)).ok());
  EXPECT_TRUE(
      Admit(500, {0, 0, per_token, 1}, kT0, kT0 + milliseconds(1)).ok());
}

}  // namespace
}  // namespace moe
