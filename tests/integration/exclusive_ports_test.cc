// Every listening port of moe-router and moe-worker is the process's own
// alone: a second process given a port in use exits non-zero at start,
// naming the flag, the address and the cause, and the first one goes on
// serving. Before, gRPC's default SO_REUSEPORT let a second router start on
// the same --listen, --worker-listen and --health-listen ports, and the
// kernel split the connections between the two.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/small_model.h"

namespace moe {
namespace {

using std::chrono::seconds;
using testing::LocalCluster;

// A router with one worker, each with every port of its own: the router's
// public, workers', health and metrics ports, the worker's health and
// metrics ports. Port files in the cluster's directory.
LocalCluster::Options AllPorts(LocalCluster& cluster) {
  LocalCluster::Options o;
  o.model_args = testing::SmallModelArgs();
  o.workers = 1;
  o.worker_port = true;
  o.health_port = true;
  o.router_args = {"--metrics-listen=127.0.0.1:0",
                   "--metrics-port-file=" + cluster.dir() + "/metrics_port"};
  o.worker_args = {
      "--health-listen=127.0.0.1:0",
      "--health-port-file=" + cluster.dir() + "/worker_health_port",
      "--metrics-listen=127.0.0.1:0",
      "--metrics-port-file=" + cluster.dir() + "/worker_metrics_port"};
  o.client.retry = false;
  return o;
}

int PortIn(LocalCluster& cluster, const std::string& file) {
  int port = 0;
  std::ifstream(cluster.dir() + "/" + file) >> port;
  return port;
}

int PortOf(const std::string& target) {
  return std::stoi(target.substr(target.rfind(':') + 1));
}

// `argv` plus `flag`=127.0.0.1:`port` exits non-zero within seconds, naming
// the flag, the address and that another process listens there.
void ExpectRefused(std::vector<std::string> argv, const std::string& flag,
                   int port) {
  ASSERT_GT(port, 0) << flag;
  const std::string address = absl::StrCat("127.0.0.1:", port);
  argv.push_back(flag + "=" + address);
  const auto start = std::chrono::steady_clock::now();
  // Killed by pid when it outlives the timeout (exit_code -1).
  testing::CommandResult r = testing::RunCommand(argv, seconds(30));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(r.exit_code, 0) << flag << " started on a port in use\n"
                            << r.output;
  EXPECT_NE(r.exit_code, -1) << flag << " still running after 30 s\n"
                             << r.output;
  EXPECT_LT(took, seconds(20)) << flag;
  const size_t clear = r.output.find(absl::StrCat(
      flag, " ", address,
      ": address already in use (another process is listening there)"));
  EXPECT_NE(clear, std::string::npos) << r.output;
  // The clear line comes first: gRPC's own bind error (several lines of
  // "No address added out of total ... resolved" and its causes) never
  // comes before it.
  for (const char* noise : {"No address added", "Failed to add"}) {
    const size_t at = r.output.find(noise);
    EXPECT_TRUE(at == std::string::npos || clear < at) << noise << "\n"
                                                       << r.output;
  }
}

// A router whose --listen (on a free port unless the case's flag sets it)
// and other flags start it on their own.
std::vector<std::string> SecondRouter(int workers = 1) {
  std::vector<std::string> argv = {
      testing::RouterBinary(), "--listen=127.0.0.1:0",
      absl::StrCat("--num-workers=", workers), "--threads=1"};
  for (const std::string& a : testing::SmallModelArgs()) argv.push_back(a);
  return argv;
}

// The cluster still answers: the second process took nothing from it.
void ExpectStillServing(LocalCluster& cluster) {
  std::vector<float> x(4 * testing::kSmallHidden, 0.25f);
  auto y = cluster.client().Forward(0, x.data(), 4, testing::kSmallHidden, {});
  EXPECT_TRUE(y.ok()) << y.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(cluster.router().Running());
  EXPECT_TRUE(cluster.worker(0).Running());
}

TEST(ExclusivePortsTest, SecondRouterOnAPortInUseFailsNamingTheFlag) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.Start(AllPorts(cluster)).ok()) << cluster.Logs();
  ExpectRefused(SecondRouter(), "--listen", PortOf(cluster.target()));
  ExpectRefused(SecondRouter(), "--worker-listen",
                PortOf(cluster.worker_target()));
  ExpectRefused(SecondRouter(), "--health-listen", cluster.health_port());
  ExpectRefused(SecondRouter(), "--metrics-listen",
                PortIn(cluster, "metrics_port"));
  ExpectStillServing(cluster);
}

TEST(ExclusivePortsTest, SecondWorkerOnAPortInUseFailsNamingTheFlag) {
  LocalCluster cluster;
  ASSERT_TRUE(cluster.Start(AllPorts(cluster)).ok()) << cluster.Logs();
  const std::vector<std::string> second = {
      testing::WorkerBinary(), "--router=" + cluster.worker_target(),
      "--threads=1"};
  ExpectRefused(second, "--health-listen",
                PortIn(cluster, "worker_health_port"));
  ExpectRefused(second, "--metrics-listen",
                PortIn(cluster, "worker_metrics_port"));
  ExpectStillServing(cluster);
}

// What an older router looks like to a new one: a listener with
// SO_REUSEPORT set. Sharing needs both sockets to ask for it, so the new
// router refuses the port all the same.
TEST(ExclusivePortsTest, PortHeldWithReusePortIsRefusedToo) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  const int one = 1;
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ExpectRefused(SecondRouter(/*workers=*/0), "--listen", ntohs(a.sin_port));
  close(fd);
}

}  // namespace
}  // namespace moe
