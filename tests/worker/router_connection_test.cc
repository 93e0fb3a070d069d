// A worker's connection to the router against a fake router service:
// registration, messages handed over in order, heartbeats while a message
// is being handled, reconnecting, and leaving on Shutdown.
#include "worker/router_connection.h"

#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/testutil/wait_for.h"
#include "tests/worker/fake_router.h"

namespace moe {
namespace {

using std::chrono::milliseconds;
using testing::FakeRouter;
using testing::IsReady;
using testing::IsResult;
using testing::StepMessage;
using testing::WaitFor;

// Records what it is handed; answers an Assignment with Ready and a Step
// with its result after `step_time`.
class RecordingHandler final : public RouterMessageHandler {
 public:
  explicit RecordingHandler(milliseconds step_time = milliseconds(0))
      : step_time_(step_time) {}

  void Handle(const moe::v1::RouterMessage& msg, JoinStream& stream) override {
    {
      absl::MutexLock lock(&mu_);
      handled_.push_back(msg);
    }
    moe::v1::WorkerMessage out;
    if (msg.has_assignment()) {
      out.mutable_ready()->set_generation(msg.assignment().generation());
    } else if (msg.has_step()) {
      std::this_thread::sleep_for(step_time_);
      out.mutable_result()->set_step_id(msg.step().step_id());
    }
    absl::MutexLock lock(&mu_);
    newest_after_.push_back(stream.newest_generation());
    stream.Write(out);
  }
  void SessionEnded() override {
    absl::MutexLock lock(&mu_);
    ++sessions_ended_;
  }

  std::vector<moe::v1::RouterMessage> handled() const {
    absl::MutexLock lock(&mu_);
    return handled_;
  }
  std::vector<uint64_t> newest_after() const {
    absl::MutexLock lock(&mu_);
    return newest_after_;
  }
  int sessions_ended() const {
    absl::MutexLock lock(&mu_);
    return sessions_ended_;
  }

 private:
  const milliseconds step_time_;
  mutable absl::Mutex mu_;
  std::vector<moe::v1::RouterMessage> handled_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> newest_after_ ABSL_GUARDED_BY(mu_);
  int sessions_ended_ ABSL_GUARDED_BY(mu_) = 0;
};

// A connection running on a thread of its own, shut down at the end.
class Running {
 public:
  Running(RouterConnectionOptions o, RouterMessageHandler* handler)
      : connection_(std::move(o), handler),
        thread_([this] { connection_.Run(); }) {}
  ~Running() { Stop(); }
  void Stop() {
    connection_.Shutdown();
    if (thread_.joinable()) thread_.join();
  }

