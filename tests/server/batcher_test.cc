// Batch selection (SelectBatch) without threads, and the Batcher's threads
// with a StepRunner over a fake backend that holds a step in flight.
#include "server/batcher.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu_backend.h"
#include "gtest/gtest.h"
#include "tests/testutil/wait_for.h"

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

// A backend whose every step stops in HasLayer until the gate opens, then
// reports the layer missing (the step answers NOT_FOUND). Nothing else of
// it is ever reached.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int entered = 0;
};

class GatedBackend : public CpuBackend {
 public:
  explicit GatedBackend(Gate* gate) : CpuBackend(1), gate_(gate) {}
  absl::StatusOr<std::unique_ptr<ExpertBackend>> Fork() const override {
    return std::make_unique<GatedBackend>(gate_);
  }
  bool HasLayer(int64_t) const override {
    std::unique_lock<std::mutex> lock(gate_->mu);
    ++gate_->entered;
    gate_->cv.wait(lock, [&] { return gate_->open; });
    return false;
  }

 private:
  Gate* gate_;
};

// Answers by request name.
class Answers {
 public:
  std::function<void(const absl::Status&, BatchResult&)> For(
      const std::string& name) {
    return [this, name](const absl::Status& s, BatchResult&) {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_TRUE(codes_.emplace(name, s.code()).second)
          << name << " answered twice";
    };
  }
  bool Has(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return codes_.count(name) > 0;
  }
  absl::StatusCode Code(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    return codes_.at(name);
  }

 private:
  std::mutex mu_;
  std::map<std::string, absl::StatusCode> codes_;
};

std::unique_ptr<BatchRequest> Request(Answers& answers,
                                      const std::string& name) {
  auto r = std::make_unique<BatchRequest>();
  r->layer = 0;
  static const float kOnes[4] = {1, 1, 1, 1};
  r->x.rows = 1;
  r->x.cols = 4;
  r->x.dtype = DType::kF32;
  r->x.data = reinterpret_cast<const char*>(kOnes);
  r->arrival = Clock::now();
  r->deadline = r->arrival + std::chrono::minutes(1);
  r->done = answers.For(name);
  return r;
}

