// Elastic regrouping with real processes: a worker of three killed with
// SIGKILL under load and not replaced; after --regroup-after-ms the two left
// form a group of their own (the lost worker's experts re-split between
// them) and answer again, with the same bits as the reference engine; a
// worker started later grows the group back to three in a new generation.
// With --hold-while-regrouping-ms, requests that arrive while the group
// re-forms wait for it instead of failing.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
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
using std::chrono::milliseconds;
using testing::LocalCluster;
using testing::WaitFor;

constexpr int64_t kHidden = testing::kSmallHidden;
constexpr int kInputs = 8;

struct Outcome {
  Clock::time_point start, end;
  absl::StatusCode code;
  bool correct;
};

// Clients sending the same 8 inputs over and over, each answer checked
// against the reference engine's bits.
class Load {
 public:
  Load(LocalCluster& cluster, int clients) {
    auto moe = testing::SmallModelEngine();
    EXPECT_NE(moe, nullptr);
    if (moe == nullptr) return;
    for (int i = 0; i < kInputs; ++i) {
      const int64_t n = 3 + i;
      inputs_.emplace_back(n * kHidden);
      FillSyntheticInput(70 + i, n * kHidden, inputs_.back().data());
      expected_.emplace_back(n * kHidden);
      Routing r;
      EXPECT_TRUE(moe->Forward(0, inputs_.back().data(), {.n = n},
                               expected_.back().data(), &r)
                      .ok());
    }
    for (int c = 0; c < clients; ++c) {
      threads_.emplace_back([this, &cluster, c] {
        for (int i = c; !stop_; i = (i + 1) % kInputs) {
          ForwardOptions fo;
          fo.timeout = std::chrono::seconds(30);
          Outcome out;
          out.start = Clock::now();
          auto r = cluster.client().Forward(0, inputs_[i].data(), 3 + i,
                                            kHidden, fo);
          out.end = Clock::now();
          out.code = r.status().code();
          out.correct = r.ok() && r->y == expected_[i];
          {
            std::lock_guard<std::mutex> lock(mu_);
            outcomes_.push_back(out);
          }
          if (!r.ok()) std::this_thread::sleep_for(milliseconds(20));
        }
      });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  int64_t Count(const std::function<bool(const Outcome&)>& pred) {
    std::lock_guard<std::mutex> lock(mu_);
    return std::count_if(outcomes_.begin(), outcomes_.end(), pred);
  }
  std::vector<Outcome> Outcomes() {
    std::lock_guard<std::mutex> lock(mu_);
    return outcomes_;
  }
  // Successful answers that started after `t`.
  int64_t OkSince(Clock::time_point t) {
    return Count([&](const Outcome& o) {
      return o.start > t && o.code == absl::StatusCode::kOk;
    });
  }

 private:
  std::vector<std::vector<float>> inputs_, expected_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Outcome> outcomes_;
  std::vector<std::thread> threads_;
};

double Metric(LocalCluster& cluster, const std::string& series) {
  int port = 0;
  std::ifstream(cluster.dir() + "/metrics_port") >> port;
  if (port <= 0) return -1;
  auto text = testing::HttpGet(port, "/metrics");
  if (!text.ok()) return -1;
  return testing::MetricValue(*text, series);
}

// True when the router serves with a group of `workers`.
bool GroupIs(LocalCluster& cluster, int workers) {
  auto info = cluster.client().GetModelInfo(milliseconds(2000));
  return info.ok() && info->ready() && info->group_workers() == workers;
}

LocalCluster::Options ThreeWorkers(LocalCluster& cluster) {
  LocalCluster::Options o;
  o.model_args = testing::SmallModelArgs();
  o.workers = 3;
  o.router_args = {"--metrics-listen=127.0.0.1:0",
                   "--metrics-port-file=" + cluster.dir() + "/metrics_port",
                   "--step-timeout-ms=2000"};
  // Every failure counts: no client retries hide one.
  o.client.retry = false;
  return o;
}

// With redundant experts too: their placement is made for three workers,
// so the group of two splits the experts evenly and the placement is back
// in force (same bits) when the third returns.
class ElasticTest : public ::testing::TestWithParam<int> {};

TEST_P(ElasticTest, KilledWorkerLeavesTwoThatServeThenTheGroupGrowsBack) {
  LocalCluster cluster;
  LocalCluster::Options o = ThreeWorkers(cluster);  // --regroup-after-ms 5000
  if (GetParam() > 0) {
    o.router_args.push_back(absl::StrCat("--redundant-experts=", GetParam()));
  }
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  ASSERT_TRUE(GroupIs(cluster, 3)) << cluster.Logs();
  const double generation = Metric(cluster, "moe_worker_group_generation");
  Load load(cluster, 3);
  ASSERT_TRUE(
      WaitFor([&] { return load.OkSince({}) >= 6; }, std::chrono::seconds(20)))
      << "no answers before the kill\n"
      << cluster.Logs();

  const auto killed_at = Clock::now();
  cluster.KillWorker(1, SIGKILL);
  // Correct answers again within 10 s, from a group of two.
  ASSERT_TRUE(WaitFor([&] { return load.OkSince(killed_at) >= 3; },
                      std::chrono::seconds(10), milliseconds(20)))
      << "no answers within 10 s of the kill\n"
      << cluster.Logs();
  const auto back_at = Clock::now();
  std::printf("answers again %lld ms after the kill\n",
              static_cast<long long>(
                  std::chrono::duration_cast<milliseconds>(back_at - killed_at)
                      .count()));
  ASSERT_TRUE(GroupIs(cluster, 2)) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->degraded());
  EXPECT_EQ(info->num_workers(), 3);
  auto full = cluster.client().Health("full-capacity");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_FALSE(*full) << "full-capacity SERVING with two of three workers";
  auto serving = cluster.client().Health();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving) << "a degraded group serves";
  EXPECT_EQ(Metric(cluster, "moe_worker_group_size"), 2);
  EXPECT_EQ(Metric(cluster, "moe_workers_expected"), 3);
  // Every client is served, not one.
  ASSERT_TRUE(WaitFor([&] { return load.OkSince(back_at) >= 6; },
                      std::chrono::seconds(10)))
      << cluster.Logs();

