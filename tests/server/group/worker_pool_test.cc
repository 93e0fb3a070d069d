// WorkerPool's generations, driven by fake workers over an in-process
// channel (no network): a generation starts when every rank is filled, is
// ready when every rank said Ready for it, and any loss of a member or
// failed rendezvous starts a new one.
#include "server/group/worker_pool.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/group/serve_pool.h"
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
    EXPECT_TRUE(Write(m));
  }
  // Answers every Step with an empty result until the stream ends; counts
  // the steps into `steps`.
  void AnswerSteps(std::atomic<int>* steps) {
    moe::v1::RouterMessage m;
    while (stream_->Read(&m)) {
      if (!m.has_step()) continue;
      ++*steps;
      moe::v1::WorkerMessage r;
      r.mutable_result()->set_generation(m.step().generation());
      r.mutable_result()->set_step_id(m.step().step_id());
      *r.mutable_result()->mutable_rows() = m.step().rows();  // echoed
      if (!Write(r)) return;
    }
  }
  void Heartbeat() {
    moe::v1::WorkerMessage m;
    m.mutable_heartbeat();
    EXPECT_TRUE(Write(m));
  }
  // One write at a time: a test's heartbeat thread writes beside it (two
  // at once are a gRPC API misuse, which aborts).
  bool Write(const moe::v1::WorkerMessage& m) {
    std::lock_guard<std::mutex> lock(write_mu_);
    return stream_->Write(m);
  }
  // Ends the worker's side of the stream (the router then ends its side),
  // from another thread than one in AnswerSteps, which then returns.
  void HalfClose() {
    if (!writes_done_) stream_->WritesDone();
    writes_done_ = true;
  }
  // Closes the stream; the router's status of it.
  grpc::Status Leave() {
    if (left_) return status_;
    left_ = true;
    HalfClose();
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
  bool left_ = false, writes_done_ = false;
  std::mutex write_mu_;
  grpc::Status status_;
};

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { StartPool(64); }
  void StartPool(int max_store_waits_per_rank,
                 milliseconds heartbeat = milliseconds(60000),
                 milliseconds regroup_after = milliseconds(60000),
                 milliseconds hold = milliseconds(0)) {
    // A test that restarts the pool: the old server goes before the pool it
    // serves (its callback methods belong to the service, which calls the
    // pool).
    served_.server.reset();
    served_.service.reset();
    served_.pool.reset();
    WorkerPoolOptions o;
    o.regroup_after = regroup_after;
    o.hold_while_regrouping = hold;
    o.heartbeat_interval = heartbeat;
    o.heartbeat_misses = 4;
    o.world_size = 2;
    o.num_experts = 8;
    o.retry_delay = milliseconds(10);
    o.max_store_waits_per_rank = max_store_waits_per_rank;
    WorkerControlOptions wo;
    wo.max_batch_tokens = 64;
    testing::ServePool(o, wo, &served_);
  }
  void TearDown() override {
    workers_.clear();  // each leaves
    served_.pool->Shutdown();
    served_.server->Shutdown(std::chrono::system_clock::now() +
                             std::chrono::seconds(1));
  }
  FakeWorker& Join() {
    workers_.push_back(std::make_unique<FakeWorker>(served_.stub.get()));
    return *workers_.back();
  }
  bool StateIs(const std::function<bool(const WorkerPool::State&)>& pred) {
    return WaitFor([&] { return pred(served_.pool->state()); }, kTimeout);
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
  }  // ExpectGeneration, then both ranks ready and the group with them.
  void FormReadyGroup(FakeWorker& a, FakeWorker& b, moe::v1::Assignment* aa,
                      moe::v1::Assignment* ab) {
    ASSERT_NO_FATAL_FAILURE(ExpectGeneration(a, b, aa, ab));
    a.Ready(*aa);
    b.Ready(*ab);
    ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  }

  testing::ServedPool served_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

absl::Status RunStep(WorkerPool& pool) {
  std::vector<StepContent> steps(2);
  std::vector<StepReply> results;
  return pool.RunStep(
      steps, std::chrono::steady_clock::now() + milliseconds(500), [] {},
      &results);
}