 private:
  RouterConnection connection_;
  std::thread thread_;
};

RouterConnectionOptions Options(const FakeRouter& router) {
  RouterConnectionOptions o;
  o.router = router.address();
  o.device = "cpu";
  o.threads = 3;
  o.device_identity = "test-device";
  o.shares_device = false;
  o.collective_host = "127.0.0.7";
  o.auth_token = "secret";
  o.reconnect_delay = milliseconds(10);
  return o;
}

moe::v1::RouterMessage Assignment(uint64_t generation,
                                  int64_t heartbeat_ms = 0) {
  moe::v1::RouterMessage m;
  m.mutable_assignment()->set_generation(generation);
  m.mutable_assignment()->set_heartbeat_interval_ms(heartbeat_ms);
  return m;
}

TEST(RouterConnectionTest, RegistersWithItsIdentityAndToken) {
  FakeRouter router;
  RecordingHandler handler;
  Running running(Options(router), &handler);
  ASSERT_TRUE(
      WaitFor([&] { return router.joins() >= 1; }, milliseconds(10000)));
  const moe::v1::Register reg = router.registrations().at(0);
  EXPECT_EQ(reg.device(), "cpu");
  EXPECT_EQ(reg.threads(), 3);
  EXPECT_EQ(reg.collective_host(), "127.0.0.7");
  EXPECT_EQ(reg.pid(), getpid());
  EXPECT_EQ(reg.device_identity(), "test-device");
  EXPECT_FALSE(reg.shares_device());
  EXPECT_FALSE(reg.host().empty());
  EXPECT_EQ(router.tokens().at(0), "Bearer secret");
}

TEST(RouterConnectionTest, HandsMessagesOverInOrderAndCarriesTheAnswers) {
  FakeRouter router;
  RecordingHandler handler;
  Running running(Options(router), &handler);
  ASSERT_TRUE(router.Send(Assignment(1)));
  for (uint64_t id = 1; id <= 5; ++id)
    ASSERT_TRUE(router.Send(StepMessage(1, id)));
  ASSERT_TRUE(router.AwaitReceived(5, IsResult));
  const auto handled = handler.handled();
  ASSERT_EQ(handled.size(), 6u);
  EXPECT_TRUE(handled[0].has_assignment());
  const auto received = router.received();
  std::vector<uint64_t> ids;
  for (const auto& m : received) {
    if (m.has_result()) ids.push_back(m.result().step_id());
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(router.AwaitReceived(1, IsReady));
}

TEST(RouterConnectionTest, HeartbeatsAtTheAssignedIntervalWhileAStepRuns) {
  FakeRouter router;
  RecordingHandler handler(milliseconds(800));
  Running running(Options(router), &handler);
  ASSERT_TRUE(router.Send(Assignment(4, /*heartbeat_ms=*/20)));
  ASSERT_TRUE(router.AwaitReceived(1, IsReady));
  ASSERT_TRUE(router.Send(StepMessage(4, 1)));
  ASSERT_TRUE(router.AwaitReceived(1, IsResult));
  // Between the Ready and the result (800 ms of step) beats kept coming,
  // each naming the newest generation read.
  int beats_during_step = 0;
  bool after_ready = false;
  for (const auto& m : router.received()) {
    if (m.has_ready()) after_ready = true;
    if (m.has_result()) break;
    if (after_ready && m.has_heartbeat()) {
      ++beats_during_step;
      EXPECT_EQ(m.heartbeat().generation(), 4u);
    }
  }
  EXPECT_GE(beats_during_step, 10);
}

TEST(RouterConnectionTest, ReaderRunsAheadOfTheHandler) {
  FakeRouter router;
  RecordingHandler handler(milliseconds(300));
  Running running(Options(router), &handler);
  ASSERT_TRUE(router.Send(StepMessage(1, 1)));
  ASSERT_TRUE(router.Send(Assignment(2)));
  ASSERT_TRUE(router.AwaitReceived(1, IsReady));
  // Still in the step of generation 1, the handler already knew of 2.
  EXPECT_EQ(handler.newest_after().at(0), 2u);
}

TEST(RouterConnectionTest, DialsAgainWhenRefusedOrCutOff) {
  FakeRouter router;
  router.RefuseNext(grpc::Status(grpc::StatusCode::UNAVAILABLE, "not yet"));
  RecordingHandler handler;
  Running running(Options(router), &handler);
  ASSERT_TRUE(router.Send(Assignment(1)));  // on the second Join
  EXPECT_EQ(router.joins(), 2);
  ASSERT_TRUE(router.AwaitReceived(1, IsReady));
  router.CutOff();
  ASSERT_TRUE(
      WaitFor([&] { return router.joins() >= 3; }, milliseconds(10000)));
  ASSERT_TRUE(router.Send(Assignment(2)));
  ASSERT_TRUE(router.AwaitReceived(2, IsReady));
  EXPECT_GE(handler.sessions_ended(), 2);
  // Every session registered afresh.
  for (const auto& reg : router.registrations()) {
    EXPECT_EQ(reg.collective_host(), "127.0.0.7");
  }
}

TEST(RouterConnectionTest, ShutdownFinishesTheRunningStepThenLeaves) {
  FakeRouter router;
  RecordingHandler handler(milliseconds(500));
  auto running = std::make_unique<Running>(Options(router), &handler);
  ASSERT_TRUE(router.Send(StepMessage(1, 1)));
  ASSERT_TRUE(router.Send(StepMessage(1, 2)));
  ASSERT_TRUE(router.Send(StepMessage(1, 3)));
  ASSERT_TRUE(
      WaitFor([&] { return !handler.handled().empty(); }, milliseconds(10000)));
  running->Stop();  // returns once the connection's Run has
  // The running step was answered; those behind it were never started;
  // the worker closed its side (not cut off), once.
  EXPECT_EQ(handler.handled().size(), 1u);
  EXPECT_TRUE(router.AwaitReceived(1, IsResult));
  EXPECT_TRUE(WaitFor([&] { return router.left() == 1; }, milliseconds(5000)));
  EXPECT_EQ(router.joins(), 1);
  EXPECT_EQ(handler.sessions_ended(), 1);
}

}  // namespace
}  // namespace moe
