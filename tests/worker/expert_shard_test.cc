// A worker's shard: refused before loading when its slot lists cannot cover
// the model's MoE layers, and loaded as routed experts only.
#include "worker/expert_shard.h"

#include <string>

#include "gtest/gtest.h"

namespace moe {
namespace {

ModelInfo TwoMoeLayers() {
  ModelInfo info;
  info.num_layers = 4;
  info.moe_layers = {1, 3};
  return info;
}

TEST(ExpertShardTest, RangeWithoutRedundantExpertsIsAccepted) {
  ExpertShard shard;
  shard.begin = 0;
  shard.end = 4;
  EXPECT_TRUE(CheckShard(TwoMoeLayers(), shard).ok());
}

TEST(ExpertShardTest, RedundantExpertsNeedSlotListsForEveryMoeLayer) {
  ExpertShard shard;
  shard.redundant = 2;
  absl::Status s = CheckShard(TwoMoeLayers(), shard);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("redundant_experts 2 needs layer_slots"),
            std::string::npos)
      << s;

  shard.layer_slots[1] = {0, 1, 2};
  s = CheckShard(TwoMoeLayers(), shard);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no entry for MoE layer 3"), std::string::npos)
      << s;

  shard.layer_slots[3] = {3, 0, 1};
  EXPECT_TRUE(CheckShard(TwoMoeLayers(), shard).ok());
}

TEST(ExpertShardTest, NegativeRedundantIsRefused) {
  ExpertShard shard;
  shard.redundant = -1;
  EXPECT_EQ(CheckShard(TwoMoeLayers(), shard).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExpertShardTest, LoadsRoutedExpertsOnly) {
  ExpertShard shard;
  shard.begin = 2;
  shard.end = 5;
  shard.layer_slots[1] = {4, 0};
  const LoadOptions opts = WorkerLoadOptions(shard);
  EXPECT_FALSE(opts.load_gate);    // the router routes
  EXPECT_FALSE(opts.load_shared);  // and runs the shared expert
  EXPECT_EQ(opts.expert_begin, 2);
  EXPECT_EQ(opts.expert_end, 5);
  EXPECT_EQ(opts.layer_experts, shard.layer_slots);
}

}  // namespace
}  // namespace moe
