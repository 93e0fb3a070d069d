// The router process in-process: started on ephemeral ports with a small
// synthetic model, its readiness before and after its workers (a fake
// worker speaks the WorkerControl protocol), and its drain.
#include "server/router.h"

#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "moe/v1/moe.grpc.pb.h"
#include "moe/v1/worker.grpc.pb.h"
#include "proto/tensor_codec.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using grpc::health::v1::HealthCheckResponse;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int64_t kHidden = 16;

RouterOptions Options(int workers) {
  RouterFlags f;
  f.synthetic = true;
  f.synthetic_args.hidden = kHidden;
  f.synthetic_args.inter = 8;
  f.synthetic_args.experts = 4;
  f.synthetic_args.top_k = 2;
  f.listen = "127.0.0.1:0";
  f.health_listen = "127.0.0.1:0";
  f.num_workers = workers;
  if (workers > 0) f.worker_listen = "127.0.0.1:0";
  f.threads = 1;
  f.max_batch_tokens = 64;
  // The fake worker sends no heartbeats: it must not be found stalled.
  f.heartbeat_interval_ms = 60000;
  auto o = RouterOptions::FromFlags(f);
  EXPECT_TRUE(o.ok()) << o.status();
  return *o;
}

std::shared_ptr<grpc::Channel> Dial(int port) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                             grpc::InsecureChannelCredentials());
}

// The status of `service` on the health service at `port`; UNKNOWN when
// the port does not answer.
HealthCheckResponse::ServingStatus Health(int port,
                                          const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(Dial(port));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(2000));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  if (!stub->Check(&ctx, req, &resp).ok()) return HealthCheckResponse::UNKNOWN;
  return resp.status();
}

bool Serving(int port, const std::string& service) {
  return Health(port, service) == HealthCheckResponse::SERVING;
}

