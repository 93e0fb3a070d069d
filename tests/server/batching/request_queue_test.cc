// RequestQueue alone, with no step behind it: what Next hands out and
// when, the deadlines of queued requests, admission, and closing.
#include "server/batching/request_queue.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/batching/server_test_util.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using Answers = testing::AnswersByName;

std::unique_ptr<BatchRequest> Request(
    Answers& answers, const std::string& name, int64_t layer, int64_t tokens,
    milliseconds deadline = milliseconds(60000)) {
  auto r = std::make_unique<BatchRequest>();
  r->layer = layer;
  r->x.rows = tokens;
  r->x.cols = 4;
  r->arrival = Clock::now();
  r->deadline = r->arrival + deadline;
  r->done = answers.For(name);
  return r;
}

std::vector<int64_t> Layers(const Batch& batch) {
  std::vector<int64_t> layers;
  for (const auto& r : batch) layers.push_back(r->layer);
  return layers;
}

RequestQueue::Options Opts(int64_t max_batch_tokens,
                           milliseconds window = milliseconds(0),
                           int64_t max_queue_tokens = 0) {
  RequestQueue::Options o;
  o.policy.max_batch_tokens = max_batch_tokens;
  o.policy.window = window;
  o.max_queue_tokens = max_queue_tokens;
  return o;
}

TEST(RequestQueueTest, NextHandsOutSelectBatchsChoiceAndCountsTokens) {
  Answers answers;
  RequestQueue q(Opts(/*max_batch_tokens=*/8), nullptr);
  ASSERT_TRUE(q.Push(Request(answers, "a", 0, 4)).ok());
  ASSERT_TRUE(q.Push(Request(answers, "b", 1, 4)).ok());
  ASSERT_TRUE(q.Push(Request(answers, "c", 0, 4)).ok());
  ASSERT_TRUE(q.Push(Request(answers, "d", 0, 1)).ok());
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.tokens(), 13);
  // The oldest request's layer, FIFO, within 8 tokens.
  std::optional<Batch> b = q.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Layers(*b), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ((*b)[0]->x.rows + (*b)[1]->x.rows, 8);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.tokens(), 5);
  q.StepDone();
  b = q.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Layers(*b), (std::vector<int64_t>{1}));
  q.StepDone();
  b = q.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Layers(*b), (std::vector<int64_t>{0}));
  EXPECT_EQ(q.tokens(), 0);
  q.StepDone();
  q.Close();
  // Nothing was answered: the requests were handed out.
  EXPECT_FALSE(answers.Has("a"));
}

// With a step in flight, a request waits for its window; once the step is
// done a waiting request starts at once.
TEST(RequestQueueTest, WaitsForTheWindowOnlyWhileAStepIsInFlight) {
  Answers answers;
  RequestQueue q(Opts(64, /*window=*/milliseconds(60000)), nullptr);
  ASSERT_TRUE(q.Push(Request(answers, "first", 0, 1)).ok());
  std::optional<Batch> first = q.Next();  // nothing in flight: at once
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(q.Push(Request(answers, "second", 0, 1)).ok());
  std::mutex mu;
  bool taken = false;
  std::thread taker([&] {
    std::optional<Batch> b = q.Next();
    std::lock_guard<std::mutex> lock(mu);
    taken = b.has_value();
  });
  std::this_thread::sleep_for(milliseconds(100));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_FALSE(taken) << "a request did not wait for company";
  }
  q.StepDone();
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return taken;
      },
      milliseconds(10000)))
      << "the step's end did not start the waiting request";
  q.Close();  // a taker still waiting returns
  taker.join();
}

TEST(RequestQueueTest, ExpiredRequestsAreAnsweredAndNeverHandedOut) {
  Answers answers;
  RequestQueue q(Opts(64), nullptr);
  ASSERT_TRUE(q.Push(Request(answers, "late", 0, 2, milliseconds(-1))).ok());
  ASSERT_TRUE(q.Push(Request(answers, "live", 1, 3)).ok());
  std::optional<Batch> b = q.Next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(Layers(*b), (std::vector<int64_t>{1}));
  ASSERT_TRUE(answers.Has("late"));
  EXPECT_EQ(answers.Code("late"), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(answers.Has("live"));
  EXPECT_EQ(q.tokens(), 0);
  q.StepDone();
}

TEST(RequestQueueTest, AdmissionBoundsTheQueuedTokensAndLearnsTheStepCost) {
  Answers answers;
  RequestQueue q(Opts(64, milliseconds(0), /*max_queue_tokens=*/10), nullptr);
  ASSERT_TRUE(q.Push(Request(answers, "a", 0, 6)).ok());
  ASSERT_TRUE(q.Push(Request(answers, "b", 0, 4)).ok());
  EXPECT_EQ(q.Push(Request(answers, "c", 0, 1)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(answers.Has("c"));  // refused, not answered
  EXPECT_EQ(q.tokens(), 10);
  // 10 tokens ahead at 1 s each cannot be worked off within a minute...
  q.RecordStepCost(10.0);
  EXPECT_TRUE(q.Push(Request(answers, "d", 0, 0, milliseconds(120000))).ok());
  EXPECT_EQ(q.Push(Request(answers, "e", 0, 0)).code(),
            absl::StatusCode::kResourceExhausted);
  // ... and the lowest recent cost counts: at 1 ms each they can.
  q.RecordStepCost(0.001);
  EXPECT_TRUE(q.Push(Request(answers, "f", 0, 0)).ok());
  q.Close();
}

TEST(RequestQueueTest, CloseAnswersTheQueuedAndWakesTheWaiters) {
  Answers answers;
  RequestQueue q(Opts(64, milliseconds(60000)), nullptr);
  ASSERT_TRUE(q.Push(Request(answers, "running", 0, 1)).ok());
  std::optional<Batch> running = q.Next();
  ASSERT_TRUE(running.has_value());
  ASSERT_TRUE(q.Push(Request(answers, "queued", 0, 1)).ok());
  std::mutex mu;
  int returned = 0;
  std::vector<std::thread> waiters;
  for (int i = 0; i < 2; ++i) {
    waiters.emplace_back([&] {
      const bool got = q.Next().has_value();
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_FALSE(got);
      ++returned;
    });
  }
  q.Close();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(returned, 2);
  ASSERT_TRUE(answers.Has("queued"));
  EXPECT_EQ(answers.Code("queued"), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(answers.Has("running"));
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.tokens(), 0);
  EXPECT_EQ(q.Push(Request(answers, "after", 0, 1)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(answers.Has("after"));
}

}  // namespace
}  // namespace moe
