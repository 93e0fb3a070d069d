// Steady-state steps fault no new pages: after warm-up, a stream of
// same-sized requests costs the router and every worker only a handful of
// minor page faults per request (read from /proc/PID/stat), not the
// hundreds that buffers mapped afresh each step would cost, and their RSS
// stops growing.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

constexpr int64_t kHidden = 1024;
constexpr int64_t kTokens = 512;
// A 512-token request is 1 MiB of bf16 and 2 MiB of fp32 rows: 256 and 512
// pages. Faulting any step-sized buffer anew costs hundreds of faults.
constexpr int64_t kMaxFaultsPerRequest = 128;

int64_t MinorFaults(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  // Fields after the command name, which is in parentheses: state is
  // field 3, minflt field 10.
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 10; ++i) rest >> field;
  return std::stoll(field);
}

int64_t RssKb(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

class SteadyStateTest : public ::testing::TestWithParam<int> {};

TEST_P(SteadyStateTest, RequestsFaultAlmostNoNewPages) {
  testing::LocalCluster cluster;
  testing::LocalCluster::Options o;
  o.workers = GetParam();
  o.model_args = {"--synthetic", absl::StrCat("--hidden=", kHidden),
                  "--inter=64",  "--experts=16",
                  "--top-k=4",   "--max-batch-tokens=1024"};
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  std::vector<pid_t> pids = {cluster.router().pid()};
  for (int i = 0; i < cluster.num_workers(); ++i) {
    pids.push_back(cluster.worker(i).pid());
  }
  std::vector<float> x(kTokens * kHidden);
  FillSyntheticInput(9, x.size(), x.data());
  ForwardOptions fo;
  fo.dtype = moe::v1::BF16;
  auto send = [&](int count) {
    for (int i = 0; i < count; ++i) {
      auto r = cluster.client().Forward(0, x.data(), kTokens, kHidden, fo);
      ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    }
  };
  send(20);  // warm-up: every buffer reaches its size
  std::vector<int64_t> faults, rss;
  for (pid_t p : pids) {
    faults.push_back(MinorFaults(p));
    rss.push_back(RssKb(p));
  }
  constexpr int kRequests = 40;
  send(kRequests);
  for (size_t i = 0; i < pids.size(); ++i) {
    const int64_t per_request = (MinorFaults(pids[i]) - faults[i]) / kRequests;
    EXPECT_LE(per_request, kMaxFaultsPerRequest)
        << (i == 0 ? "router" : absl::StrCat("worker ", i - 1))
        << " faults pages in every request";
    // RSS may move by allocator noise, not by a request's worth per request.
    EXPECT_LE(RssKb(pids[i]) - rss[i], 8 * 1024)
        << (i == 0 ? "router" : absl::StrCat("worker ", i - 1))
        << " grows in steady state";
  }
}

std::string Environment(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/environ"));
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// Idle OpenMP threads spin briefly, not libgomp's millisecond, while a step
// waits on its peers (core/openmp_policy.h): the processes re-executed
// themselves with GOMP_SPINCOUNT set, keeping their pid, and serve.
TEST(ServiceProcessTest, OpenMpThreadsSpinBrieflyUnlessTheOperatorChose) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr ||
      std::getenv("GOMP_SPINCOUNT") != nullptr) {
    GTEST_SKIP() << "this environment sets OMP_WAIT_POLICY or GOMP_SPINCOUNT "
                    "itself; the processes keep it";
  }
  testing::LocalCluster cluster;
  testing::LocalCluster::Options o;
  o.workers = 1;
  o.model_args = {"--synthetic", "--hidden=64", "--inter=32", "--experts=4",
                  "--top-k=2"};
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  std::vector<float> x(3 * 64);
  FillSyntheticInput(3, x.size(), x.data());
  ASSERT_TRUE(cluster.client().Forward(0, x.data(), 3, 64, {}).ok());
  for (pid_t p : {cluster.router().pid(), cluster.worker(0).pid()}) {
    const std::string env = Environment(p);
    EXPECT_NE(env.find(std::string("GOMP_SPINCOUNT=10000\0", 21)),
              std::string::npos)
        << "pid " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, SteadyStateTest, ::testing::Values(0, 2),
                         [](const auto& info) {
                           return absl::StrCat("P", info.param);
                         });

}  // namespace
}  // namespace moe
