// A worker killed with SIGKILL while requests flow: requests in flight end
// UNAVAILABLE within the step timeout (never a hang, never a wrong answer),
// the router stays up and reports not ready, and a replacement worker
// restores service in a new group generation. A step the workers refuse
// deterministically (over their --max-batch-tokens) reaches the client with
// the workers' own code and message, and keeps the generation when every
// worker refused it.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "core/synthetic_model.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/http_get.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/small_model.h"
#include "tests/testutil/wait_for.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;
using testing::LocalCluster;
using testing::WaitFor;

constexpr int64_t kHidden = 32;
constexpr int64_t kStepTimeoutMs = 2000;

struct Outcome {
  Clock::time_point start, end;
  absl::StatusCode code;
  bool correct;
};

// Router flags that serve /metrics on a port written to the cluster's dir.
std::vector<std::string> MetricsArgs(LocalCluster& cluster) {
  return {"--metrics-listen=127.0.0.1:0",
          "--metrics-port-file=" + cluster.dir() + "/metrics_port"};
}

// The router's moe_worker_group_generation, or -1.
double Generation(LocalCluster& cluster) {
  int port = 0;
  std::ifstream(cluster.dir() + "/metrics_port") >> port;
  if (port <= 0) return -1;
  auto text = testing::HttpGet(port, "/metrics");
  if (!text.ok()) return -1;
  return testing::MetricValue(*text, "moe_worker_group_generation");
}

