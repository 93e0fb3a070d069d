// The Batcher's threads with a StepRunner over a fake backend that holds a
// step in flight, and over a real model: each request gets its own rows of
// the step, and the step is counted in the expert stats.
#include "server/batching/batcher.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/synthetic_model.h"
#include "engine/cpu_backend.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "server/step/router_model.h"
#include "tests/server/batching/server_test_util.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

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

using Answers = testing::AnswersByName;

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

// The worker group's readiness as a test sets it.
class FakeReadiness : public GroupReadiness {
 public:
  GroupState state() const override { return st; }
  bool holds_steps() const override { return hold; }
  GroupState st;
  bool hold = false;
};

TEST(BatcherTest, AGroupNotReadyIsRefusedAtAdmissionUnlessStepsWaitForIt) {
  Gate gate;
  gate.open = true;  // every step answers at once (NOT_FOUND)
  std::vector<std::unique_ptr<StepRunner>> runners;
  runners.push_back(std::make_unique<StepRunner>(
      std::make_unique<GatedBackend>(&gate), nullptr));
  FakeReadiness readiness;
  readiness.st.world_size = 2;
  readiness.st.connected = 1;
  Batcher::Options o;
  o.readiness = &readiness;
  Answers answers;
  Batcher batcher(o, std::move(runners), nullptr, nullptr);

  const absl::Status refused = batcher.Submit(Request(answers, "refused"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(),
            "worker group not ready: 1 of 2 workers connected, 0 ready");
  // Steps that wait for the group (--hold-while-regrouping-ms): queued.
  readiness.hold = true;
  EXPECT_TRUE(batcher.Submit(Request(answers, "held")).ok());
  readiness.hold = false;
  readiness.st.ready = true;
  EXPECT_TRUE(batcher.Submit(Request(answers, "ready")).ok());
  ASSERT_TRUE(testing::WaitFor(
      [&] { return answers.Has("held") && answers.Has("ready"); },
      milliseconds(10000)));
  EXPECT_FALSE(answers.Has("refused")) << "a refused request is not answered";
  batcher.Shutdown();
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

// Requests submitted at once over a real model (one layer, no workers):
// whatever steps they share, each gets the engine's answer for its own rows
// and routing, every step's tokens reach the expert stats, and the stats
// count each token once.
TEST(BatcherTest, EachRequestGetsItsOwnRowsAndTheStepsAreCounted) {
  constexpr int64_t kHidden = 16;
  SyntheticArgs a;
  a.hidden = kHidden;
  a.inter = 8;
  a.experts = 4;
  a.top_k = 2;
  a.layers = 1;
  a.seed = 5;
  testing::SmallRouterModel m;
  ASSERT_NO_FATAL_FAILURE(testing::LoadSmallRouterModel(a, &m));

  ExpertStatsBook stats(a.experts);
  std::vector<std::unique_ptr<StepRunner>> runners;
  auto runner = CreateStepRunner(*m.model, nullptr);
  ASSERT_TRUE(runner.ok()) << runner.status();
  runners.push_back(std::move(*runner));
  Batcher::Options o;
  o.max_batch_tokens = 64;
  o.window = std::chrono::milliseconds(20);  // company for a waiting step

  constexpr int kRequests = 6;
  std::vector<std::vector<float>> inputs(kRequests);
  struct Got {
    std::vector<float> y;
    std::vector<int32_t> experts;
    int64_t batch_tokens = 0;
    bool ok = false;
  };
  std::mutex mu;
  std::vector<Got> got(kRequests);
  int answered = 0;
  int64_t total = 0;
  {
    Batcher batcher(o, std::move(runners), &stats, nullptr);
    for (int i = 0; i < kRequests; ++i) {
      const int64_t n = 1 + i % 3;
      total += n;
      inputs[i].resize(n * kHidden);
      FillSyntheticInput(100 + i, n * kHidden, inputs[i].data());
      auto r = std::make_unique<BatchRequest>();
      r->x.rows = n;
      r->x.cols = kHidden;
      r->x.dtype = DType::kF32;
      r->x.data = reinterpret_cast<const char*>(inputs[i].data());
      r->arrival = Clock::now();
      r->deadline = r->arrival + std::chrono::minutes(1);
      r->done = [&, i](const absl::Status& s, BatchResult& res) {
        std::lock_guard<std::mutex> lock(mu);
        got[i].ok = s.ok();
        got[i].y.assign(res.y.begin(), res.y.end());
        got[i].experts = res.routing.expert;
        got[i].batch_tokens = res.batch_tokens;
        ++answered;
      };
      ASSERT_TRUE(batcher.Submit(std::move(r)).ok());
    }
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          std::lock_guard<std::mutex> lock(mu);
          return answered == kRequests;
        },
        milliseconds(30000)));
  }
  for (int i = 0; i < kRequests; ++i) {
    const int64_t n = static_cast<int64_t>(inputs[i].size()) / kHidden;
    std::vector<float> want(inputs[i].size());
    Routing routing;
    ASSERT_TRUE(
        m.engine->Forward(0, inputs[i].data(), {.n = n}, want.data(), &routing)
            .ok());
    ASSERT_TRUE(got[i].ok) << i;
    EXPECT_EQ(got[i].y, want) << "request " << i;
    EXPECT_EQ(got[i].experts, routing.expert) << "request " << i;
    EXPECT_GE(got[i].batch_tokens, n);
  }
  const LayerStats l = stats.Snapshot(0, false);
  EXPECT_EQ(l.tokens, total);
  EXPECT_GE(l.steps, 1);
}

}  // namespace
}  // namespace moe