// One Forward of `n` tokens of layer 0, waiting up to `deadline`.
grpc::Status Forward(int port, int64_t n, milliseconds deadline,
                     moe::v1::ForwardResponse* resp) {
  auto stub = moe::v1::MoeService::NewStub(Dial(port));
  moe::v1::ForwardRequest req;
  std::vector<float> x(n * kHidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * (i % 13) - 0.05f;
  EncodeMatrix(x.data(), n, kHidden, moe::v1::F32, req.mutable_hidden_states());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  return stub->Forward(&ctx, req, resp);
}

// A worker as the router sees one: it registers on the Join stream, takes
// its Assignment and answers Ready; its rows never come.
class FakeWorker {
 public:
  explicit FakeWorker(int port)
      : stub_(moe::v1::WorkerControl::NewStub(Dial(port))),
        stream_(stub_->Join(&ctx_)) {}
  ~FakeWorker() { Leave(); }

  // Registers and answers the first Assignment; false when the router
  // sent none.
  bool Join() {
    moe::v1::WorkerMessage hello;
    auto* reg = hello.mutable_register_();
    reg->set_device("cpu");
    reg->set_threads(1);
    reg->set_host("fake");
    reg->set_collective_host("127.0.0.1");
    reg->set_pid(getpid());
    reg->set_shares_device(true);
    moe::v1::RouterMessage msg;
    if (!stream_->Write(hello) || !stream_->Read(&msg) ||
        !msg.has_assignment()) {
      return false;
    }
    moe::v1::WorkerMessage ready;
    ready.mutable_ready()->set_generation(msg.assignment().generation());
    ready.mutable_ready()->set_rank(msg.assignment().rank());
    return stream_->Write(ready);
  }
  void Leave() {
    if (left_) return;
    left_ = true;
    ctx_.TryCancel();
    stream_->Finish();
  }

 private:
  std::unique_ptr<moe::v1::WorkerControl::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::RouterMessage>>
      stream_;
  bool left_ = false;
};

TEST(RouterTest, WithoutWorkersServesAtOnceAndStopsServing) {
  Router router(Options(0));
  ASSERT_EQ(router.Start(), 0);
  ASSERT_GT(router.port(), 0);
  ASSERT_GT(router.health_port(), 0);
  EXPECT_NE(router.port(), router.health_port());
  for (int port : {router.port(), router.health_port()}) {
    EXPECT_TRUE(Serving(port, kLivenessService)) << port;
    EXPECT_TRUE(Serving(port, "")) << port;
    EXPECT_TRUE(Serving(port, "moe.v1.MoeService")) << port;
    EXPECT_TRUE(Serving(port, "full-capacity")) << port;
  }
  moe::v1::ForwardResponse resp;
  grpc::Status s = Forward(router.port(), 37, milliseconds(20000), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.output().shape(0), 37);
  EXPECT_EQ(resp.output().shape(1), kHidden);

  router.Stop("test");
  EXPECT_FALSE(Forward(router.port(), 1, milliseconds(2000), &resp).ok());
  EXPECT_EQ(Health(router.health_port(), kLivenessService),
            HealthCheckResponse::UNKNOWN);
}

TEST(RouterTest, ReadyOnlyWhileItsWorkersGroupIs) {
  Router router(Options(1));
  ASSERT_EQ(router.Start(), 0);
  ASSERT_GT(router.worker_port(), 0);
  EXPECT_NE(router.worker_port(), router.port());
  // Alive, not ready: the group has no worker.
  for (int port : {router.port(), router.worker_port(), router.health_port()}) {
    EXPECT_TRUE(Serving(port, kLivenessService)) << port;
    EXPECT_EQ(Health(port, ""), HealthCheckResponse::NOT_SERVING) << port;
    EXPECT_EQ(Health(port, "full-capacity"), HealthCheckResponse::NOT_SERVING)
        << port;
  }
  auto worker = std::make_unique<FakeWorker>(router.worker_port());
  ASSERT_TRUE(worker->Join());
  EXPECT_TRUE(testing::WaitFor(
      [&] { return Serving(router.health_port(), ""); }, milliseconds(10000)))
      << "never ready with its worker in the group";
  for (int port : {router.port(), router.worker_port(), router.health_port()}) {
    EXPECT_TRUE(Serving(port, "")) << port;
    EXPECT_TRUE(Serving(port, "moe.v1.MoeService")) << port;
    EXPECT_TRUE(Serving(port, "full-capacity")) << port;
  }
  worker->Leave();
  EXPECT_TRUE(testing::WaitFor(
      [&] { return !Serving(router.health_port(), ""); }, milliseconds(10000)))
      << "still ready with its worker gone";
  EXPECT_TRUE(Serving(router.health_port(), kLivenessService));
  router.Stop("test");
}

// A router with one worker's place and none there, and a request waiting
// up to `hold` for the group that never forms (hold_while_regrouping): it
// is in flight while the router drains for at most `drain`.
class HeldRequest {
 public:
  HeldRequest(milliseconds hold, milliseconds drain) {
    RouterOptions o = Options(1);
    o.hold_while_regrouping_ms = hold.count();
    o.drain_wait = drain;
    router_ = std::make_unique<Router>(o);
    EXPECT_EQ(router_->Start(), 0);
    answer_ = std::async(std::launch::async, [this, hold] {
      moe::v1::ForwardResponse resp;
      grpc::Status s = Forward(router_->port(), 3, hold * 2, &resp);
      return std::make_pair(s, Clock::now());
    });
    std::this_thread::sleep_for(milliseconds(300));  // the request is held
  }
  Router& router() { return *router_; }
  // Its status, and when it came.
  std::pair<grpc::Status, Clock::time_point> Answer() { return answer_.get(); }

 private:
  std::unique_ptr<Router> router_;
  std::future<std::pair<grpc::Status, Clock::time_point>> answer_;
};

TEST(RouterTest, DrainWaitsForRequestsInFlightAndRefusesNewOnes) {
  HeldRequest held(milliseconds(1500), milliseconds(20000));
  Router& router = held.router();
  const auto drain_start = Clock::now();
  auto stopped = std::async(std::launch::async, [&] {
    router.Stop("test");
    return Clock::now();
  });
  // Draining: not ready, but alive; the public port takes no new calls.
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        return Health(router.health_port(), "") ==
               HealthCheckResponse::NOT_SERVING;
      },
      milliseconds(5000)));
  EXPECT_TRUE(Serving(router.health_port(), kLivenessService));
  moe::v1::ForwardResponse resp;
  EXPECT_FALSE(Forward(router.port(), 1, milliseconds(2000), &resp).ok());
  const auto [status, answered] = held.Answer();
  const Clock::time_point stop_end = stopped.get();
  // The held request got its own answer (no group formed at the end of its
  // hold), not the pool's shutdown, and the drain waited for it.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << status.error_message();
  EXPECT_NE(status.error_message().find("worker group not ready"),
            std::string::npos)
      << status.error_message();
  EXPECT_GE(stop_end, answered);
  EXPECT_LT(stop_end - drain_start, milliseconds(15000));
}

TEST(RouterTest, DrainGivesUpOnRequestsAtItsDeadline) {
  HeldRequest held(milliseconds(60000), milliseconds(400));
  const auto start = Clock::now();
  held.router().Stop("test");
  EXPECT_GE(Clock::now() - start, milliseconds(400));
  EXPECT_LT(Clock::now() - start, milliseconds(10000));
  // Ended by the drain (its hold is a minute): the pool's shutdown or the
  // cancel of what is left, whichever reaches it first.
  const grpc::Status s = held.Answer().first;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST(RouterTest, StartFailsWithTheExitCodeOfWhatFailed) {
  {
    RouterOptions o = Options(0);
    o.listen = "256.1.1.1:0";  // cannot be bound
    Router router(o);
    EXPECT_EQ(router.Start(), 1);
  }
  {
    RouterOptions o = Options(1);
    o.worker_token_file = "/nonexistent/tokens";
    Router router(o);
    EXPECT_EQ(router.Start(), 2);
  }
}

}  // namespace
}  // namespace moe
