// Mistral's own layout (params.json + consolidated*.safetensors, no
// config.json) as checkpoints: Mixtral's golden case and a Mistral-Large-3
// case load and match in-process, in one shard and in indexed or unindexed
// shards; config.json wins where both layouts are present; missing and
// mis-shaped tensors are named.
#include <filesystem>

#include "core/hf_checkpoint.h"
#include "engine/layer_weights.h"
#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

namespace fs = std::filesystem;
using testing::GoldenCase;
using testing::HfWriteOptions;

// Mistral-Large-3's gate: softmax, groups by their best expert, renorm,
// routed scale, one shared expert of the routed width.
GoldenCase Large3Case() {
  MoeLayerConfig k;
  k.hidden = 32;
  k.inter = 16;
  k.num_experts = 8;
  k.top_k = 2;
  k.score_func = ScoreFunc::kSoftmax;
  k.route_norm = true;
  k.route_scale = 2.5f;
  k.n_groups = 4;
  k.topk_groups = 2;
  k.group_score = GroupScore::kMax;
  k.shared_inter = 16;
  return testing::RandomCase(k, 12, 5, "mistral_large_3_ref");
}

absl::StatusOr<GoldenCase> MixtralCase() {
  return testing::LoadGoldenCase(testing::GoldenDir() +
                                 "/mixtral_like.safetensors");
}

HfWriteOptions Mistral(HfFamily family, int shards, bool index) {
  HfWriteOptions o;
  o.family = family;
  o.layer = 1;
  o.shards = shards;
  o.write_index = index;
  o.layout = HfExpertLayout::kConsolidated;
  return o;
}

// The case's layer through the checkpoint in `dir`, in this process.
void ExpectMatches(const std::string& dir, const GoldenCase& c) {
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->info().layer, c.config);
  auto moe = LocalMoe::Create(**ckpt, "cpu", WeightDType::kF32, 2, c.tokens, 1);
  ASSERT_TRUE(moe.ok()) << moe.status();
  std::vector<float> y(c.x.size());
  Routing routing;
  ASSERT_TRUE(
      (*moe)->Forward(1, c.x.data(), {.n = c.tokens}, y.data(), &routing).ok());
  EXPECT_TRUE(testing::AllClose(y, c.y, testing::kF32Tol));
}

TEST(MistralCheckpoint, MixtralLoadsInEveryShardForm) {
  auto c = MixtralCase();
  ASSERT_TRUE(c.ok()) << c.status();
  struct Form {
    int shards;
    bool index;
    const char* file;  // one file the writer made
  };
  for (const Form& f :
       {Form{1, false, "consolidated.safetensors"},
        Form{3, true, "consolidated.safetensors.index.json"},
        Form{3, false, "consolidated-00002-of-00003.safetensors"}}) {
    SCOPED_TRACE(f.file);
    const std::string dir = testing::MakeTempDir("mistral_mixtral_");
    ASSERT_TRUE(testing::WriteHfCheckpoint(
                    *c, Mistral(HfFamily::kMixtral, f.shards, f.index), dir)
                    .ok());
    EXPECT_TRUE(fs::exists(fs::path(dir) / f.file));
    EXPECT_TRUE(fs::exists(fs::path(dir) / "params.json"));
    EXPECT_FALSE(fs::exists(fs::path(dir) / "config.json"));
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ((*ckpt)->family(), HfFamily::kMixtral);
    EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{0, 1, 2}));
    ExpectMatches(dir, *c);
    fs::remove_all(dir);
  }
}

TEST(MistralCheckpoint, Large3LoadsAsDeepseekV3) {
  const GoldenCase c = Large3Case();
  const std::string dir = testing::MakeTempDir("mistral_large3_");
  ASSERT_TRUE(testing::WriteHfCheckpoint(
                  c, Mistral(HfFamily::kDeepseekV3, 2, true), dir)
                  .ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->family(), HfFamily::kDeepseekV3);
  // first_k_dense_replace 1: layer 0 is the dense FFN.
  EXPECT_EQ((*ckpt)->info().moe_layers, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ((*ckpt)->Get(1, WeightRole::kExpertBias, -1).status().code(),
            absl::StatusCode::kNotFound);
  ExpectMatches(dir, c);
  fs::remove_all(dir);
}

// A case Mistral's layout cannot say is not written as a near one:
// deepseek_v3_like routes by sigmoid with a correction bias.
TEST(MistralCheckpoint, WriterRefusesACaseTheLayoutCannotSay) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/deepseek_v3_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("mistral_refused_");
  EXPECT_FALSE(testing::WriteHfCheckpoint(
                   *c, Mistral(HfFamily::kDeepseekV3, 1, false), dir)
                   .ok());
  fs::remove_all(dir);
}

TEST(MistralCheckpoint, ConfigJsonWinsAndOtherShardsAreNotRead) {
  auto c = MixtralCase();
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("mistral_both_");
  // Mistral's layout without an index, then the transformers copy beside
  // it, as Mistral's Hugging Face repositories hold both.
  ASSERT_TRUE(
      testing::WriteHfCheckpoint(*c, Mistral(HfFamily::kMixtral, 2, false), dir)
          .ok());
  HfWriteOptions hf;
  hf.family = HfFamily::kMixtral;
  hf.layer = 1;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, hf, dir).ok());
  {
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto w = (*ckpt)->Get(1, WeightRole::kW1, 0);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_NE(w->name.find("model.layers.1.block_sparse_moe.experts.0.w1"),
              std::string::npos)
        << w->name;
  }
  ExpectMatches(dir, *c);
  // Without config.json the consolidated shards alone are read (the
  // transformers shards would give every tensor twice under other names).
  fs::remove(fs::path(dir) / "config.json");
  {
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto w = (*ckpt)->Get(1, WeightRole::kW1, 0);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_NE(w->name.find("consolidated-0000"), std::string::npos) << w->name;
    EXPECT_NE(w->name.find("layers.1.feed_forward.experts.0.w1.weight"),
              std::string::npos)
        << w->name;
    EXPECT_EQ((*ckpt)->Get(1, WeightRole::kGate, -1).ok(), true);
  }
  ExpectMatches(dir, *c);
  // Neither config file: both are named.
  fs::remove(fs::path(dir) / "params.json");
  auto none = HfCheckpoint::Open(dir);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("config.json"), std::string::npos);
  EXPECT_NE(none.status().message().find("params.json"), std::string::npos);
  fs::remove_all(dir);
}

TEST(MistralCheckpoint, MissingAndMisShapedTensorsAreNamed) {
  const GoldenCase c = Large3Case();
  struct Bad {
    const char* name;
    std::vector<int64_t> shape;  // empty: dropped
  };
  for (const Bad& b : {Bad{"layers.1.experts.3.w3.weight", {}},
                       Bad{"layers.1.shared_experts.w2.weight", {}},
                       Bad{"layers.1.gate.weight", {8, 31}},
                       Bad{"layers.1.experts.0.w2.weight", {16, 32}}}) {
    SCOPED_TRACE(b.name);
    const std::string dir = testing::MakeTempDir("mistral_bad_");
    ASSERT_TRUE(testing::WriteHfCheckpoint(
                    c, Mistral(HfFamily::kDeepseekV3, 2, true), dir)
                    .ok());
    ASSERT_TRUE(testing::ReplaceHfTensor(dir, b.name, b.shape).ok());
    auto ckpt = HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    auto w = LoadLayerWeights(**ckpt, 1, {});
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find(b.name), std::string::npos)
        << w.status();
    if (b.shape.empty()) {
      EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
    }
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace moe
