// What Shutdown reaches of a session from another thread: the call is
// cancelled before there is a queue, the queue closed once there is one, and
// the executor's wait for the reader ends when the reader is done.
#include "worker/session_control.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "moe/v1/worker.grpc.pb.h"

namespace moe {
namespace {

using std::chrono::milliseconds;

// How a Join call on `ctx` ends against an address nothing listens on:
// CANCELLED when the context was cancelled, UNAVAILABLE when not.
grpc::StatusCode JoinEnd(grpc::ClientContext& ctx) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stub = moe::v1::WorkerControl::NewStub(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  auto rw = stub->Join(&ctx);
  moe::v1::RouterMessage msg;
  while (rw->Read(&msg)) {
  }
  return rw->Finish().error_code();
}

moe::v1::RouterMessage Step(uint64_t id) {
  moe::v1::RouterMessage msg;
  msg.mutable_step()->set_step_id(id);
  return msg;
}

// A session begun on `ctx`, its queue set: the state once the reader runs.
class SessionWithQueue : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(control_.Begin(&ctx_));
    control_.SetQueue(&queue_);
  }

  SessionControl control_;
  grpc::ClientContext ctx_;
  BlockingQueue<moe::v1::RouterMessage> queue_{16};
};

TEST(SessionControlTest, StopBeforeBeginKeepsTheSessionFromStarting) {
  SessionControl control;
  EXPECT_FALSE(control.stopping());
  control.Stop();
  EXPECT_TRUE(control.stopping());
  EXPECT_TRUE(control.stopping_flag()->load());
  grpc::ClientContext ctx;
  EXPECT_FALSE(control.Begin(&ctx));
}

TEST(SessionControlTest, StopBeforeTheQueueCancelsTheCall) {
  SessionControl control;
  grpc::ClientContext ctx;
  ASSERT_TRUE(control.Begin(&ctx));
  control.Stop();
  EXPECT_EQ(JoinEnd(ctx), grpc::StatusCode::CANCELLED);
  // A queue set after the stop is closed at once.
  BlockingQueue<moe::v1::RouterMessage> queue(16);
  control.SetQueue(&queue);
  EXPECT_FALSE(queue.Push(Step(1)));
}

TEST_F(SessionWithQueue, StopClosesTheQueueAndLeavesTheCall) {
  ASSERT_TRUE(queue_.Push(Step(7)));
  control_.Stop();
  EXPECT_FALSE(queue_.Push(Step(8)));
  // What was queued before the stop is still handed out; then the end.
  auto first = queue_.Pop();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->step().step_id(), 7u);
  EXPECT_FALSE(queue_.Pop().has_value());
  EXPECT_EQ(JoinEnd(ctx_), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SessionWithQueue, AfterTheReaderIsDoneStopCancelsTheCallNotTheQueue) {
  control_.ReaderDone();
  control_.Stop();
  EXPECT_TRUE(queue_.Push(Step(1)));
  EXPECT_EQ(JoinEnd(ctx_), grpc::StatusCode::CANCELLED);
}

TEST(SessionControlTest, AfterEndStopLeavesTheCallAlone) {
  SessionControl control;
  grpc::ClientContext ctx;
  ASSERT_TRUE(control.Begin(&ctx));
  control.End();
  control.Stop();
  EXPECT_EQ(JoinEnd(ctx), grpc::StatusCode::UNAVAILABLE);
}

TEST(SessionControlTest, AwaitReaderDoneWaitsForTheReaderOfThisSession) {
  SessionControl control;
  grpc::ClientContext first;
  ASSERT_TRUE(control.Begin(&first));
  EXPECT_FALSE(control.AwaitReaderDone(milliseconds(20)));
  std::thread reader([&] {
    std::this_thread::sleep_for(milliseconds(50));
    control.ReaderDone();
  });
  EXPECT_TRUE(control.AwaitReaderDone(std::chrono::seconds(10)));
  reader.join();
  // The next session's reader has not finished yet.
  control.End();
  grpc::ClientContext second;
  ASSERT_TRUE(control.Begin(&second));
  EXPECT_FALSE(control.AwaitReaderDone(milliseconds(20)));
}

}  // namespace
}  // namespace moe