TEST_F(WorkerPoolTest, GenerationStartsWhenFullAndIsReadyWhenAllAreReady) {
  EXPECT_EQ(served_.pool->state().generation, 0u);
  FakeWorker& a = Join();
  ASSERT_TRUE(StateIs([](const auto& s) { return s.connected == 1; }));
  EXPECT_EQ(served_.pool->state().generation, 0u)
      << "a generation with a rank open";
  EXPECT_EQ(RunStep(*served_.pool).code(), absl::StatusCode::kUnavailable);

  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  const uint64_t g = aa.generation();
  EXPECT_GT(g, 0u);
  EXPECT_EQ(served_.pool->state().generation, g);
  EXPECT_FALSE(served_.pool->state().ready);

  a.Ready(aa);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready_workers == 1; }));
  EXPECT_FALSE(served_.pool->state().ready);
  b.Ready(ab);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }))
      << "not ready with every rank ready";
  EXPECT_EQ(served_.pool->state().generation, g);
}

TEST_F(WorkerPoolTest, LostWorkerEndsTheGenerationAndAReplacementStartsANew) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ASSERT_NO_FATAL_FAILURE(FormReadyGroup(a, b, &aa, &ab));
  const uint64_t g1 = aa.generation();

  EXPECT_TRUE(b.Leave().ok());
  ASSERT_TRUE(StateIs([](const auto& s) {
    return !s.ready && s.connected == 1;
  })) << "still ready without a member";
  EXPECT_EQ(RunStep(*served_.pool).code(), absl::StatusCode::kUnavailable);

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
  EXPECT_FALSE(served_.pool->state().ready);
  a.Ready(ga);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  EXPECT_EQ(served_.pool->state().generation, g2);
}