TEST(WorkerFailure, KilledWorkerFailsFastAndReplacementRestoresService) {
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = testing::SmallModelArgs();
  o.workers = 2;
  o.router_args = MetricsArgs(cluster);
  o.router_args.push_back(absl::StrCat("--step-timeout-ms=", kStepTimeoutMs));
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  const double generation = Generation(cluster);
  ASSERT_GT(generation, 0) << cluster.Logs();

  // The expected answers, computed here from the same synthetic weights.
  auto moe = testing::SmallModelEngine();
  ASSERT_NE(moe, nullptr);
  std::vector<std::vector<float>> inputs, expected;
  for (int i = 0; i < 8; ++i) {
    const int64_t n = 3 + i;
    inputs.emplace_back(n * kHidden);
    FillSyntheticInput(40 + i, n * kHidden, inputs.back().data());
    expected.emplace_back(n * kHidden);
    Routing r;
    ASSERT_TRUE(moe->Forward(0, inputs.back().data(), {.n = n},
                             expected.back().data(), &r)
                    .ok());
  }

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<Outcome> outcomes;
  std::vector<std::thread> load;
  for (int c = 0; c < 4; ++c) {
    load.emplace_back([&, c] {
      for (int i = c; !stop; i = (i + 1) % 8) {
        ForwardOptions fo;
        fo.timeout = std::chrono::seconds(30);
        Outcome out;
        out.start = Clock::now();
        auto r =
            cluster.client().Forward(0, inputs[i].data(), 3 + i, kHidden, fo);
        out.end = Clock::now();
        out.code = r.status().code();
        out.correct = r.ok() && r->y == expected[i];
        {
          std::lock_guard<std::mutex> lock(mu);
          outcomes.push_back(out);
        }
        if (!r.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  // Counts outcomes under `mu`.
  auto count = [&](const std::function<bool(const Outcome&)>& pred) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count_if(outcomes.begin(), outcomes.end(), pred);
  };
  const auto ok = [](const Outcome& o) {
    return o.code == absl::StatusCode::kOk;
  };
  ASSERT_TRUE(WaitFor([&] { return count(ok) >= 4; }, std::chrono::seconds(10)))
      << "no requests served before the kill\n"
      << cluster.Logs();
  const auto killed_at = Clock::now();
  cluster.KillWorker(1, SIGKILL);
  // The router notices: requests fail, and it stops claiming readiness,
  // within the step timeout.
  const auto detect = std::chrono::milliseconds(kStepTimeoutMs + 1000);
  ASSERT_TRUE(WaitFor(
      [&] {
        return count([&](const Outcome& o) {
                 return o.end > killed_at &&
                        o.code == absl::StatusCode::kUnavailable;
               }) > 0;
      },
      detect))
      << "no request failed after the kill\n"
      << cluster.Logs();
  ASSERT_TRUE(cluster.router().Running());
  ASSERT_TRUE(WaitFor(
      [&] {
        auto health = cluster.client().Health();
        return health.ok() && !*health;
      },
      detect))
      << "router still claims to be ready\n"
      << cluster.Logs();

  ASSERT_TRUE(cluster.StartWorker().ok());
  const auto restarted_at = Clock::now();
  Clock::time_point first_success{};
  WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& out : outcomes) {
          if (out.start > restarted_at && out.code == absl::StatusCode::kOk &&
              (first_success == Clock::time_point{} ||
               out.end < first_success)) {
            first_success = out.end;
          }
        }
        return first_success != Clock::time_point{};
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50));
  // Service is back for every client, not just one.
  WaitFor(
      [&] {
        return count([&](const Outcome& o) {
                 return o.start > restarted_at && ok(o);
               }) >= 4;
      },
      std::chrono::seconds(10));
  stop = true;
  for (auto& t : load) t.join();

  ASSERT_NE(first_success, Clock::time_point{})
      << "no success after the replacement started\n"
      << cluster.Logs();
  EXPECT_LT(first_success - restarted_at, std::chrono::seconds(15));
  int ok_before = 0, ok_after = 0, unavailable = 0;
  for (const auto& out : outcomes) {
    // Never a wrong answer; never longer than the step timeout plus a second.
    if (out.code == absl::StatusCode::kOk) {
      EXPECT_TRUE(out.correct) << "a wrong answer";
      (out.start < killed_at ? ok_before : ok_after)++;
    } else {
      EXPECT_EQ(out.code, absl::StatusCode::kUnavailable);
      ++unavailable;
    }
    EXPECT_LT(out.end - out.start,
              std::chrono::milliseconds(kStepTimeoutMs + 1000));
  }
  EXPECT_GT(ok_before, 0);
  EXPECT_GT(ok_after, 0);
  EXPECT_GT(unavailable, 0);
  EXPECT_TRUE(cluster.router().Running());
  // The replacement joined a new generation.
  EXPECT_GT(Generation(cluster), generation);
}

// The synthetic model of the tests below, and its expected answers.
class RefusedStep : public ::testing::Test {
 protected:
  static constexpr int64_t kHidden = 32;
  static constexpr int64_t kWorkerLimit = 8;  // rows per step per worker

  void SetUp() override {
    moe_ = testing::SmallModelEngine();
    ASSERT_NE(moe_, nullptr);
  }

  LocalCluster::Options ClusterOptions(LocalCluster& cluster) {
    LocalCluster::Options o;
    o.model_args = testing::SmallModelArgs();
    o.workers = 2;
    o.router_args = MetricsArgs(cluster);
    o.router_args.push_back(absl::StrCat("--step-timeout-ms=", kStepTimeoutMs));
    // Every step through the all-to-alls, whose failures these tests are
    // about (direct steps: OneWorkerRefusingADirectStepKeepsTheGroup).
    o.router_args.push_back("--direct-step-tokens=0");
    return o;
  }

  // Forwards n tokens (seeded by `seed`) and checks the answer when OK.
  absl::Status Forward(LocalCluster& cluster, int64_t n, int seed) {
    std::vector<float> x(n * kHidden), want(n * kHidden);
    FillSyntheticInput(seed, n * kHidden, x.data());
    Routing r;
    EXPECT_TRUE(moe_->Forward(0, x.data(), {.n = n}, want.data(), &r).ok());
    ForwardOptions fo;
    fo.timeout = std::chrono::seconds(30);
    auto got = cluster.client().Forward(0, x.data(), n, kHidden, fo);
    if (!got.ok()) return got.status();
    EXPECT_EQ(got->y, want) << "a wrong answer for " << n << " tokens";
    return absl::OkStatus();
  }

  std::unique_ptr<LocalMoe> moe_;
};

TEST_F(RefusedStep, EveryWorkerRefusesKeepsTheGroup) {
  LocalCluster cluster;
  LocalCluster::Options o = ClusterOptions(cluster);
  o.worker_args = {absl::StrCat("--max-batch-tokens=", kWorkerLimit)};
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  ASSERT_TRUE(Forward(cluster, 4, 1).ok()) << cluster.Logs();
  const double generation = Generation(cluster);
  ASSERT_GT(generation, 0) << cluster.Logs();

  // 40 tokens: 20 rows for each worker, over their 8 (the router's limit is
  // its default 4096). Both refuse before any collective.
  const auto start = Clock::now();
  absl::Status big = Forward(cluster, 40, 2);
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big << "\n"
                                                              << cluster.Logs();
  EXPECT_NE(big.message().find("worker rank "), std::string::npos) << big;
  EXPECT_NE(big.message().find("20 rows exceed this worker's 8"),
            std::string::npos)
      << big;
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(kStepTimeoutMs))
      << "the refusal waited for a collective timeout";

  // The next step runs at once, in the same generation, and the workers'
  // collectives still work.
  for (int i = 0; i < 3; ++i) {
    absl::Status small = Forward(cluster, 6 + i, 3 + i);
    EXPECT_TRUE(small.ok()) << small << "\n" << cluster.Logs();
  }
  EXPECT_EQ(Generation(cluster), generation) << cluster.Logs();
  // Refused again: still the workers' error, still the same group.
  EXPECT_EQ(Forward(cluster, 40, 2).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Forward(cluster, 5, 9).ok()) << cluster.Logs();
  EXPECT_EQ(Generation(cluster), generation) << cluster.Logs();
}

