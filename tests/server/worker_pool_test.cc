// WorkerPool's generations, driven by fake workers over an in-process
// channel (no network): a generation starts when every rank is filled, is
// ready when every rank said Ready for it, and any loss of a member or
// failed rendezvous starts a new one.
#include "server/worker_pool.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using std::chrono::milliseconds;
using testing::WaitFor;

constexpr milliseconds kTimeout(10000);

// One worker's Join stream, as moe-worker speaks it.
class FakeWorker {
 public:
  explicit FakeWorker(moe::v1::WorkerControl::Stub* stub) {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(60));
    stream_ = stub->Join(&ctx_);
    moe::v1::WorkerMessage m;
    m.mutable_register_()->set_device("cpu");
    m.mutable_register_()->set_threads(1);
    EXPECT_TRUE(stream_->Write(m));
  }
  ~FakeWorker() { Leave(); }

  // The next Assignment (false when the stream ended first).
  bool NextAssignment(moe::v1::Assignment* a) {
    moe::v1::RouterMessage m;
    while (stream_->Read(&m)) {
      if (m.has_assignment()) {
        *a = m.assignment();
        return true;
      }
    }
    return false;
  }
  void Ready(const moe::v1::Assignment& a, const std::string& error = "") {
    moe::v1::WorkerMessage m;
    m.mutable_ready()->set_generation(a.generation());
    m.mutable_ready()->set_rank(a.rank());
    m.mutable_ready()->set_error(error);
    EXPECT_TRUE(stream_->Write(m));
  }
  // Closes the stream; the router's status of it.
  grpc::Status Leave() {
    if (left_) return status_;
    left_ = true;
    stream_->WritesDone();
    moe::v1::RouterMessage m;
    while (stream_->Read(&m)) {
    }
    status_ = stream_->Finish();
    return status_;
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::RouterMessage>>
      stream_;
  bool left_ = false;
  grpc::Status status_;
};

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WorkerPoolOptions o;
    o.world_size = 2;
    o.num_experts = 8;
    o.max_batch_tokens = 64;
    o.retry_delay = milliseconds(10);
    pool_ = std::make_unique<WorkerPool>(o);
    grpc::ServerBuilder b;
    b.RegisterService(pool_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = moe::v1::WorkerControl::NewStub(
        server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override {
    workers_.clear();  // each leaves
    pool_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
  }
  FakeWorker& Join() {
    workers_.push_back(std::make_unique<FakeWorker>(stub_.get()));
    return *workers_.back();
  }
  bool StateIs(const std::function<bool(const WorkerPool::State&)>& pred) {
    return WaitFor([&] { return pred(pool_->state()); }, kTimeout);
  }
  // Both workers' assignments of one new generation, checked.
  void ExpectGeneration(FakeWorker& a, FakeWorker& b, moe::v1::Assignment* aa,
                        moe::v1::Assignment* ab) {
    ASSERT_TRUE(a.NextAssignment(aa));
    ASSERT_TRUE(b.NextAssignment(ab));
    EXPECT_EQ(aa->generation(), ab->generation());
    EXPECT_EQ(aa->world_size(), 2);
    EXPECT_EQ(std::set<int>({aa->rank(), ab->rank()}), std::set<int>({0, 1}));
    // The even split of 8 experts.
    const auto& r0 = aa->rank() == 0 ? *aa : *ab;
    const auto& r1 = aa->rank() == 0 ? *ab : *aa;
    EXPECT_EQ(r0.expert_begin(), 0);
    EXPECT_EQ(r0.expert_end(), 4);
    EXPECT_EQ(r1.expert_begin(), 4);
    EXPECT_EQ(r1.expert_end(), 8);
  }

  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<moe::v1::WorkerControl::Stub> stub_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

absl::Status RunStep(WorkerPool& pool) {
  std::vector<moe::v1::Step> steps(2);
  std::vector<moe::v1::StepResult> results;
  return pool.RunStep(
      steps, std::chrono::steady_clock::now() + milliseconds(500), [] {},
      &results);
}

TEST_F(WorkerPoolTest, GenerationStartsWhenFullAndIsReadyWhenAllAreReady) {
  EXPECT_EQ(pool_->state().generation, 0u);
  FakeWorker& a = Join();
  ASSERT_TRUE(StateIs([](const auto& s) { return s.connected == 1; }));
  EXPECT_EQ(pool_->state().generation, 0u) << "a generation with a rank open";
  EXPECT_EQ(RunStep(*pool_).code(), absl::StatusCode::kUnavailable);

  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  const uint64_t g = aa.generation();
  EXPECT_GT(g, 0u);
  EXPECT_EQ(pool_->state().generation, g);
  EXPECT_FALSE(pool_->state().ready);

  a.Ready(aa);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready_workers == 1; }));
  EXPECT_FALSE(pool_->state().ready);
  b.Ready(ab);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }))
      << "not ready with every rank ready";
  EXPECT_EQ(pool_->state().generation, g);
}

TEST_F(WorkerPoolTest, LostWorkerEndsTheGenerationAndAReplacementStartsANew) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  a.Ready(aa);
  b.Ready(ab);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  const uint64_t g1 = aa.generation();

  EXPECT_TRUE(b.Leave().ok());
  ASSERT_TRUE(StateIs([](const auto& s) {
    return !s.ready && s.connected == 1;
  })) << "still ready without a member";
  EXPECT_EQ(RunStep(*pool_).code(), absl::StatusCode::kUnavailable);

  FakeWorker& c = Join();
  moe::v1::Assignment ga, gc;
  ExpectGeneration(a, c, &ga, &gc);
  const uint64_t g2 = ga.generation();
  EXPECT_GT(g2, g1);
  EXPECT_EQ(gc.rank(), ab.rank()) << "the replacement takes the open rank";
  // A Ready for the old generation counts for nothing.
  a.Ready(aa);
  c.Ready(gc);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready_workers == 1; }));
  EXPECT_FALSE(pool_->state().ready);
  a.Ready(ga);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  EXPECT_EQ(pool_->state().generation, g2);
}

TEST_F(WorkerPoolTest, FailedRendezvousRetriesWithANewGeneration) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  a.Ready(aa);
  b.Ready(ab, "gloo: connect timed out");
  moe::v1::Assignment ra, rb;
  ExpectGeneration(a, b, &ra, &rb);
  EXPECT_GT(ra.generation(), aa.generation());
  EXPECT_EQ(ra.rank(), aa.rank()) << "same members keep their ranks";
  a.Ready(ra);
  b.Ready(rb);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  EXPECT_EQ(pool_->state().generation, ra.generation());
}

TEST_F(WorkerPoolTest, WorkerBeyondTheWorldSizeIsRefused) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  FakeWorker& extra = Join();
  const grpc::Status s = extra.Leave();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_EQ(pool_->state().connected, 2);
  EXPECT_EQ(pool_->state().generation, aa.generation());
}

}  // namespace
}  // namespace moe
