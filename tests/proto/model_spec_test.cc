#include "proto/model_spec.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

TEST(ModelSpec, CheckpointRoundTrips) {
  ModelLocation loc;
  loc.checkpoint_dir = "/models/olmoe";
  const moe::v1::ModelSpec spec = ModelSpecFor(loc, "bf16");
  EXPECT_EQ(spec.weight_dtype(), "bf16");
  auto back = ModelLocationOf(spec);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->checkpoint_dir, "/models/olmoe");
}

TEST(ModelSpec, SyntheticRoundTrips) {
  ModelLocation loc;
  loc.synthetic.layer.hidden = 96;
  loc.synthetic.layer.inter = 40;
  loc.synthetic.layer.num_experts = 12;
  loc.synthetic.layer.top_k = 3;
  loc.synthetic.layer.score_func = ScoreFunc::kSigmoid;
  loc.synthetic.layer.n_groups = 4;
  loc.synthetic.layer.topk_groups = 2;
  loc.synthetic.num_layers = 3;
  loc.synthetic.seed = 77;
  auto back = ModelLocationOf(ModelSpecFor(loc, "f32"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->is_checkpoint());
  EXPECT_EQ(back->synthetic.num_layers, 3);
  EXPECT_EQ(back->synthetic.seed, 77u);
  const MoeLayerConfig& c = back->synthetic.layer;
  EXPECT_EQ(c.hidden, 96);
  EXPECT_EQ(c.inter, 40);
  EXPECT_EQ(c.num_experts, 12);
  EXPECT_EQ(c.top_k, 3);
  EXPECT_EQ(c.score_func, ScoreFunc::kSigmoid);
  EXPECT_EQ(c.n_groups, 4);
  EXPECT_EQ(c.topk_groups, 2);
}

TEST(ModelSpec, MalformedSyntheticConfigIsRefused) {
  moe::v1::ModelSpec spec;
  spec.set_synthetic_config_json("{not json");
  auto loc = ModelLocationOf(spec);
  ASSERT_FALSE(loc.ok());
  EXPECT_EQ(loc.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