TEST(BatcherTest, ShutdownAnswersQueuedRequestsUnavailableAtOnce) {
  Gate gate;
  std::vector<std::unique_ptr<StepRunner>> runners;
  runners.push_back(std::make_unique<StepRunner>(
      std::make_unique<GatedBackend>(&gate), nullptr));
  Batcher::Options o;
  o.max_batch_tokens = 64;
  o.window = std::chrono::seconds(30);  // only a lone request may skip it
  // Before the batcher: its threads answer into it until it is gone.
  Answers answers;
  Batcher batcher(o, std::move(runners), nullptr, nullptr);

  // Nothing in flight: the first request starts at once despite the window.
  ASSERT_TRUE(batcher.Submit(Request(answers, "running")).ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(gate.mu);
        return gate.entered == 1;
      },
      milliseconds(10000)))
      << "a lone request waited for the batch window";
  ASSERT_TRUE(batcher.Submit(Request(answers, "queued1")).ok());
  ASSERT_TRUE(batcher.Submit(Request(answers, "queued2")).ok());
  EXPECT_EQ(batcher.queued(), 2u);

  std::thread shutdown([&] { batcher.Shutdown(); });
  // The queued requests are answered while the step is still in flight.
  ASSERT_TRUE(testing::WaitFor(
      [&] { return answers.Has("queued1") && answers.Has("queued2"); },
      milliseconds(10000)))
      << "queued requests were not answered at shutdown";
  EXPECT_EQ(answers.Code("queued1"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(answers.Code("queued2"), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(answers.Has("running"));
  EXPECT_EQ(batcher.Submit(Request(answers, "late")).code(),
            absl::StatusCode::kUnavailable);

  {
    std::lock_guard<std::mutex> lock(gate.mu);
    gate.open = true;
  }
  gate.cv.notify_all();
  shutdown.join();
  // The step in flight answers with its own result.
  ASSERT_TRUE(answers.Has("running"));
  EXPECT_EQ(answers.Code("running"), absl::StatusCode::kNotFound);
  EXPECT_FALSE(answers.Has("late"));
  EXPECT_EQ(batcher.queued(), 0u);
}

TEST(BatcherTest, ExpiredQueuedRequestIsAnsweredDeadlineExceeded) {
  Gate gate;
  gate.open = true;
  std::vector<std::unique_ptr<StepRunner>> runners;
  runners.push_back(std::make_unique<StepRunner>(
      std::make_unique<GatedBackend>(&gate), nullptr));
  // Before the batcher: its threads answer into it until it is gone.
  Answers answers;
  Batcher batcher({}, std::move(runners), nullptr, nullptr);
  auto r = Request(answers, "expired");
  r->deadline = r->arrival - milliseconds(1);
  ASSERT_TRUE(batcher.Submit(std::move(r)).ok());
  ASSERT_TRUE(testing::WaitFor([&] { return answers.Has("expired"); },
                               milliseconds(10000)));
  EXPECT_EQ(answers.Code("expired"), absl::StatusCode::kDeadlineExceeded);
  std::lock_guard<std::mutex> lock(gate.mu);
  EXPECT_EQ(gate.entered, 0) << "an expired request cost a step";
}

TEST(AdmitTest, QueueBoundRefusesTheExcessNamingTheLimit) {
  const Clock::time_point far = kT0 + std::chrono::hours(1);
  EXPECT_TRUE(Admit(10, 90, 100, 0, 1, kT0, far).ok());
  const char* reason = nullptr;
  const absl::Status s = Admit(11, 90, 100, 0, 1, kT0, far, &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("--max-queue-tokens 100"), std::string::npos)
      << s.message();
  EXPECT_STREQ(reason, "queue_full");
  // 0: unbounded; a request of no tokens always fits.
  EXPECT_TRUE(Admit(1000, 1000, 0, 0, 1, kT0, far).ok());
  EXPECT_TRUE(Admit(0, 100, 100, 0, 1, kT0, far).ok());
}

TEST(AdmitTest, DeadlineThatTheQueueAheadOutlastsIsRefused) {
  // 1000 tokens ahead at 100 us each: 100 ms of work; 50 with two steps
  // at once.
  const double per_token = 100e-6;
  const char* reason = nullptr;
  const absl::Status s =
      Admit(1, 1000, 0, per_token, 1, kT0, kT0 + milliseconds(80), &reason);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("deadline"), std::string::npos) << s.message();
  EXPECT_STREQ(reason, "deadline");
  EXPECT_TRUE(
      Admit(1, 1000, 0, per_token, 2, kT0, kT0 + milliseconds(80)).ok());
  EXPECT_TRUE(
      Admit(1, 1000, 0, per_token, 1, kT0, kT0 + milliseconds(120)).ok());
  // No estimate yet, or nothing ahead: admitted.
  EXPECT_TRUE(Admit(1, 1000, 0, 0, 1, kT0, kT0 + milliseconds(1)).ok());
  EXPECT_TRUE(Admit(500, 0, 0, per_token, 1, kT0, kT0 + milliseconds(1)).ok());
}

TEST(BatcherTest, QueueIsBoundedByTokensAndRefusesAtOnce) {
  Gate gate;
  std::vector<std::unique_ptr<StepRunner>> runners;
  runners.push_back(std::make_unique<StepRunner>(
      std::make_unique<GatedBackend>(&gate), nullptr));
  Batcher::Options o;
  o.max_batch_tokens = 1;  // one request per step
  o.max_queue_tokens = 3;
  // Before the batcher: its threads answer into it until it is gone.
  Answers answers;
  Batcher batcher(o, std::move(runners), nullptr, nullptr);
  ASSERT_TRUE(batcher.Submit(Request(answers, "running")).ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(gate.mu);
        return gate.entered == 1;
      },
      milliseconds(10000)));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(batcher.Submit(Request(answers, absl::StrCat("q", i))).ok());
  }
  EXPECT_EQ(batcher.queued_tokens(), 3);
  const absl::Status s = batcher.Submit(Request(answers, "excess"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_FALSE(answers.Has("excess"));  // refused, not answered
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    gate.open = true;
  }
  gate.cv.notify_all();
  ASSERT_TRUE(
      testing::WaitFor([&] { return answers.Has("q2"); }, milliseconds(10000)));
  EXPECT_EQ(batcher.queued_tokens(), 0);
  EXPECT_TRUE(batcher.Submit(Request(answers, "later")).ok());
}

}  // namespace
}  // namespace moe