TEST_F(WorkerPoolTest, SilentWorkerIsStalledUntilItSendsAgain) {
  TearDown();
  StartPool(64, milliseconds(50));  // stalled after 4 x 50 ms of silence
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  EXPECT_EQ(aa.heartbeat_interval_ms(), 50);
  EXPECT_GT(aa.connect_timeout_ms(), 0);
  a.Ready(aa);
  b.Ready(ab);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  // a keeps beating, b falls silent.
  std::atomic<bool> stop{false};
  std::thread beats([&] {
    while (!stop) {
      a.Heartbeat();
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  const auto silent = std::chrono::steady_clock::now();
  ASSERT_TRUE(StateIs([](const auto& s) { return !s.ready; }));
  EXPECT_LT(std::chrono::steady_clock::now() - silent, milliseconds(1000));
  const std::string stalled = served_.pool->state().stalled;
  EXPECT_NE(stalled.find(absl::StrCat("rank ", ab.rank())), std::string::npos)
      << stalled;
  EXPECT_EQ(stalled.find(absl::StrCat("rank ", aa.rank())), std::string::npos)
      << stalled;
  const absl::Status step = RunStep(*served_.pool);
  EXPECT_EQ(step.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(step.message().find(absl::StrCat("rank ", ab.rank())),
            std::string::npos)
      << step;
  // b speaks again: a new generation for both.
  b.Heartbeat();
  moe::v1::Assignment ra, rb;
  ExpectGeneration(a, b, &ra, &rb);
  EXPECT_GT(ra.generation(), aa.generation());
  EXPECT_TRUE(served_.pool->state().stalled.empty());
  a.Ready(ra);
  b.Ready(rb);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  stop = true;
  beats.join();
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
  EXPECT_EQ(served_.pool->state().generation, ra.generation());
}

// A worker that cannot load its experts answers every generation with an
// error: clients are told which worker and why (State::refusal), and the
// retries back off (retry_delay 10 ms here, doubled per failed generation
// in a row) until a group is ready, which clears both.
TEST_F(WorkerPoolTest, WorkerThatCannotLoadIsNamedAndRetriedWithBackoff) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  const std::string why = "checkpoint /models/x: no such directory";
  a.Ready(aa, why);  // both fail: one failed generation, counted once
  b.Ready(ab, why);
  ASSERT_TRUE(StateIs([&](const auto& s) {
    return absl::StrContains(s.refusal, why) &&
           absl::StrContains(s.refusal, "could not join generation");
  })) << served_.pool->state().refusal;
  EXPECT_FALSE(served_.pool->state().ready);
  // Three more failed generations: the wait before each retry doubles.
  std::vector<std::chrono::steady_clock::time_point> assigned;
  for (int i = 0; i < 3; ++i) {
    moe::v1::Assignment ra, rb;
    ExpectGeneration(a, b, &ra, &rb);
    assigned.push_back(std::chrono::steady_clock::now());
    a.Ready(ra, why);
    b.Ready(rb, why);
  }
  // After failures 2, 3 and 4 the regroup waits at least 20, 40 and 80 ms.
  EXPECT_GE(assigned[1] - assigned[0], milliseconds(20));
  EXPECT_GE(assigned[2] - assigned[1], milliseconds(40));
  moe::v1::Assignment ra, rb;
  ExpectGeneration(a, b, &ra, &rb);
  EXPECT_GE(std::chrono::steady_clock::now() - assigned[2], milliseconds(80));
  a.Ready(ra);
  b.Ready(rb);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  EXPECT_EQ(served_.pool->state().refusal, "");
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
  EXPECT_EQ(served_.pool->state().connected, 2);
  EXPECT_EQ(served_.pool->state().generation, aa.generation());
}

grpc::Status StoreSet(moe::v1::WorkerControl::Stub* stub,
                      const moe::v1::Assignment& as, const std::string& key,
                      uint64_t generation = 0) {
  grpc::ClientContext ctx;
  moe::v1::StoreSetRequest req;
  req.set_generation(generation != 0 ? generation : as.generation());
  req.set_key(key);
  req.set_value("v-" + key);
  req.set_store_token(as.store_token());
  moe::v1::StoreSetResponse resp;
  return stub->StoreSet(&ctx, req, &resp);
}

TEST_F(WorkerPoolTest, StoreWritesOnlyTheCallersOwnKeysOfTheGeneration) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  const auto& r0 = aa.rank() == 0 ? aa : ab;
  const auto& r1 = aa.rank() == 0 ? ab : aa;
  EXPECT_NE(r0.store_token(), r1.store_token());
  EXPECT_TRUE(StoreSet(served_.stub.get(), r0, "0").ok());
  EXPECT_TRUE(StoreSet(served_.stub.get(), r0, "nccl-unique-id").ok());
  EXPECT_TRUE(StoreSet(served_.stub.get(), r1, "1").ok());
  // A rogue write of rank 0's keys by rank 1.
  for (const char* key : {"0", "0/1", "nccl-unique-id", "other"}) {
    const grpc::Status s = StoreSet(served_.stub.get(), r1, key);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << key;
    EXPECT_NE(s.error_message().find("rank 1 may not set"), std::string::npos)
        << s.error_message();
  }
  // No token, or an unknown one.
  moe::v1::Assignment stranger = r0;
  stranger.set_store_token("guess");
  EXPECT_EQ(StoreSet(served_.stub.get(), stranger, "0").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Another generation, named with the current one.
  const uint64_t g = r0.generation();
  for (uint64_t other : {g + 1, g - 1 == 0 ? g + 7 : g - 1}) {
    const grpc::Status s = StoreSet(served_.stub.get(), r0, "0", other);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find(absl::StrCat("generation ", other)),
              std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find(absl::StrCat("serves generation ", g)),
              std::string::npos)
        << s.error_message();
  }
}

int ThreadCount() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// Parks `n` StoreGets of a key nobody sets; their statuses arrive in
// `codes`.
struct ParkedGets {
  std::mutex mu;
  std::vector<grpc::StatusCode> codes;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<moe::v1::StoreGetRequest>> reqs;
  std::vector<std::unique_ptr<moe::v1::StoreGetResponse>> resps;
  void Park(moe::v1::WorkerControl::Stub* stub, const moe::v1::Assignment& as,
            int n, const std::string& key) {
    for (int i = 0; i < n; ++i) {
      ctxs.push_back(std::make_unique<grpc::ClientContext>());
      reqs.push_back(std::make_unique<moe::v1::StoreGetRequest>());
      resps.push_back(std::make_unique<moe::v1::StoreGetResponse>());
      reqs.back()->set_generation(as.generation());
      reqs.back()->add_keys(key);
      reqs.back()->set_timeout_ms(60000);
      reqs.back()->set_store_token(as.store_token());
      stub->async()->StoreGet(ctxs.back().get(), reqs.back().get(),
                              resps.back().get(), [this](grpc::Status s) {
                                std::lock_guard<std::mutex> lock(mu);
                                codes.push_back(s.error_code());
                              });
    }
  }
  size_t answered() {
    std::lock_guard<std::mutex> lock(mu);
    return codes.size();
  }
};

// A ParkedGets that outlives the test: the last callback may still be
// releasing `mu` when the test sees its answer, so the object must not be
// destroyed with the test's scope. Destroyed at exit, after every server.
ParkedGets& NewParkedGets() {
  static std::list<ParkedGets> kept;
  return kept.emplace_back();
}

TEST_F(WorkerPoolTest, ParkedStoreGetsHoldNoThreadAndEndWithTheGeneration) {
  TearDown();
  StartPool(512);
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  const int before = ThreadCount();
  ParkedGets& gets = NewParkedGets();
  gets.Park(served_.stub.get(), aa, 500, "1/0");
  ASSERT_TRUE(
      WaitFor([&] { return served_.pool->store_waits() == 500; }, kTimeout))
      << served_.pool->store_waits() << " parked";
  const int parked = ThreadCount();
  EXPECT_LT(parked - before, 50)
      << "500 parked StoreGets took threads: " << before << " -> " << parked;
  EXPECT_EQ(gets.answered(), 0u);
  // A failed rendezvous ends the generation: every wait ends with it.
  b.Ready(ab, "gloo: connect timed out");
  ASSERT_TRUE(WaitFor([&] { return gets.answered() == 500; }, kTimeout))
      << gets.answered() << " of 500 ended; generation "
      << served_.pool->state().generation << " (was " << ab.generation() << ")";
  for (grpc::StatusCode c : gets.codes) {
    EXPECT_EQ(c, grpc::StatusCode::FAILED_PRECONDITION);
  }
  EXPECT_EQ(served_.pool->store_waits(), 0u);
  std::printf("threads: %d before, %d with 500 StoreGets parked\n", before,
              parked);
}

TEST_F(WorkerPoolTest, StoreWaitsAreCappedPerRankAndAnsweredWhenSet) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  const auto& r0 = aa.rank() == 0 ? aa : ab;
  const auto& r1 = aa.rank() == 0 ? ab : aa;
  ParkedGets& gets = NewParkedGets();
  gets.Park(served_.stub.get(), r1, 64, "0");
  ASSERT_TRUE(
      WaitFor([&] { return served_.pool->store_waits() == 64; }, kTimeout));
  {
    grpc::ClientContext ctx;
    moe::v1::StoreGetRequest req;
    req.set_generation(r1.generation());
    req.add_keys("0");
    req.set_timeout_ms(60000);
    req.set_store_token(r1.store_token());
    moe::v1::StoreGetResponse resp;
    const grpc::Status s = served_.stub->StoreGet(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
  }
  {
    // A short timeout of the other rank ends on its own.
    grpc::ClientContext ctx;
    moe::v1::StoreGetRequest req;
    req.set_generation(r0.generation());
    req.add_keys("1");
    req.set_timeout_ms(50);
    req.set_store_token(r0.store_token());
    moe::v1::StoreGetResponse resp;
    EXPECT_EQ(served_.stub->StoreGet(&ctx, req, &resp).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  ASSERT_TRUE(StoreSet(served_.stub.get(), r0, "0").ok());
  ASSERT_TRUE(WaitFor([&] { return gets.answered() == 64; }, kTimeout));
  for (grpc::StatusCode c : gets.codes) EXPECT_EQ(c, grpc::StatusCode::OK);
  for (const auto& r : gets.resps) {
    ASSERT_EQ(r->values_size(), 1);
    EXPECT_EQ(r->values(0), "v-0");
  }
}

// Elastic regrouping: a full group loses a member; after regroup_after the
// one left forms a group of its own with every expert, and the group grows
// back to full, in a new generation, when a worker joins again.
TEST_F(WorkerPoolTest, LostWorkerLeavesASmallerGroupThatGrowsBack) {
  TearDown();
  StartPool(64, milliseconds(60000), /*regroup_after=*/milliseconds(300));
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ASSERT_NO_FATAL_FAILURE(FormReadyGroup(a, b, &aa, &ab));
  EXPECT_FALSE(served_.pool->state().degraded());
  EXPECT_EQ(served_.pool->state().group_size, 2);

  const auto left = std::chrono::steady_clock::now();
  EXPECT_TRUE(b.Leave().ok());
  moe::v1::Assignment solo;
  ASSERT_TRUE(a.NextAssignment(&solo));
  EXPECT_GE(std::chrono::steady_clock::now() - left, milliseconds(250))
      << "a smaller group before regroup_after";
  EXPECT_EQ(solo.world_size(), 1);
  EXPECT_EQ(solo.rank(), 0);
  EXPECT_EQ(solo.expert_begin(), 0);
  EXPECT_EQ(solo.expert_end(), 8) << "the lost worker's experts re-split";
  EXPECT_GT(solo.generation(), aa.generation());
  a.Ready(solo);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  WorkerPool::State st = served_.pool->state();
  EXPECT_TRUE(st.degraded());
  EXPECT_EQ(st.group_size, 1);
  EXPECT_EQ(st.world_size, 2);
  auto w = served_.pool->AwaitGroup(std::chrono::steady_clock::now());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*w, 1);
  // A step planned for the old world size is refused, not misrouted.
  EXPECT_EQ(RunStep(*served_.pool).code(), absl::StatusCode::kUnavailable);

  FakeWorker& c = Join();
  moe::v1::Assignment ga, gc;
  ExpectGeneration(a, c, &ga, &gc);
  EXPECT_GT(ga.generation(), solo.generation());
  a.Ready(ga);
  c.Ready(gc);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  st = served_.pool->state();
  EXPECT_FALSE(st.degraded());
  EXPECT_EQ(st.group_size, 2);
}

// A worker returning to a degraded group starts a generation whose ranks
// have yet to load their experts and join: the group is not ready until
// each says so (the readiness probe and metrics see it), steps are held (at
// most the hold) and then refused UNAVAILABLE, and none is sent to a rank
// before it is ready (a step sent then would wait in the stream, time out
// and restart the generation).
TEST_F(WorkerPoolTest, AGroupGrowingBackIsNotReadyUntilItsRanksAre) {
  TearDown();
  StartPool(64, milliseconds(60000), /*regroup_after=*/milliseconds(100),
            /*hold=*/milliseconds(200));
  using Clock = std::chrono::steady_clock;
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ASSERT_NO_FATAL_FAILURE(FormReadyGroup(a, b, &aa, &ab));
  EXPECT_TRUE(b.Leave().ok());
  moe::v1::Assignment solo;
  ASSERT_TRUE(a.NextAssignment(&solo));
  a.Ready(solo);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready && s.degraded(); }));

  FakeWorker& c = Join();
  moe::v1::Assignment ga, gc;
  ExpectGeneration(a, c, &ga, &gc);
  const WorkerPool::State st = served_.pool->state();
  EXPECT_EQ(st.generation, ga.generation());
  EXPECT_EQ(st.group_size, 2);
  EXPECT_EQ(st.ready_workers, 0);
  EXPECT_FALSE(st.ready) << "ready with 0 of 2 ranks ready";
  const auto start = Clock::now();
  const auto w = served_.pool->AwaitGroup(start + milliseconds(20000));
  EXPECT_GE(Clock::now() - start, milliseconds(150)) << "not held";
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable) << w.status();
  EXPECT_TRUE(absl::StrContains(w.status().message(),
                                "2 of 2 workers connected, 0 ready"))
      << w.status();
  // A step planned for the new world size is refused, not sent.
  const absl::Status early = RunStep(*served_.pool);
  EXPECT_EQ(early.code(), absl::StatusCode::kUnavailable) << early;
  EXPECT_TRUE(absl::StrContains(early.message(), "not ready")) << early;
  EXPECT_EQ(served_.pool->state().generation, ga.generation())
      << "a step restarted the forming generation";

  a.Ready(ga);
  c.Ready(gc);
  ASSERT_TRUE(StateIs([](const auto& s) { return s.ready; }));
  EXPECT_FALSE(served_.pool->state().degraded());
  std::atomic<int> got_a{0}, got_c{0};
  std::thread ta([&] { a.AnswerSteps(&got_a); });
  std::thread tc([&] { c.AnswerSteps(&got_c); });
  const absl::Status step = RunStep(*served_.pool);
  EXPECT_TRUE(step.ok()) << step;
  a.HalfClose();  // the router ends each stream: the answering threads end
  c.HalfClose();
  ta.join();
  tc.join();
  // Each stream's first step is the one sent once its rank was ready.
  EXPECT_EQ(got_a, 1);
  EXPECT_EQ(got_c, 1);
}

