// The one check of a backend's layer shard (engine/layer_shard.h), for
// every backend: the gate, the shared expert where the layer has one, and
// every routed expert in its own slot for the single-process layer.
#include "engine/layer_shard.h"

#include <vector>

#include "engine/cpu_backend.h"
#include "engine/layer_weights.h"
#include "gtest/gtest.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

LayerShard Whole() {
  LayerShard s;
  s.num_experts = 6;
  s.has_shared_expert = true;
  s.gate_loaded = s.shared_loaded = true;
  s.expert_begin = 0;
  s.expert_end = 6;
  s.local_experts = 6;
  return s;
}

absl::Status CheckAll(const LayerShard& s) {
  return CheckLayerShard(3, s, true, true, true);
}

TEST(CheckLayerShard, AcceptsTheWholeLayer) {
  EXPECT_TRUE(CheckAll(Whole()).ok());
}

TEST(CheckLayerShard, NamesTheMissingGateOrSharedExpert) {
  LayerShard s = Whole();
  s.gate_loaded = false;
  absl::Status st = CheckAll(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("layer 3 was loaded without its gate"),
            std::string::npos)
      << st;
  EXPECT_TRUE(CheckLayerShard(3, s, false, true, true).ok());
  s = Whole();
  s.shared_loaded = false;
  st = CheckAll(s);
  EXPECT_NE(st.message().find("without its shared expert"), std::string::npos)
      << st;
  EXPECT_TRUE(CheckLayerShard(3, s, true, false, true).ok());
  s.has_shared_expert = false;  // nothing to load
  EXPECT_TRUE(CheckAll(s).ok());
}

// A range short of the layer, and (the check the CUDA backend lacked) a
// full range whose local slots are not one per expert, as a redundant
// placement's slot list can be.
TEST(CheckLayerShard, SingleProcessNeedsEveryExpertInItsSlot) {
  LayerShard s = Whole();
  s.expert_begin = 2;
  absl::Status st = CheckAll(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("needs all 6 experts"), std::string::npos) << st;
  s = Whole();
  s.expert_end = 5;
  EXPECT_FALSE(CheckAll(s).ok());
  s = Whole();
  s.local_experts = 8;
  st = CheckAll(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("in 8 local slots"), std::string::npos) << st;
  EXPECT_TRUE(CheckLayerShard(3, s, true, true, false).ok());
}

// ShardOf reads every field from the host's LayerWeights, counting the
// slots held (here a redundant placement's three slots over a range of two
// experts), not the range.
TEST(ShardOf, ReadsHostLayerWeights) {
  LayerWeights w;
  w.config.num_experts = 6;
  w.config.shared_inter = 4;
  w.has_gate = true;
  w.has_shared = false;
  w.expert_begin = 2;
  w.expert_end = 4;
  w.expert_ids = {2, 3, 3};
  w.experts.resize(3);
  const LayerShard s = ShardOf(w);
  EXPECT_EQ(s.num_experts, 6);
  EXPECT_TRUE(s.has_shared_expert);
  EXPECT_TRUE(s.gate_loaded);
  EXPECT_FALSE(s.shared_loaded);
  EXPECT_EQ(s.expert_begin, 2);
  EXPECT_EQ(s.expert_end, 4);
  EXPECT_EQ(s.local_experts, 3);
  w.config.shared_inter = 0;
  w.has_gate = false;
  w.has_shared = true;
  EXPECT_FALSE(ShardOf(w).has_shared_expert);
  EXPECT_FALSE(ShardOf(w).gate_loaded);
  EXPECT_TRUE(ShardOf(w).shared_loaded);
}

// The same template serves a device backend's weights, which share only
// these field names (CudaLayerWeights keeps its experts on the device).
struct DeviceLikeWeights {
  MoeLayerConfig config;
  bool has_gate = false, has_shared = false;
  int64_t expert_begin = 0, expert_end = 0;
  std::vector<int> experts;
};

TEST(ShardOf, ReadsAnyBackendsWeights) {
  DeviceLikeWeights w;
  w.config.num_experts = 8;
  w.has_gate = true;
  w.expert_begin = 0;
  w.expert_end = 8;
  w.experts.resize(8);
  const LayerShard s = ShardOf(w);
  EXPECT_EQ(s.num_experts, 8);
  EXPECT_FALSE(s.has_shared_expert);
  EXPECT_EQ(s.local_experts, 8);
  EXPECT_TRUE(CheckLayerShard(1, s, true, true, true).ok());
  w.experts.resize(7);
  EXPECT_FALSE(CheckLayerShard(1, ShardOf(w), true, true, true).ok());
}

// Through a backend: its shard as loaded, and NOT_FOUND for a layer it
// does not hold.
TEST(CheckLayerShard, CpuBackendReportsWhatItLoaded) {
  MoeLayerConfig c;
  c.hidden = 8;
  c.inter = 4;
  c.num_experts = 4;
  c.top_k = 2;
  auto g = testing::RandomCase(c, 3, 1);
  auto source = testing::MakeGoldenSource(g);
  CpuBackend backend(1);
  LoadOptions opts;
  opts.expert_begin = 1;
  opts.expert_end = 3;
  ASSERT_TRUE(backend.Load(*source, opts, 3).ok());
  absl::StatusOr<LayerShard> s = backend.Shard(0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_experts, 4);
  EXPECT_EQ(s->expert_begin, 1);
  EXPECT_EQ(s->expert_end, 3);
  EXPECT_EQ(s->local_experts, 2);
  EXPECT_TRUE(s->gate_loaded);
  EXPECT_TRUE(backend.HasLayer(0));
  EXPECT_FALSE(backend.HasLayer(1));
  EXPECT_EQ(backend.Shard(1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(backend.CheckLayer(0, true, true, true).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(backend.CheckLayer(0, true, true, false).ok());
}

}  // namespace
}  // namespace moe
