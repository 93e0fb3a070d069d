// The expert statistics: per-worker rows and their per-step imbalance, the
// placement in the snapshot, and reading saved stats back as expert load.
#include "server/step/expert_stats.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(ExpertStats, WorkerRowsAndTheirImbalancePerStep) {
  ExpertStatsBook book(4);
  const std::vector<int64_t> counts = {3, 1, 0, 4};
  book.Record(0, counts, 4, 0, std::vector<int64_t>{6, 2});  // 1.5
  book.Record(0, counts, 4, 0, std::vector<int64_t>{4, 4});  // 1.0
  EXPECT_DOUBLE_EQ(book.WorkerImbalance(0), 1.25);
  const LayerStats s = book.Snapshot(0, /*reset=*/true);
  EXPECT_EQ(s.steps, 2);
  EXPECT_EQ(s.tokens, 8);
  EXPECT_EQ(s.tokens_per_expert, (std::vector<int64_t>{6, 2, 0, 8}));
  EXPECT_DOUBLE_EQ(s.balance.max_over_mean, 2.0);
  EXPECT_EQ(s.rows_per_worker, (std::vector<int64_t>{10, 6}));
  EXPECT_DOUBLE_EQ(s.worker_max_over_mean, 1.25);
  EXPECT_TRUE(s.placement.empty());
  EXPECT_EQ(book.Snapshot(0, false).steps, 0);  // reset
  EXPECT_EQ(book.WorkerImbalance(0), 0);        // reset
  EXPECT_EQ(book.TotalSteps(), 2);              // what rebalancing counts: kept
}

TEST(ExpertStats, SnapshotCarriesThePlacement) {
  ExpertStatsBook book(4);
  auto p = std::make_shared<ExpertPlacement>();
  p->redundant = 2;
  p->layers[0].workers = {{0, 1, 3}, {2, 3, 0}};
  book.SetPlacement(p);
  const LayerStats s = book.Snapshot(0, false);
  ASSERT_EQ(s.placement.size(), 2u);
  EXPECT_EQ(s.placement[1][0], 2);
  EXPECT_EQ(s.replicas_per_expert, (std::vector<int32_t>{2, 1, 1, 2}));
}

TEST(ExpertStats, LoadFromSavedStats) {
  // What `moe-cli stats --save` writes: proto JSON, int64 as strings, one
  // entry per layer (layer 0's "layer" may be left out).
  auto load = ExpertLoadFromJson(
      R"([{"tokens_per_expert": ["5", "0", "7"]},
          {"layer": 2, "tokensPerExpert": [1, 2, 3]}])");
  ASSERT_TRUE(load.ok()) << load.status();
  ASSERT_EQ(load->size(), 2u);
  EXPECT_EQ(load->at(0), (std::vector<double>{5, 0, 7}));
  EXPECT_EQ(load->at(2), (std::vector<double>{1, 2, 3}));
  auto one = ExpertLoadFromJson(R"({"layer": 1, "tokens_per_expert": [4]})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->at(1), (std::vector<double>{4}));
  for (const char* bad : {"[1]", "{}", R"({"tokens_per_expert": ["x"]})",
                          R"({"tokens_per_expert": [-1]})", "not json"}) {
    auto s = ExpertLoadFromJson(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("expert load"), std::string::npos)
        << s.status();
  }
}

}  // namespace
}  // namespace moe
