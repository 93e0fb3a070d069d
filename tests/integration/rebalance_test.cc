// Live rebalancing (server/placement/rebalancer.h): under a steady load of
// requests, Rebalance calls move the expert placement while every request
// succeeds with the bits it had before; and with --rebalance-every-steps the
// placement follows the skew when it moves to other experts.
#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/placement.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

constexpr int64_t kH = 64, kE = 8;

std::vector<std::string> Model() {
  return {"--synthetic", "--hidden=64", "--inter=32", "--experts=8",
          "--top-k=2",   "--seed=5",    "--layers=1", "--synthetic-zipf=0"};
}

// n copies of one row: every token goes to the same k experts.
std::vector<float> SameRow(int64_t n, int seed) {
  std::vector<float> x(n * kH);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < kH; ++h) {
      x[t * kH + h] = 0.1f * static_cast<float>((h * 7 + seed * 13) % 11 - 5);
    }
  }
  return x;
}

// Varied rows.
std::vector<float> Rows(int64_t n, int seed) {
  std::vector<float> x(n * kH);
  for (int64_t i = 0; i < n * kH; ++i) {
    x[i] = 0.05f * static_cast<float>((i * 31 + seed * 17) % 23 - 11);
  }
  return x;
}

std::set<int32_t> Experts(MoeClient& c, const std::vector<float>& x) {
  ForwardOptions fo;
  fo.routing = true;
  auto r = c.Forward(0, x.data(), static_cast<int64_t>(x.size()) / kH, kH, fo);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  return std::set<int32_t>(r->expert_ids.begin(), r->expert_ids.end());
}

TEST(Rebalance, UnderLoadFailsNoRequestAndChangesNoBit) {
  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = Model();
  co.workers = 2;
  co.router_args = {"--redundant-experts=2"};
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  MoeClient& c = cluster.client();
  // Two inputs with different experts; their answers before any rebalance.
  const std::vector<float> a = SameRow(12, 1), b = Rows(20, 2);
  auto ya = c.Forward(0, a.data(), 12, kH, {});
  auto yb = c.Forward(0, b.data(), 20, kH, {});
  ASSERT_TRUE(ya.ok() && yb.ok());

  std::atomic<bool> stop{false};
  std::atomic<int> sent{0}, failed{0}, changed{0};
  std::atomic<int> phase{0};  // 0: a-heavy, 1: b only
  std::vector<std::thread> clients;
  for (int u = 0; u < 4; ++u) {
    clients.emplace_back([&, u] {
      // No retries: a request the router fails counts here.
      ClientOptions o;
      o.target = cluster.target();
      o.retry = false;
      MoeClient own(o);
      for (int i = 0; !stop; ++i) {
        const bool use_a = phase == 0 ? (i + u) % 4 != 0 : false;
        const auto& x = use_a ? a : b;
        auto r = own.Forward(0, x.data(), static_cast<int64_t>(x.size()) / kH,
                             kH, {});
        ++sent;
        if (!r.ok()) {
          ++failed;
        } else if (r->y != (use_a ? ya->y : yb->y)) {
          ++changed;
        }
      }
    });
  }
  std::set<std::string> placements;
  uint64_t last_epoch = 0;
  for (int round = 0; round < 4; ++round) {
    if (round == 2) phase = 1;  // the skew moves
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto r = c.Rebalance();
    ASSERT_TRUE(r.ok()) << r.status() << cluster.Logs();
    EXPECT_GT(r->epoch(), last_epoch);
    last_epoch = r->epoch();
    auto s = c.GetExpertStats(0, false);
    ASSERT_TRUE(s.ok());
    std::string shown;
    for (const auto& w : s->placement()) {
      absl::StrAppend(&shown, "[", absl::StrJoin(w.experts(), ","), "]");
    }
    placements.insert(shown);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_GT(sent.load(), 20);
  EXPECT_EQ(failed.load(), 0) << cluster.Logs();
  EXPECT_EQ(changed.load(), 0);
  EXPECT_GE(placements.size(), 2u) << "the placement never moved";
}

TEST(Rebalance, EveryKStepsTheReplicasFollowTheSkew) {
  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = Model();
  co.workers = 2;
  co.router_args = {"--redundant-experts=2", "--rebalance-every-steps=10"};
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  MoeClient& c = cluster.client();
  // Find two single-row inputs whose expert pairs do not overlap.
  std::vector<float> first, second;
  std::set<int32_t> hot1, hot2;
  for (int seed = 1; seed < 40 && second.empty(); ++seed) {
    std::vector<float> x = SameRow(8, seed);
    std::set<int32_t> e = Experts(c, x);
    if (first.empty()) {
      first = x;
      hot1 = e;
    } else if (std::none_of(e.begin(), e.end(),
                            [&](int32_t v) { return hot1.count(v) > 0; })) {
      second = x;
      hot2 = e;
    }
  }
  ASSERT_FALSE(second.empty());
  // Until `hot`'s experts have a replica on both workers: at most two
  // placements after the load moved, and one of slack. Counted in
  // placements, not steps: the rebalancer polls every 50 ms, and how many
  // steps fit in that depends on how fast a step is.
  auto follow = [&](const std::vector<float>& x, const std::set<int32_t>& hot) {
    std::string shown;
    int placements = 0;
    for (int i = 0; i < 2000; ++i) {
      ASSERT_TRUE(c.Forward(0, x.data(), 8, kH, {}).ok());
      auto s = c.GetExpertStats(0, false);
      ASSERT_TRUE(s.ok());
      std::string now;
      for (const auto& w : s->placement()) {
        absl::StrAppend(&now, "[", absl::StrJoin(w.experts(), ","), "]");
      }
      if (now != shown && i > 0) ++placements;
      shown = now;
      bool all = s->replicas_per_expert_size() == kE;
      for (int32_t e : hot) all = all && s->replicas_per_expert(e) == 2;
      if (all && i >= 1) {
        // The rows now split evenly over the workers. (A rebalance still
        // loading from an older window may switch the placement between the
        // check above and this step: then look again at the next steps.)
        ASSERT_TRUE(c.GetExpertStats(0, true).ok());
        ASSERT_TRUE(c.Forward(0, x.data(), 8, kH, {}).ok());
        auto after = c.GetExpertStats(0, false);
        ASSERT_TRUE(after.ok());
        if (after->worker_max_over_mean() > 1.10) continue;
        EXPECT_LE(placements, 3) << "took more than two rebalances";
        return;
      }
    }
    FAIL() << "the replicas never followed the load, or the rows never split "
              "evenly over the workers";
  };
  follow(first, hot1);
  follow(second, hot2);
}

}  // namespace
}  // namespace moe