TEST_F(RefusedStep, OneWorkerRefusesRebuildsTheGroup) {
  // Worker 1 takes steps of at most 8 rows, worker 0 the router's 4096: on a
  // step over 8 rows per worker, worker 0 goes into the all-to-all that
  // worker 1 never joins. The client still gets worker 1's error, and the
  // group is rebuilt (worker 0's collective timed out).
  LocalCluster cluster;
  LocalCluster::Options o = ClusterOptions(cluster);
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  cluster.KillWorker(1, SIGTERM);
  ASSERT_TRUE(
      cluster.StartWorker({absl::StrCat("--max-batch-tokens=", kWorkerLimit)})
          .ok());
  ASSERT_TRUE(cluster.WaitReady(std::chrono::seconds(30)).ok())
      << cluster.Logs();
  absl::Status first = Forward(cluster, 4, 1);
  ASSERT_TRUE(first.ok()) << first << "\n" << cluster.Logs();
  const double generation = Generation(cluster);
  ASSERT_GT(generation, 0) << cluster.Logs();

  absl::Status big = Forward(cluster, 40, 2);
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big << "\n"
                                                              << cluster.Logs();
  EXPECT_NE(big.message().find("worker rank "), std::string::npos) << big;

  // Service comes back in a new generation.
  absl::Status small;
  const auto start = Clock::now();
  do {
    small = Forward(cluster, 6, 3);
    if (!small.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (!small.ok() && Clock::now() - start < std::chrono::seconds(20));
  EXPECT_TRUE(small.ok()) << small << "\n" << cluster.Logs();
  EXPECT_GT(Generation(cluster), generation) << cluster.Logs();
}

// A direct step touches no collective: one worker refusing it (over its
// --max-batch-tokens) fails the step with that worker's error at once, and
// the group stays as it is.
TEST_F(RefusedStep, OneWorkerRefusingADirectStepKeepsTheGroup) {
  LocalCluster cluster;
  LocalCluster::Options o = ClusterOptions(cluster);
  o.router_args.back() = "--direct-step-tokens=64";
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  cluster.KillWorker(1, SIGTERM);
  ASSERT_TRUE(
      cluster.StartWorker({absl::StrCat("--max-batch-tokens=", kWorkerLimit)})
          .ok());
  ASSERT_TRUE(cluster.WaitReady(std::chrono::seconds(30)).ok())
      << cluster.Logs();
  ASSERT_TRUE(Forward(cluster, 4, 1).ok()) << cluster.Logs();
  const double generation = Generation(cluster);
  ASSERT_GT(generation, 0) << cluster.Logs();

  const auto start = Clock::now();
  absl::Status big = Forward(cluster, 40, 2);
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big << "\n"
                                                              << cluster.Logs();
  EXPECT_NE(big.message().find("exceed this worker's 8"), std::string::npos)
      << big;
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(kStepTimeoutMs))
      << "the refusal waited for a collective timeout";
  for (int i = 0; i < 3; ++i) {
    absl::Status small = Forward(cluster, 5 + i, 3 + i);
    EXPECT_TRUE(small.ok()) << small << "\n" << cluster.Logs();
  }
  EXPECT_EQ(Generation(cluster), generation) << cluster.Logs();
}

TEST(WorkerFailure, RouterWaitingForWorkersSaysUnavailable) {
  // The router wants two workers; none comes.
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = {"--synthetic", "--hidden=16", "--inter=8", "--experts=4",
                  "--top-k=1"};
  o.workers = 0;
  o.router_args = {"--num-workers=2"};
  o.ready_timeout = std::chrono::milliseconds(500);
  EXPECT_FALSE(cluster.Start(o).ok());
  std::vector<float> x(16, 0.5f);
  auto r = cluster.client().Forward(0, x.data(), 1, 16, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("0 of 2"), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace moe