  // A worker comes back: a new generation of three.
  ASSERT_TRUE(cluster.StartWorker().ok());
  ASSERT_TRUE(WaitFor([&] { return GroupIs(cluster, 3); },
                      std::chrono::seconds(30), milliseconds(100)))
      << "the group did not grow back to three\n"
      << cluster.Logs();
  const auto grown_at = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return load.OkSince(grown_at) >= 6; },
                      std::chrono::seconds(15)))
      << cluster.Logs();
  load.Stop();
  info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->degraded());
  full = cluster.client().Health("full-capacity");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(*full);
  EXPECT_EQ(Metric(cluster, "moe_worker_group_size"), 3);
  // Two new generations at least: the two left, then the three.
  EXPECT_GE(Metric(cluster, "moe_worker_group_generation"), generation + 2);

  int64_t ok = 0;
  for (const Outcome& out : load.Outcomes()) {
    if (out.code != absl::StatusCode::kOk) {
      EXPECT_EQ(out.code, absl::StatusCode::kUnavailable);
      continue;
    }
    ++ok;
    EXPECT_TRUE(out.correct) << "an answer that differs from the reference";
  }
  EXPECT_GT(ok, 18);
}

INSTANTIATE_TEST_SUITE_P(RedundantExperts, ElasticTest, ::testing::Values(0, 3),
                         [](const auto& info) {
                           return absl::StrCat("R", info.param);
                         });

TEST(Elastic, RequestsAreHeldWhileTheGroupReforms) {
  LocalCluster cluster;
  LocalCluster::Options o = ThreeWorkers(cluster);
  o.router_args.push_back("--regroup-after-ms=3000");
  o.router_args.push_back("--hold-while-regrouping-ms=20000");
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  Load load(cluster, 3);
  ASSERT_TRUE(
      WaitFor([&] { return load.OkSince({}) >= 6; }, std::chrono::seconds(20)))
      << cluster.Logs();
  const auto killed_at = Clock::now();
  cluster.KillWorker(2, SIGKILL);
  // A SIGKILLed worker's stream ends at once; the steps in flight then fail
  // (those are the only failures allowed). Requests after that wait for the
  // group of two, which forms after --regroup-after-ms.
  ASSERT_TRUE(WaitFor([&] { return load.OkSince(killed_at) >= 6; },
                      std::chrono::seconds(15), milliseconds(20)))
      << cluster.Logs();
  load.Stop();
  Clock::time_point noticed = Clock::time_point::max();
  for (const Outcome& out : load.Outcomes()) {
    if (out.code != absl::StatusCode::kOk && out.end > killed_at) {
      noticed = std::min(noticed, out.end);
    }
  }
  int64_t failed_after = 0, held = 0;
  for (const Outcome& out : load.Outcomes()) {
    if (out.code == absl::StatusCode::kOk) {
      EXPECT_TRUE(out.correct) << "an answer that differs from the reference";
      // Waited out (most of) the regroup.
      if (out.start > killed_at && out.end - out.start > milliseconds(1500)) {
        ++held;
      }
    } else if (out.start > noticed) {
      ++failed_after;
      ADD_FAILURE() << "a request sent during the regroup failed with code "
                    << static_cast<int>(out.code);
    }
  }
  EXPECT_EQ(failed_after, 0);
  EXPECT_GT(held, 0) << "no request was held through the regroup\n"
                     << cluster.Logs();
}

}  // namespace
}  // namespace moe