// Before any full group has formed, a worker short of the world size is
// start-up, not a loss: no smaller group.
TEST_F(WorkerPoolTest, NoSmallerGroupBeforeTheFirstFullOne) {
  TearDown();
  StartPool(64, milliseconds(60000), /*regroup_after=*/milliseconds(50));
  Join();
  ASSERT_TRUE(StateIs([](const auto& s) { return s.connected == 1; }));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(served_.pool->state().generation, 0u);
}

// A step that finds the group re-forming waits for it (at most the hold and
// its deadline) instead of failing at once.
TEST_F(WorkerPoolTest, StepsAreHeldWhileTheGroupReforms) {
  TearDown();
  StartPool(64, milliseconds(60000), milliseconds(60000),
            /*hold=*/milliseconds(5000));
  using Clock = std::chrono::steady_clock;
  FakeWorker& a = Join();
  // Bounded by the step's deadline.
  auto start = Clock::now();
  auto w = served_.pool->AwaitGroup(start + milliseconds(200));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(Clock::now() - start, milliseconds(150));
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  // Released as soon as the group is ready.
  std::atomic<bool> done{false};
  absl::StatusOr<int> held = 0;
  std::thread waiter([&] {
    held = served_.pool->AwaitGroup(Clock::now() + milliseconds(20000));
    done = true;
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(done) << "not held";
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  a.Ready(aa);
  b.Ready(ab);
  waiter.join();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(*held, 2);
}

// Bounded by the hold too.
TEST_F(WorkerPoolTest, HoldEndsAfterTheFlagsTime) {
  TearDown();
  StartPool(64, milliseconds(60000), milliseconds(60000),
            /*hold=*/milliseconds(200));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto w = served_.pool->AwaitGroup(start + milliseconds(20000));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(w.status().message().find("not ready"), std::string::npos)
      << w.status();
  EXPECT_GE(Clock::now() - start, milliseconds(150));
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
}

// A direct step with no rows for a rank goes only to ranks that need it:
// once a rank has had a step of this generation and placement, an idle one
// is not sent (and not waited for); all-to-all steps go to every rank.
TEST_F(WorkerPoolTest, DirectStepsSkipAnIdleRankThatHasThePlacement) {
  FakeWorker& a = Join();
  FakeWorker& b = Join();
  moe::v1::Assignment aa, ab;
  ExpectGeneration(a, b, &aa, &ab);
  a.Ready(aa);
  b.Ready(ab);
  ASSERT_TRUE(StateIs([](const WorkerPool::State& s) { return s.ready; }));
  std::atomic<int> got[2] = {0, 0};  // steps per rank
  std::thread ta([&] { a.AnswerSteps(&got[aa.rank()]); });
  std::thread tb([&] { b.AnswerSteps(&got[ab.rank()]); });
  std::vector<StepReply> results;
  auto run = [&](bool direct, int64_t rank1_rows) {
    std::vector<StepContent> steps(2);
    std::vector<float> rows(rank1_rows * 4 + 4, 0.0f);
    for (int r = 0; r < 2; ++r) {
      steps[r].direct = direct;
      steps[r].in.tokens = r == 1 ? rank1_rows : 1;
      steps[r].in.rows = rows.data();
      steps[r].hidden = 4;
    }
    return served_.pool->RunStep(
        steps, std::chrono::steady_clock::now() + milliseconds(5000), [] {},
        &results);
  };
  // Rank 1's first step of the generation goes even without rows.
  ASSERT_TRUE(run(true, 0).ok());
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[1], 1);
  ASSERT_TRUE(run(true, 0).ok());  // then it is left out
  EXPECT_EQ(got[0], 2);
  EXPECT_EQ(got[1], 1);
  ASSERT_TRUE(run(true, 3).ok());  // rows: sent
  EXPECT_EQ(got[1], 2);
  // Each rank's answer comes back as a view of its message, which the reply
  // keeps: rank 1 echoed its 3 rows of zeros (sent as BF16, exact).
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[1].owner, nullptr);
  EXPECT_EQ(results[1].dtype, DType::kBF16);
  ASSERT_EQ(results[1].shape.size(), 2u);
  EXPECT_EQ(results[1].shape[0], 3);
  EXPECT_EQ(results[1].data, std::string(3 * 4 * 2, '\0'));
  ASSERT_TRUE(run(false, 0).ok());  // an all-to-all step: every rank
  EXPECT_EQ(got[0], 4);
  EXPECT_EQ(got[1], 3);
  a.HalfClose();  // the router ends each stream: the answering threads end
  b.HalfClose();
  ta.join();
  tb.join();
}

}  // namespace
}  // namespace moe
