// Two workers that NCCL would put on one GPU (the same device identity on
// the same host, neither staging through host memory): the router refuses
// the second at registration with a message naming the GPU and both
// workers, keeps the group from forming (and re-forming), and tells clients
// why in their UNAVAILABLE answer. CPU workers stand in for GPUs through
// --device-identity; with --collective gloo (host-staged) sharing is fine.
#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using std::chrono::seconds;

testing::LocalCluster::Options TwoWorkersOn(const std::string& identity) {
  testing::LocalCluster::Options o;
  o.workers = 2;
  o.model_args = {"--synthetic", "--hidden=32", "--inter=16", "--experts=4",
                  "--top-k=2"};
  o.worker_args = {"--device-identity=" + identity};
  o.ready_timeout = std::chrono::milliseconds(5000);
  return o;
}

TEST(SharedGpu, SecondNcclWorkerOnOneGpuIsRefusedWithAClearAnswer) {
  testing::LocalCluster cluster;
  const std::string gpu = "GPU-0b1c2d3e-fake";
  // The group never becomes ready, so Start reports that; the processes run.
  (void)cluster.Start(TwoWorkersOn(gpu));
  std::string answer;
  const bool refused = testing::WaitFor(
      [&] {
        std::vector<float> x(32, 0.5f);
        auto r = cluster.client().Forward(0, x.data(), 1, 32, {});
        answer = r.ok() ? "OK" : std::string(r.status().message());
        return absl::StrContains(answer, "last refused");
      },
      seconds(5));
  ASSERT_TRUE(refused) << answer << "\n" << cluster.Logs();
  EXPECT_TRUE(absl::StrContains(answer, gpu)) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "--collective gloo")) << answer;
  EXPECT_TRUE(absl::StrContains(answer, "already uses")) << answer;
  // Refused at registration: no group generation was ever started.
  EXPECT_FALSE(absl::StrContains(cluster.router().Log(), "ranks assigned"))
      << cluster.router().Log();
}

TEST(SharedGpu, HostStagedWorkersMayShareOneGpu) {
  testing::LocalCluster cluster;
  testing::LocalCluster::Options o = TwoWorkersOn("GPU-shared-fake");
  o.worker_args.push_back("--collective=gloo");
  o.ready_timeout = std::chrono::milliseconds(60000);
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  std::vector<float> x(3 * 32, 0.25f);
  auto r = cluster.client().Forward(0, x.data(), 3, 32, {});
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
}

}  // namespace
}  // namespace moe
