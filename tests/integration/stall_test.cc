// A worker that stops answering without going away (SIGSTOP: frozen,
// swapped out, stuck in the kernel): the router's heartbeat watchdog marks
// it stalled within --heartbeat-misses x --heartbeat-interval-ms, health
// turns NOT_SERVING, the step in flight fails UNAVAILABLE naming the silent
// worker, and once it resumes (SIGCONT) the group is rebuilt and answers are
// correct again within seconds, time after time. The plaintext health port
// serves health and nothing else (no reflection).
#include <signal.h>

#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/synthetic_model.h"
#include "engine/local_moe.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/small_model.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::ChildProcess;
using testing::LocalCluster;
using testing::WaitFor;

constexpr int64_t kHidden = 32;
constexpr int64_t kTokens = 5;

class WorkerStall : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.model_args = testing::SmallModelArgs();
    o.workers = 2;
    o.health_port = true;
    o.client.retry = false;  // every failure seen, with its own time
    o.router_args = {"--step-timeout-ms=10000", "--heartbeat-interval-ms=500",
                     "--heartbeat-misses=4"};
    ASSERT_TRUE(cluster_.Start(o).ok()) << cluster_.Logs();

    auto moe = testing::SmallModelEngine();
    ASSERT_NE(moe, nullptr);
    input_.resize(kTokens * kHidden);
    FillSyntheticInput(7, input_.size(), input_.data());
    expected_.resize(input_.size());
    Routing r;
    ASSERT_TRUE(
        moe->Forward(0, input_.data(), {.n = kTokens}, expected_.data(), &r)
            .ok());
  }

  absl::StatusOr<ForwardResult> Forward(milliseconds timeout) {
    ForwardOptions fo;
    fo.timeout = timeout;
    return cluster_.client().Forward(0, input_.data(), kTokens, kHidden, fo);
  }
  bool Correct(milliseconds timeout = milliseconds(1000)) {
    auto r = Forward(timeout);
    return r.ok() && r->y == expected_;
  }
  bool Serving() {
    auto h = cluster_.client().Health("", milliseconds(500));
    return h.ok() && *h;
  }

  LocalCluster cluster_;
  std::vector<float> input_, expected_;
};

TEST_F(WorkerStall, FrozenWorkerIsSeenAndRecovers) {
  ASSERT_TRUE(Correct(milliseconds(10000))) << cluster_.Logs();
  ChildProcess& frozen = cluster_.worker(1);
  const std::string pid = absl::StrCat("pid ", frozen.pid(), ")");

  // A step in flight when the worker freezes fails UNAVAILABLE well before
  // the step timeout (10 s), naming the frozen worker.
  frozen.Signal(SIGSTOP);
  const auto stopped = Clock::now();
  auto inflight = std::async(std::launch::async,
                             [&] { return Forward(milliseconds(20000)); });
  ASSERT_TRUE(WaitFor([&] { return !Serving(); }, milliseconds(3000)))
      << "still SERVING 3 s after SIGSTOP\n"
      << cluster_.Logs();
  const double not_serving_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - stopped).count();
  auto r = inflight.get();
  const double failed_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - stopped).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find(pid), std::string::npos)
      << "the error should name the frozen worker (" << pid
      << "): " << r.status();
  EXPECT_LT(failed_ms, 4000);
  // While frozen: refused at once, naming it.
  auto refused = Forward(milliseconds(5000));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(pid), std::string::npos)
      << refused.status();

  frozen.Signal(SIGCONT);
  const auto resumed = Clock::now();
  ASSERT_TRUE(
      WaitFor([&] { return Correct(); }, milliseconds(5000), milliseconds(50)))
      << "no correct answer within 5 s of SIGCONT\n"
      << cluster_.Logs();
  const double recovered_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - resumed).count();
  EXPECT_TRUE(Serving());
  std::printf(
      "NOT_SERVING after %.0f ms, in-flight step failed after %.0f ms, "
      "correct again %.0f ms after SIGCONT\n",
      not_serving_ms, failed_ms, recovered_ms);
}

TEST_F(WorkerStall, RepeatedFreezeAndResumeRecoversEveryTime) {
  ASSERT_TRUE(Correct(milliseconds(10000))) << cluster_.Logs();
  std::vector<std::string> times;
  // 10 trials, alternating workers: about 21 s (2 s frozen each).
  for (int trial = 0; trial < 10; ++trial) {
    ChildProcess& w = cluster_.worker(trial % 2);
    w.Signal(SIGSTOP);
    // A request while frozen leaves a step (and then a new generation) in
    // the frozen worker's backlog.
    auto during = std::async(std::launch::async,
                             [&] { return Forward(milliseconds(1500)); });
    std::this_thread::sleep_for(milliseconds(2000));
    w.Signal(SIGCONT);
    const auto resumed = Clock::now();
    (void)during.get();
    ASSERT_TRUE(WaitFor([&] { return Correct(); }, milliseconds(5000),
                        milliseconds(50)))
        << "trial " << trial << ": no correct answer within 5 s of SIGCONT\n"
        << cluster_.Logs();
    times.push_back(absl::StrCat(
        std::chrono::duration_cast<milliseconds>(Clock::now() - resumed)
            .count(),
        " ms"));
  }
  std::printf("correct again after SIGCONT: %s\n",
              absl::StrJoin(times, ", ").c_str());
}

// The probe port answers health and nothing else: reflection (served on
// the public port) is UNIMPLEMENTED there.
TEST_F(WorkerStall, HealthPortServesOnlyHealth) {
  auto call = [](const std::string& target) {
    auto channel =
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(5000));
    grpc::ByteBuffer request, response;
    grpc::Slice empty("");
    request = grpc::ByteBuffer(&empty, 1);
    std::promise<grpc::Status> done;
    stub.UnaryCall(
        &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        grpc::StubOptions(), &request, &response,
        [&](grpc::Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  const grpc::Status health_port =
      call(absl::StrCat("127.0.0.1:", cluster_.health_port()));
  EXPECT_EQ(health_port.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << health_port.error_message();
  const grpc::Status public_port = call(cluster_.target());
  EXPECT_NE(public_port.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << "reflection should still be served on the public port";
  // Health itself answers there.
  ClientOptions ho;
  ho.target = absl::StrCat("127.0.0.1:", cluster_.health_port());
  MoeClient health(ho);
  auto serving = health.Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  auto unknown = health.Health("no.such.Service");
  EXPECT_FALSE(unknown.ok());
}

}  // namespace
}  // namespace moe
