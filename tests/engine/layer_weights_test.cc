// Loading a layer: expert subsets (a worker's shard), dtypes, bad ranges.
#include "engine/layer_weights.h"

#include "engine/expert_runner.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

MoeLayerConfig Config() {
  MoeLayerConfig c;
  c.hidden = 40;
  c.inter = 18;
  c.num_experts = 7;
  c.top_k = 2;
  c.shared_inter = 12;
  return c;
}

TEST(LayerWeights, SubsetHoldsOnlyItsExperts) {
  auto g = testing::RandomCase(Config(), 5, 1);
  auto src = testing::MakeGoldenSource(g);
  LoadOptions o;
  o.expert_begin = 2;
  o.expert_end = 5;
  o.load_gate = false;
  o.load_shared = false;
  auto w = LoadLayerWeights(*src, 0, o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->num_local_experts(), 3);
  EXPECT_FALSE((*w)->has_gate);
  EXPECT_FALSE((*w)->has_shared);
}

TEST(LayerWeights, SubsetExpertMatchesFullLoad) {
  // Expert 4 computed from a shard [3, 6) equals expert 4 of the full load.
  auto g = testing::RandomCase(Config(), 9, 2);
  auto src = testing::MakeGoldenSource(g);
  auto full = LoadLayerWeights(*src, 0, {});
  LoadOptions o;
  o.expert_begin = 3;
  o.expert_end = 6;
  auto part = LoadLayerWeights(*src, 0, o);
  ASSERT_TRUE(full.ok() && part.ok());
  const int64_t H = g.config.hidden, n = g.tokens;
  std::vector<const float*> in(n);
  std::vector<float> y_full(n * H), y_part(n * H);
  std::vector<float*> out_full(n), out_part(n);
  for (int64_t t = 0; t < n; ++t) {
    in[t] = g.x.data() + t * H;
    out_full[t] = y_full.data() + t * H;
    out_part[t] = y_part.data() + t * H;
  }
  // All rows to global expert 4.
  std::vector<int64_t> full_offsets(8, 0), part_offsets(4, 0);
  for (int e = 5; e < 8; ++e) full_offsets[e] = n;
  for (int e = 2; e < 4; ++e) part_offsets[e] = n;
  ExpertRunner r;
  ASSERT_TRUE(
      r.RunRouted(**full, full_offsets, in.data(), out_full.data(), 2).ok());
  ASSERT_TRUE(
      r.RunRouted(**part, part_offsets, in.data(), out_part.data(), 2).ok());
  EXPECT_EQ(y_full, y_part);
}

TEST(LayerWeights, BadRangeIsRejected) {
  auto g = testing::RandomCase(Config(), 1, 3);
  auto src = testing::MakeGoldenSource(g);
  LoadOptions o;
  o.expert_begin = 5;
  o.expert_end = 9;
  EXPECT_EQ(LoadLayerWeights(*src, 0, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadLayerWeights(*src, 3, {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(LayerWeights, Bf16PacksHalfTheBytes) {
  auto g = testing::RandomCase(Config(), 1, 4);
  auto src = testing::MakeGoldenSource(g);
  LoadOptions f32, bf16;
  bf16.dtype = WeightDType::kBF16;
  auto a = LoadLayerWeights(*src, 0, f32);
  auto b = LoadLayerWeights(*src, 0, bf16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->expert_bytes(), 2 * (*b)->expert_bytes());
  // The router's gate stays fp32 either way.
  EXPECT_EQ((*a)->gate.bytes(), (*b)->gate.bytes());
}

TEST(LayerWeights, Fp8PacksAQuarterOfF32AndItsScales) {
  MoeLayerConfig c = Config();
  c.hidden = 256;
  c.inter = 128;
  c.shared_inter = 0;
  auto g = testing::RandomCase(c, 1, 4);
  auto src = testing::MakeGoldenSource(g);
  LoadOptions f32, fp8;
  fp8.dtype = WeightDType::kFP8;
  auto a = LoadLayerWeights(*src, 0, f32);
  auto b = LoadLayerWeights(*src, 0, fp8);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*b)->dtype, WeightDType::kFP8);
  EXPECT_EQ((*b)->experts.front().w13.format, kernels::cpu::WeightFormat::kFP8);
  // 1 byte per weight plus one fp32 scale per 128 weights of a column.
  EXPECT_EQ((*b)->expert_bytes() * 4 * 128, (*a)->expert_bytes() * (128 + 4));
  EXPECT_EQ((*a)->gate.bytes(), (*b)->gate.bytes());  // the gate stays fp32
}

TEST(LayerWeights, AutoKeepsTheSourceStorage) {
  auto g = testing::RandomCase(Config(), 1, 4);
  auto src = testing::MakeGoldenSource(g);  // fp32 tensors
  LoadOptions o;
  o.dtype = WeightDType::kAuto;
  auto w = LoadLayerWeights(*src, 0, o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->dtype, WeightDType::kF32);
  EXPECT_EQ(*ResolveWeightDType(WeightDType::kBF16, *src), WeightDType::kBF16);
}

TEST(WeightDType, Parses) {
  EXPECT_EQ(*ParseWeightDType("f32"), WeightDType::kF32);
  EXPECT_EQ(*ParseWeightDType("bf16"), WeightDType::kBF16);
  EXPECT_EQ(*ParseWeightDType("fp8"), WeightDType::kFP8);
  EXPECT_EQ(*ParseWeightDType("auto"), WeightDType::kAuto);
  EXPECT_EQ(*ParseWeightDType("mxfp4"), WeightDType::kMXFP4);
  for (WeightDType d :
       {WeightDType::kF32, WeightDType::kBF16, WeightDType::kFP8,
        WeightDType::kAuto, WeightDType::kMXFP4}) {
    EXPECT_EQ(*ParseWeightDType(WeightDTypeName(d)), d);
  }
  auto bad = ParseWeightDType("int4");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, f32, bf16, fp8, mxfp4 or nvfp4"),
            std::string::npos);
}

}  // namespace
}  // namespace moe
