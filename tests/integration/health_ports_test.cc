// The probe ports as an orchestrator sees them (README, "Health"): a router
// and two workers, each with --health-listen. `liveness` is SERVING from the
// start to the end of each process, whatever its readiness; the overall
// status is SERVING once the worker group is ready (a degraded group too);
// `full-capacity` only with every configured worker. Before this test a
// worker given --health-listen exited at start, and `liveness` followed
// readiness down, so probes killed routers that waited for their workers.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/moe_client.h"
#include "gtest/gtest.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using std::chrono::seconds;
using testing::ChildProcess;

class HealthPortsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("moe-health-", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    for (auto& w : workers_) w.reset();
    router_.reset();
    std::filesystem::remove_all(dir_);
  }

  // The port a process wrote to `file`, 0 if it never did within 30 s.
  int ReadPort(const std::string& file, ChildProcess& p) {
    int port = 0;
    testing::WaitFor(
        [&] {
          std::ifstream f(dir_ / file);
          return (f >> port && port > 0) || !p.Running();
        },
        seconds(30));
    return port;
  }

  std::unique_ptr<ChildProcess> Spawn(std::vector<std::string> argv,
                                      const std::string& log) {
    auto p = ChildProcess::Start(argv, (dir_ / log).string());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  std::unique_ptr<ChildProcess> StartWorker(int i, const std::string& router) {
    return Spawn(
        {testing::WorkerBinary(), "--router=" + router, "--threads=1",
         "--health-listen=127.0.0.1:0",
         absl::StrCat("--health-port-file=", (dir_ / "w").string(), i)},
        absl::StrCat("worker", i, ".log"));
  }

  static std::unique_ptr<MoeClient> HealthClient(int port) {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", port);
    o.retry = false;
    return std::make_unique<MoeClient>(o);
  }
  static bool Serving(MoeClient& c, const std::string& service) {
    auto h = c.Health(service, seconds(2));
    return h.ok() && *h;
  }

  std::string Logs() {
    std::string out = router_ ? "--- router\n" + router_->Log() : "";
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i])
        out += absl::StrCat("--- worker ", i, "\n", workers_[i]->Log());
    }
    return out;
  }

  std::filesystem::path dir_;
  std::unique_ptr<ChildProcess> router_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
};

TEST_F(HealthPortsTest, LivenessStaysServingWhileReadinessFollowsTheGroup) {
  router_ = Spawn(
      {testing::RouterBinary(), "--listen=127.0.0.1:0",
       "--port-file=" + (dir_ / "port").string(), "--num-workers=2",
       "--threads=1", "--regroup-after-ms=1500", "--health-listen=127.0.0.1:0",
       "--health-port-file=" + (dir_ / "health").string(), "--synthetic",
       "--hidden=64", "--inter=32", "--experts=8", "--top-k=2"},
      "router.log");
  ASSERT_NE(router_, nullptr);
  const int health_port = ReadPort("health", *router_);
  const int port = ReadPort("port", *router_);
  ASSERT_GT(health_port, 0) << Logs();
  ASSERT_GT(port, 0) << Logs();
  auto router_health = HealthClient(health_port);
  auto router_public = HealthClient(port);

  // No workers yet: alive, not ready, on both ports.
  for (MoeClient* c : {router_health.get(), router_public.get()}) {
    EXPECT_TRUE(Serving(*c, "liveness")) << Logs();
    EXPECT_FALSE(Serving(*c, ""));
    EXPECT_FALSE(Serving(*c, "moe.v1.MoeService"));
    EXPECT_FALSE(Serving(*c, "full-capacity"));
  }

  // The API asked of the health port: refused, saying what port it is and
  // where the API is.
  auto info = router_health->GetModelInfo(seconds(5));
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(info.status().message().find("health-only port (--health-listen"),
            std::string::npos)
      << info.status();
  EXPECT_NE(info.status().message().find("the API is on the router's --listen"),
            std::string::npos)
      << info.status();

  const std::string target = absl::StrCat("127.0.0.1:", port);
  std::vector<std::unique_ptr<MoeClient>> worker_health;
  for (int i = 0; i < 2; ++i) {
    workers_.push_back(StartWorker(i, target));
    const int wp = ReadPort(absl::StrCat("w", i), *workers_.back());
    ASSERT_GT(wp, 0) << "worker " << i << " has no health port\n" << Logs();
    worker_health.push_back(HealthClient(wp));
    EXPECT_TRUE(Serving(*worker_health.back(), "liveness")) << Logs();
  }
  ASSERT_TRUE(testing::WaitFor([&] { return Serving(*router_health, ""); },
                               seconds(60)))
      << Logs();
  EXPECT_TRUE(Serving(*router_health, "moe.v1.MoeService"));
  EXPECT_TRUE(Serving(*router_health, "full-capacity"));
  for (auto& w : worker_health) {
    EXPECT_TRUE(testing::WaitFor([&] { return Serving(*w, ""); }, seconds(30)))
        << Logs();
    EXPECT_TRUE(Serving(*w, "liveness"));
  }

  // A worker dies: the router stays alive, serves degraded, and is not at
  // full capacity; the worker left stays alive throughout.
  workers_[1]->Signal(SIGKILL);
  workers_[1]->Wait(seconds(5));
  EXPECT_TRUE(testing::WaitFor(
      [&] { return !Serving(*router_health, "full-capacity"); }, seconds(30)));
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(Serving(*router_health, "liveness"));
    EXPECT_TRUE(Serving(*worker_health[0], "liveness"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(testing::WaitFor([&] { return Serving(*router_health, ""); },
                               seconds(30)))
      << "a degraded group serves\n"
      << Logs();

  // It comes back: full capacity again.
  workers_[1] = StartWorker(2, target);
  EXPECT_TRUE(testing::WaitFor(
      [&] { return Serving(*router_health, "full-capacity"); }, seconds(60)))
      << Logs();
  EXPECT_TRUE(router_->Running());
  EXPECT_TRUE(workers_[0]->Running());

  // SIGTERM drains: readiness goes first, the process ends.
  router_->Signal(SIGTERM);
  EXPECT_GE(router_->Wait(seconds(30)), 0) << Logs();
}

}  // namespace
}  // namespace moe
