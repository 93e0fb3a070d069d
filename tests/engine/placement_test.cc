// Placements on their own: the EPLB computation (replicas to the hottest
// experts, packing that evens the workers), the checks, the JSON form, and
// the router's replica choice in PlanDispatch.
#include "engine/placement.h"

#include <algorithm>

#include "engine/ep_plan.h"
#include "engine/token_router.h"
#include "gtest/gtest.h"

namespace moe {
namespace {

std::vector<double> WorkerLoads(const LayerPlacement& p,
                                const std::vector<double>& load) {
  std::vector<int64_t> copies(load.size(), 0);
  for (const auto& w : p.workers) {
    for (int32_t e : w) ++copies[e];
  }
  std::vector<double> out;
  for (const auto& w : p.workers) {
    double sum = 0;
    for (int32_t e : w) sum += load[e] / copies[e];
    out.push_back(sum);
  }
  return out;
}

TEST(Placement, ContiguousIsTheRangesWorkersAlwaysHad) {
  const LayerPlacement p = ContiguousPlacement(7, 3);
  ASSERT_EQ(p.world(), 3);
  EXPECT_EQ(p.workers[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.workers[1], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(p.workers[2], (std::vector<int32_t>{4, 5, 6}));
  EXPECT_TRUE(CheckPlacement(p, 7, 3, 0).ok());
  EXPECT_EQ(p.physical(), 7);
}

TEST(Placement, ZeroRedundancyWithEvenLoadKeepsEveryExpertOnce) {
  auto p = ComputePlacement(std::vector<double>(8, 5.0), 2, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(CheckPlacement(*p, 8, 2, 0).ok());
  EXPECT_EQ(p->physical(), 8);
}

TEST(Placement, HotExpertsGetTheReplicasAndWorkersEvenOut) {
  // Expert 0 has about half of all load, expert 1 more than a quarter.
  std::vector<double> load(8, 10.0);
  load[0] = 120;
  load[1] = 70;
  auto p = ComputePlacement(load, 2, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(CheckPlacement(*p, 8, 2, 2).ok());
  std::vector<int> copies(8, 0);
  for (const auto& w : p->workers) {
    for (int32_t e : w) ++copies[e];
  }
  EXPECT_EQ(copies[0], 2);
  EXPECT_EQ(copies[1], 2);
  // Two replicas of one expert are never on the same worker.
  for (const auto& w : p->workers) {
    EXPECT_EQ(std::adjacent_find(w.begin(), w.end()), w.end());
  }
  const auto loads = WorkerLoads(*p, load);
  EXPECT_DOUBLE_EQ(loads[0], loads[1]);  // 125 of 250 on each
  // Without replicas one worker takes 120 + 3 * 10.
  auto flat = ComputePlacement(load, 2, 0);
  ASSERT_TRUE(flat.ok());
  const auto flat_loads = WorkerLoads(*flat, load);
  EXPECT_GT(*std::max_element(flat_loads.begin(), flat_loads.end()),
            *std::max_element(loads.begin(), loads.end()));
}

TEST(Placement, IsDeterministicAndSpreadsReplicasWithoutLoad) {
  std::vector<double> zero(6, 0.0);
  auto a = ComputePlacement(zero, 3, 3);
  auto b = ComputePlacement(zero, 3, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  ASSERT_TRUE(CheckPlacement(*a, 6, 3, 3).ok());
  std::vector<int> copies(6, 0);
  for (const auto& w : a->workers) {
    for (int32_t e : w) ++copies[e];
  }
  // Even load: three different experts get the three replicas.
  EXPECT_EQ(std::count(copies.begin(), copies.end(), 2), 3);
}

TEST(Placement, UnevenExpertCountGivesWorkersTheSplitOfPhysicalSlots) {
  std::vector<double> load = {9, 1, 1, 1, 1, 1, 1};  // E = 7
  auto p = ComputePlacement(load, 3, 3);             // 10 slots: 3, 3, 4
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(CheckPlacement(*p, 7, 3, 3).ok());
  EXPECT_EQ(p->workers[0].size(), 3u);
  EXPECT_EQ(p->workers[2].size(), 4u);
}

TEST(Placement, BadArgumentsAreRefused) {
  std::vector<double> load(8, 1.0);
  EXPECT_EQ(ComputePlacement(load, 2, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputePlacement(load, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputePlacement(std::vector<double>{1, -1}, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputePlacement(std::vector<double>(2, 1.0), 4, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Placement, CheckNamesWhatIsWrong) {
  LayerPlacement p;
  p.workers = {{0, 1, 0}, {2, 3, 2}};
  EXPECT_TRUE(CheckPlacement(p, 4, 2, 2).ok());
  EXPECT_FALSE(CheckPlacement(p, 4, 3, 2).ok());  // 2 workers, not 3
  p.workers = {{0, 1}, {2, 3, 2, 1}};
  auto s = CheckPlacement(p, 4, 2, 2, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 5"), std::string::npos) << s;
  EXPECT_NE(s.message().find("worker 0"), std::string::npos) << s;
  p.workers = {{0, 1, 0}, {1, 7, 1}};
  s = CheckPlacement(p, 4, 2, 2);
  EXPECT_NE(s.message().find("expert 7"), std::string::npos) << s;
  p.workers = {{0, 1, 0}, {1, 2, 1}};
  s = CheckPlacement(p, 4, 2, 2);
  EXPECT_NE(s.message().find("expert 3 is in no slot"), std::string::npos) << s;
}

TEST(Placement, JsonRoundTrips) {
  ExpertPlacement p;
  p.redundant = 2;
  p.layers[0].workers = {{0, 1, 0}, {2, 3, 1}};
  p.layers[3].workers = {{3, 0, 1}, {2, 3, 0}};
  auto back = PlacementFromJson(PlacementToJson(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
  EXPECT_FALSE(PlacementFromJson("[1]").ok());
  EXPECT_FALSE(PlacementFromJson(R"({"layers":{"x":[[0]]}})").ok());
  EXPECT_FALSE(PlacementFromJson(R"({"layers":{"0":[[0, "a"]]}})").ok());
  EXPECT_FALSE(PlacementFromJson(R"({"layers":{"0":[0]}})").ok());
}

TEST(Placement, ReplicaMapListsEachExpertsSlotsInWorkerOrder) {
  LayerPlacement p;
  p.workers = {{0, 1, 2}, {0, 2, 3}};
  const ReplicaMap m = MakeReplicaMap(p, 4);
  EXPECT_EQ(m.physical, 6);
  EXPECT_EQ(m.replicas(0), 2);
  EXPECT_EQ(m.slot[m.offsets[0]], 0);
  EXPECT_EQ(m.slot[m.offsets[0] + 1], 3);
  EXPECT_EQ(m.replicas(3), 1);
  EXPECT_EQ(m.slot[m.offsets[3]], 5);
  EXPECT_EQ(m.worker_of[4], 1);
}

// Kimi K3's 896 experts (not a power of two, nor a multiple of 3) over 3
// workers with 6 redundant slots: the placement passes its checks and
// survives JSON, the hottest experts get the replicas, no worker holds two
// copies of one expert, the workers' loads even out better than with no
// replicas, and the router's replica choice sends each dispatched slot to a
// slot of its own expert.
TEST(Placement, KimiK3ExpertCountWithRedundantExperts) {
  constexpr int64_t E = 896, R = 6;
  constexpr int P = 3;
  std::vector<double> load(E);
  for (int64_t e = 0; e < E; ++e) load[e] = 10.0 + (e * 37) % 11;
  const int32_t hot[] = {895, 0, 447, 600, 13, 777};
  for (int i = 0; i < 6; ++i) load[hot[i]] = 2000.0 - 100.0 * i;
  auto p = ComputePlacement(load, P, R);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(CheckPlacement(*p, E, P, R, 5).ok())
      << CheckPlacement(*p, E, P, R, 5);
  EXPECT_EQ(p->physical(), E + R);
  std::vector<int> copies(E, 0);
  for (int q = 0; q < P; ++q) {
    const auto& w = p->workers[q];
    EXPECT_EQ(static_cast<int64_t>(w.size()), WorkerSlots(q, P, E + R));
    EXPECT_EQ(std::adjacent_find(w.begin(), w.end()), w.end());
    for (int32_t e : w) ++copies[e];
  }
  for (int32_t e : hot) EXPECT_EQ(copies[e], 2) << "expert " << e;
  EXPECT_EQ(std::count(copies.begin(), copies.end(), 1), E - R);
  auto flat = ComputePlacement(load, P, 0);
  ASSERT_TRUE(flat.ok()) << flat.status();
  const auto loads = WorkerLoads(*p, load),
             flat_loads = WorkerLoads(*flat, load);
  EXPECT_LE(*std::max_element(loads.begin(), loads.end()),
            *std::max_element(flat_loads.begin(), flat_loads.end()));

  ExpertPlacement all;
  all.redundant = R;
  all.layers[5] = *p;
  auto back = PlacementFromJson(PlacementToJson(all));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, all);

  // Every token picks hot expert 895 and 15 others.
  const ReplicaMap m = MakeReplicaMap(*p, E);
  EXPECT_EQ(m.physical, E + R);
  const int64_t n = 31, k = 16;
  Routing r;
  r.Reset(n, k, E);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      r.expert[t * k + j] =
          static_cast<int32_t>(j == 0 ? 895 : (t * 53 + j * 59) % (E - 1));
      r.weight[t * k + j] = 1.0f;
      r.dispatched[t * k + j] = 1;
    }
  }
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  PlanDispatch(r, n, P, E, &ids, &counts, &m);
  ASSERT_EQ(ids.size(), static_cast<size_t>(n * k));
  ASSERT_EQ(counts.size(), static_cast<size_t>(P * (E + R)));
  const std::vector<int32_t> slot_expert = p->Flat();
  std::vector<int> hot_workers(P, 0);
  for (int64_t i = 0; i < n * k; ++i) {
    ASSERT_GE(ids[i], 0);
    ASSERT_LT(ids[i], E + R);
    EXPECT_EQ(slot_expert[ids[i]], r.expert[i]) << "slot " << i;
    if (r.expert[i] == 895) ++hot_workers[m.worker_of[ids[i]]];
  }
  // Both replicas of the hot expert take a share of its rows.
  EXPECT_EQ(std::count(hot_workers.begin(), hot_workers.end(), 0), P - 2);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  EXPECT_EQ(total, n * k);
}

Routing AllTo(int64_t n, int64_t k, int64_t E, int32_t expert) {
  Routing r;
  r.Reset(n, k, E);
  for (int64_t i = 0; i < n * k; ++i) {
    r.expert[i] = static_cast<int32_t>((i % k == 0) ? expert : (i % k) + 2);
    r.weight[i] = 1.0f;
    r.dispatched[i] = 1;
  }
  return r;
}

TEST(ReplicaChoice, SpreadsAHotExpertToEvenTheWorkers) {
  // E = 4 over 2 workers with 2 redundant slots: expert 0 on both.
  LayerPlacement p;
  p.workers = {{0, 1, 2}, {0, 3, 1}};
  const ReplicaMap m = MakeReplicaMap(p, 4);
  // Every token: expert 0 and expert 3 (worker 1 only).
  const Routing r = AllTo(10, 2, 4, 0);
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  PlanDispatch(r, 10, 2, 4, &ids, &counts, &m);
  ASSERT_EQ(counts.size(), 2u * 6);
  const std::vector<int64_t> rows = RowsPerRank(counts, 2, 6);
  // 10 rows of expert 3 on worker 1 first, so expert 0 all goes to worker 0.
  EXPECT_EQ(rows[0], 10);
  EXPECT_EQ(rows[1], 10);
  for (int64_t t = 0; t < 10; ++t) {
    EXPECT_EQ(ids[t * 2], 0);      // worker 0's replica of expert 0
    EXPECT_EQ(ids[t * 2 + 1], 4);  // worker 1's slot of expert 3
  }
  // Same routing, same choice.
  std::vector<int32_t> ids2;
  std::vector<int64_t> counts2;
  PlanDispatch(r, 10, 2, 4, &ids2, &counts2, &m);
  EXPECT_EQ(ids, ids2);
  EXPECT_EQ(counts, counts2);
}

TEST(ReplicaChoice, TiesGoToTheLowerWorkerAndAlternate) {
  LayerPlacement p;
  p.workers = {{0, 1, 3}, {0, 2, 3}};
  const ReplicaMap m = MakeReplicaMap(p, 4);
  Routing r;
  r.Reset(4, 1, 4);
  for (int64_t t = 0; t < 4; ++t) {
    r.expert[t] = 0;
    r.weight[t] = 1.0f;
    r.dispatched[t] = t != 2;  // one slot dropped
  }
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  PlanDispatch(r, 4, 2, 4, &ids, &counts, &m);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 3, -1, 0}));
  // Tokens 0, 1 on rank 0 (source), 2, 3 on rank 1.
  EXPECT_EQ(counts[0 * 6 + 0], 1);
  EXPECT_EQ(counts[0 * 6 + 3], 1);
  EXPECT_EQ(counts[1 * 6 + 0], 1);
  EXPECT_EQ(RowsPerRank(counts, 2, 6), (std::vector<int64_t>{2, 1}));
}

}  // namespace
}  // namespace moe
