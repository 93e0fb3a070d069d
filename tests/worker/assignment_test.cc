#include "worker/assignment.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

moe::v1::Assignment Contiguous() {
  moe::v1::Assignment a;
  a.set_generation(3);
  a.set_expert_begin(4);
  a.set_expert_end(8);
  a.set_max_batch_tokens(512);
  a.mutable_model()->set_synthetic_seed(7);
  return a;
}

void AddSlots(moe::v1::Assignment* a, int layer, std::vector<int> experts) {
  auto* l = a->add_layer_slots();
  l->set_layer(layer);
  for (int e : experts) l->add_experts(e);
}

TEST(AssignmentTest, ShardIsTheRangeOrTheSlotsOfEachLayer) {
  moe::v1::Assignment a = Contiguous();
  ExpertShard shard = ShardOf(a);
  EXPECT_EQ(shard.begin, 4);
  EXPECT_EQ(shard.end, 8);
  EXPECT_TRUE(shard.layer_slots.empty());
  EXPECT_EQ(ShardText(shard), "[4, 8)");
  a.set_redundant_experts(2);
  AddSlots(&a, 0, {1, 5, 7});
  AddSlots(&a, 3, {2, 2});
  shard = ShardOf(a);
  EXPECT_EQ(shard.redundant, 2);
  EXPECT_EQ(shard.layer_slots.at(0), (std::vector<int32_t>{1, 5, 7}));
  EXPECT_EQ(shard.layer_slots.at(3), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(ShardText(shard), "slots 0:[1,5,7] 3:[2,2]");

  moe::v1::PlacementUpdate u;
  u.set_redundant_experts(1);
  auto* l = u.add_layer_slots();
  l->set_layer(1);
  l->add_experts(9);
  EXPECT_EQ(ShardText(ShardOf(u)), "slots 1:[9]");
  EXPECT_EQ(ShardOf(u).redundant, 1);
}

TEST(AssignmentTest, MaxTokensIsTheRoutersCappedByTheWorkers) {
  moe::v1::Assignment a = Contiguous();
  EXPECT_EQ(MaxTokensFor(a, 0), 512);
  EXPECT_EQ(MaxTokensFor(a, 100), 100);
  EXPECT_EQ(MaxTokensFor(a, 1000), 512);
  a.set_max_batch_tokens(0);
  EXPECT_EQ(MaxTokensFor(a, 100), 100);
  EXPECT_EQ(MaxTokensFor(a, 0), 0);
}

TEST(AssignmentTest, LoadKeyChangesWithWhatIsLoadedOnly) {
  const moe::v1::Assignment a = Contiguous();
  const std::string key = LoadKeyOf(a, 512);
  moe::v1::Assignment same = a;
  same.set_generation(9);  // a new group, the same weights
  same.set_rank(1);
  EXPECT_EQ(LoadKeyOf(same, 512), key);
  EXPECT_NE(LoadKeyOf(a, 256), key);
  auto changed = [&](auto edit) {
    moe::v1::Assignment b = a;
    edit(b);
    return LoadKeyOf(b, 512) != key;
  };
  EXPECT_TRUE(changed([](auto& b) { b.set_expert_end(9); }));
  EXPECT_TRUE(changed([](auto& b) { b.set_expert_begin(3); }));
  EXPECT_TRUE(changed([](auto& b) { b.set_redundant_experts(1); }));
  EXPECT_TRUE(changed([](auto& b) { b.set_placement_epoch(2); }));
  EXPECT_TRUE(
      changed([](auto& b) { b.mutable_model()->set_synthetic_seed(8); }));
  EXPECT_TRUE(changed([](auto& b) { AddSlots(&b, 0, {1}); }));
  moe::v1::Assignment s1 = a, s2 = a;
  AddSlots(&s1, 0, {1, 2});
  AddSlots(&s2, 0, {2, 1});
  EXPECT_NE(LoadKeyOf(s1, 512), LoadKeyOf(s2, 512));
}

}  // namespace
}  // namespace moe
