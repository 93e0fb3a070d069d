// Production hardening, with real processes: worker registration closed by a
// worker token (a rogue Join, StoreSet or StoreGet without it gets
// UNAUTHENTICATED, takes no rank and stores nothing), and a router drained by
// SIGTERM that answers its request in flight and exits right after.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "gtest/gtest.h"
#include "moe/v1/worker.grpc.pb.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

using testing::LocalCluster;
using Clock = std::chrono::steady_clock;

constexpr char kWorkerToken[] = "worker-token-for-tests";

std::vector<std::string> SmallModel() {
  return {"--synthetic", "--hidden=32", "--inter=16", "--experts=4",
          "--top-k=2"};
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class WorkerTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("worker_token_");
    std::ofstream(dir_ + "/worker-token") << kWorkerToken << "\n";
    LocalCluster::Options o;
    o.model_args = SmallModel();
    o.workers = 2;
    o.worker_port = true;
    o.router_args = {"--worker-token-file=" + dir_ + "/worker-token"};
    o.worker_args = {"--worker-token-file=" + dir_ + "/worker-token"};
    const absl::Status s = cluster_.Start(o);
    ASSERT_TRUE(s.ok()) << s << cluster_.Logs();
    stub_ = moe::v1::WorkerControl::NewStub(grpc::CreateChannel(
        cluster_.worker_target(), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A context with a deadline and, unless empty, `authorization` metadata.
  static void Prepare(grpc::ClientContext* ctx, const std::string& auth) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    if (!auth.empty()) ctx->AddMetadata("authorization", auth);
  }
  grpc::Status StoreSet(const std::string& auth, uint64_t generation,
                        const std::string& key) {
    grpc::ClientContext ctx;
    Prepare(&ctx, auth);
    moe::v1::StoreSetRequest req;
    req.set_generation(generation);
    req.set_key(key);
    req.set_value("rogue value");
    moe::v1::StoreSetResponse resp;
    return stub_->StoreSet(&ctx, req, &resp);
  }
  grpc::Status StoreGet(const std::string& auth, uint64_t generation,
                        const std::string& key,
                        moe::v1::StoreGetResponse* resp) {
    grpc::ClientContext ctx;
    Prepare(&ctx, auth);
    moe::v1::StoreGetRequest req;
    req.set_generation(generation);
    req.add_keys(key);
    req.set_timeout_ms(200);
    return stub_->StoreGet(&ctx, req, resp);
  }
  absl::Status Forward() {
    std::vector<float> x(2 * 32, 0.5f);
    return cluster_.client().Forward(0, x.data(), 2, 32, {}).status();
  }

  std::string dir_;
  LocalCluster cluster_;
  std::unique_ptr<moe::v1::WorkerControl::Stub> stub_;
};

TEST_F(WorkerTokenTest, RogueCallsAreUnauthenticatedAndChangeNothing) {
  ASSERT_TRUE(Forward().ok()) << cluster_.Logs();
  const std::string good = std::string("Bearer ") + kWorkerToken;
  for (const std::string auth : {"", "Bearer wrong-token", "Basic abc"}) {
    SCOPED_TRACE("authorization: '" + auth + "'");
    // Join: refused before the Register message is even read.
    grpc::ClientContext ctx;
    Prepare(&ctx, auth);
    auto stream = stub_->Join(&ctx);
    moe::v1::WorkerMessage hello;
    hello.mutable_register_()->set_host("rogue");
    hello.mutable_register_()->set_pid(1);
    stream->Write(hello);
    moe::v1::RouterMessage msg;
    EXPECT_FALSE(stream->Read(&msg)) << msg.DebugString();
    const grpc::Status join = stream->Finish();
    EXPECT_EQ(join.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << join.error_message();
    EXPECT_NE(join.error_message().find("--worker-token-file"),
              std::string::npos)
        << join.error_message();
    // The store, in every generation the group may be in.
    for (uint64_t g = 0; g <= 4; ++g) {
      EXPECT_EQ(StoreSet(auth, g, "rogue").error_code(),
                grpc::StatusCode::UNAUTHENTICATED);
      moe::v1::StoreGetResponse resp;
      EXPECT_EQ(StoreGet(auth, g, "probe", &resp).error_code(),
                grpc::StatusCode::UNAUTHENTICATED);
      EXPECT_EQ(resp.values_size(), 0);
    }
  }
  // With the worker token a call gets past this check to the store's own
  // (the rank's store token, which only an assigned rank holds).
  for (uint64_t g = 0; g <= 4; ++g) {
    EXPECT_NE(StoreSet(good, g, "probe").error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // Nothing was assigned: the two real workers registered, nobody else, and
  // they still form the group and serve.
  const std::string log = cluster_.router().Log();
  EXPECT_EQ(Count(log, "registered from"), 2) << log;
  EXPECT_EQ(Count(log, "ranks assigned"), 1) << log;
  // Each rogue caller's Join and 2 x 5 store calls, refused by the
  // worker-token check (the authenticated probes above are refused later, by
  // the store's own check, with other messages).
  EXPECT_EQ(Count(log, "refused: authorization"), 3 * (1 + 2 * 5)) << log;
  EXPECT_TRUE(Forward().ok()) << cluster_.Logs();
}

TEST_F(WorkerTokenTest, WorkerWithoutTheTokenCannotRegister) {
  ASSERT_TRUE(cluster_.StartWorker({}).ok());  // no --worker-token-file
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const std::string log = cluster_.router().Log();
  EXPECT_EQ(Count(log, "registered from"), 2) << log;
  EXPECT_GE(Count(log, "WorkerControl.Join from"), 1) << log;
  EXPECT_TRUE(Forward().ok()) << cluster_.Logs();
}

// SIGTERM with a request in flight (held up by a stopped worker): readiness
// turns NOT_SERVING at once, the router keeps running until the request is
// answered, then exits within about a second.
TEST(Drain, RouterAnswersItsRequestInFlightThenExits) {
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = SmallModel();
  o.workers = 1;
  o.health_port = true;
  // The stopped worker must hold the request, not be declared stalled by
  // the heartbeat watchdog (2 s by default) while the drain waits for it.
  o.router_args = {"--drain-timeout=20s", "--heartbeat-misses=60"};
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  ClientOptions health;
  health.target = "127.0.0.1:" + std::to_string(cluster.health_port());
  MoeClient health_client(health);
  ASSERT_TRUE(health_client.Health().value_or(false));

  // The worker stays stopped for well under 2 s: longer, and the router's
  // gRPC keepalive (1 s pings, 1 s timeout) drops its connection, which
  // fails the request and ends the drain early.
  cluster.worker(0).Signal(SIGSTOP);
  auto answer = std::async(std::launch::async, [&] {
    std::vector<float> x(2 * 32, 0.5f);
    ForwardOptions fo;
    fo.timeout = std::chrono::seconds(20);
    absl::Status s = cluster.client().Forward(0, x.data(), 2, 32, fo).status();
    return std::make_pair(s, Clock::now());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  cluster.router().Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  auto serving = health_client.Health();
  ASSERT_TRUE(serving.ok()) << serving.status() << cluster.Logs();
  EXPECT_FALSE(*serving);  // draining: not ready
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(cluster.router().Running()) << cluster.Logs();  // waits

  cluster.worker(0).Signal(SIGCONT);
  auto [status, answered] = answer.get();
  EXPECT_TRUE(status.ok()) << status << cluster.Logs();
  EXPECT_EQ(cluster.router().Wait(std::chrono::seconds(5)), 0)
      << cluster.Logs();
  const auto after = Clock::now() - answered;
  EXPECT_LT(after, std::chrono::seconds(2))
      << std::chrono::duration<double>(after).count() << " s\n"
      << cluster.Logs();
}

}  // namespace
}  // namespace moe
