// The worker's handling of the router's messages, with a real CPU step
// executor against a fake router (tests/worker/fake_router.h): an
// Assignment loads the experts and joins a group through the router's
// store, failures are answered with their reason, a step outside the
// worker's group is refused, and what a newer generation supersedes is
// skipped.
#include "worker/worker_agent.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "proto/model_spec.h"
#include "tests/testutil/wait_for.h"
#include "tests/worker/fake_router.h"
#include "tests/worker/small_model.h"

namespace moe {
namespace {

using std::chrono::milliseconds;
using testing::FakeRouter;
using testing::IsReady;
using testing::IsResult;
using testing::SmallModel;
using testing::StepMessage;

moe::v1::RouterMessage Assignment(uint64_t generation, int world) {
  moe::v1::RouterMessage m;
  auto* a = m.mutable_assignment();
  a->set_generation(generation);
  a->set_rank(0);
  a->set_world_size(world);
  a->set_expert_begin(0);
  a->set_expert_end(world == 1 ? 4 : 2);
  *a->mutable_model() = SmallModel();
  a->set_collective_timeout_ms(world == 1 ? 10000 : 300);
  a->set_max_batch_tokens(32);
  return m;
}

class WorkerAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto executor = StepExecutor::Create("cpu", 1, Collective::kGloo);
    ASSERT_TRUE(executor.ok()) << executor.status();
    WorkerOptions o;
    o.router = router_.address();
    o.collective_host = "127.0.0.1";
    o.reconnect_delay = milliseconds(10);
    o.on_ready = [this](bool ready) { ready_ = ready; };
    agent_ = std::make_unique<WorkerAgent>(o, std::move(*executor));
    thread_ = std::thread([this] { agent_->Run(); });
  }
  void TearDown() override {
    agent_->Shutdown();
    thread_.join();
  }
  std::vector<moe::v1::WorkerMessage> Of(
      bool (*pred)(const moe::v1::WorkerMessage&)) {
    std::vector<moe::v1::WorkerMessage> out;
    for (const auto& m : router_.received()) {
      if (pred(m)) out.push_back(m);
    }
    return out;
  }

  FakeRouter router_;
  std::atomic<bool> ready_{false};
  std::unique_ptr<WorkerAgent> agent_;
  std::thread thread_;
};

TEST_F(WorkerAgentTest, AssignmentLoadsTheExpertsAndJoinsTheGroup) {
  ASSERT_TRUE(router_.Send(Assignment(1, 1)));
  ASSERT_TRUE(router_.AwaitReceived(1, IsReady));
  const moe::v1::Ready ready = Of(IsReady).at(0).ready();
  EXPECT_EQ(ready.generation(), 1u);
  EXPECT_EQ(ready.rank(), 0);
  EXPECT_EQ(ready.error(), "");
  EXPECT_TRUE(ready_);
}

TEST_F(WorkerAgentTest, AssignmentItCannotLoadIsAnsweredWithTheReason) {
  moe::v1::RouterMessage m = Assignment(1, 1);
  m.mutable_assignment()->mutable_model()->set_checkpoint_dir(
      "/nonexistent/checkpoint");
  ASSERT_TRUE(router_.Send(m));
  ASSERT_TRUE(router_.AwaitReceived(1, IsReady));
  const moe::v1::Ready ready = Of(IsReady).at(0).ready();
  EXPECT_NE(ready.error().find("/nonexistent/checkpoint"), std::string::npos)
      << ready.error();
  EXPECT_FALSE(ready_);
}

TEST_F(WorkerAgentTest, StepOutsideItsGroupIsRefusedUnavailable) {
  ASSERT_TRUE(router_.Send(Assignment(1, 1)));
  ASSERT_TRUE(router_.AwaitReceived(1, IsReady));
  ASSERT_TRUE(router_.Send(StepMessage(2, 7)));
  ASSERT_TRUE(router_.AwaitReceived(1, IsResult));
  const moe::v1::StepResult r = Of(IsResult).at(0).result();
  EXPECT_EQ(r.step_id(), 7u);
  EXPECT_EQ(r.error_code(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_NE(r.error_message().find("not in generation 2"), std::string::npos)
      << r.error_message();
  EXPECT_TRUE(r.collectives_broken());
}

// Generation 1 waits 300 ms for a peer that never comes; the step of
// generation 1 and the Assignment of generation 2 are read meanwhile.
TEST_F(WorkerAgentTest, WhatANewerGenerationSupersedesIsSkipped) {
  ASSERT_TRUE(router_.Send(Assignment(1, 2)));
  // Rank 0 has published its address: it waits for rank 1.
  ASSERT_TRUE(testing::WaitFor([&] { return router_.store_keys() > 0; },
                               milliseconds(10000)));
  ASSERT_TRUE(router_.Send(StepMessage(1, 5)));
  ASSERT_TRUE(router_.Send(Assignment(2, 1)));
  ASSERT_TRUE(router_.AwaitReceived(2, IsReady));
  const auto readies = Of(IsReady);
  EXPECT_EQ(readies[0].ready().generation(), 1u);
  EXPECT_NE(readies[0].ready().error(), "");  // no peer
  EXPECT_EQ(readies[1].ready().generation(), 2u);
  EXPECT_EQ(readies[1].ready().error(), "");
  // The superseded step got no answer: the router failed it already.
  EXPECT_TRUE(Of(IsResult).empty());
}

}  // namespace
}  // namespace moe
