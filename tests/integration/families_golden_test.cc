// Every Hugging Face family, as a real checkpoint of that family holding its
// golden case (sharded, with dense, MTP and unrelated tensors around it),
// served by a router with 2 CPU worker processes: the model info names the
// family and its MoE layers, routing ids are exact and y is within the fp32
// golden tolerance.
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/hf_checkpoint.h"
#include "gtest/gtest.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// The golden case each family serves: its own where the golden set has one.
const std::map<HfFamily, std::string>& FamilyCases() {
  static const auto* cases = new std::map<HfFamily, std::string>{
      {HfFamily::kMixtral, "mixtral_like"},
      {HfFamily::kQwen2Moe, "qwen2_moe_like"},
      {HfFamily::kQwen3Moe, "qwen3_moe_like"},
      {HfFamily::kOlmoe, "single_token"},
      {HfFamily::kDeepseekV2, "deepseek_v2_like"},
      {HfFamily::kDeepseekV3, "deepseek_v3_like"},
      {HfFamily::kGlm4Moe, "glm45_like"},
      {HfFamily::kKimiK2, "deepseek_v3_like"},
      {HfFamily::kQwen3Next, "qwen3_next_like"},
      {HfFamily::kMinimaxM2, "minimax_m2_like"},
      {HfFamily::kLlama4, "llama4_like"},
      {HfFamily::kLlama4Text, "llama4_like"},
      {HfFamily::kErnie45Moe, "ernie45_like"},
      {HfFamily::kGptOss, "gptoss_like"},
      {HfFamily::kDeepseekV4, "deepseek_v4_like"},
  };
  return *cases;
}

std::vector<HfFamily> Families() { return AllHfFamilies(); }

class FamilyGoldenTest : public ::testing::TestWithParam<HfFamily> {};

TEST_P(FamilyGoldenTest, RouterAndTwoWorkersMatchTheGoldenCase) {
  const HfFamily family = GetParam();
  auto it = FamilyCases().find(family);
  ASSERT_NE(it, FamilyCases().end())
      << "no golden case chosen for " << HfFamilyName(family);
  const std::string path =
      testing::GoldenDir() + "/" + it->second + ".safetensors";
  auto c = testing::LoadGoldenCase(path);
  ASSERT_TRUE(c.ok()) << c.status();
  const auto families = testing::FamiliesFor(c->config);
  ASSERT_NE(std::find(families.begin(), families.end(), family), families.end())
      << HfFamilyName(family) << " cannot express " << c->name;
  const std::string dir =
      testing::MakeTempDir(std::string(HfFamilyName(family)) + "_");
  testing::HfWriteOptions o;
  o.family = family;
  o.layer = 1;
  o.shards = 3;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::vector<int64_t> moe_layers = (*ckpt)->info().moe_layers;

  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.workers = 2;
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->family(), HfFamilyName(family));
  EXPECT_EQ(std::vector<int64_t>(info->moe_layers().begin(),
                                 info->moe_layers().end()),
            moe_layers);
  EXPECT_EQ(info->experts(), c->config.num_experts);
  ForwardOptions fo;
  fo.routing = true;
  fo.token_ids = c->token_ids;
  auto r = cluster.client().Forward(static_cast<int32_t>(o.layer), c->x.data(),
                                    c->tokens, c->config.hidden, fo);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(testing::AllClose(r->y, c->y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, r->expert_ids,
                                        r->weights, c->tokens, c->config.top_k,
                                        r->slots));
  fs::remove_all(dir);
}

// A checkpoint the service does not know is refused when the router starts,
// with a message that names what it found and lists the supported families;
// it is never served as a near family.
TEST(FamilyRefusal, RouterRefusesAnUnknownCheckpointAtStart) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/mixtral_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("refused_");
  testing::HfWriteOptions o;
  o.family = HfFamily::kMixtral;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  struct Bad {
    std::string key, value, names;
  };
  const Bad cases[] = {
      {"model_type", R"("phimoe")", "'phimoe'"},
      {"architectures", R"(["MixtralForSequenceClassification"])",
       "MixtralForSequenceClassification"},
      {"quantization_config", R"({"quant_method":"awq","bits":4})", "'awq'"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.key);
    ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
    ASSERT_TRUE(testing::SetHfConfigKey(dir, b.key, b.value).ok());
    testing::CommandResult r =
        testing::RunCommand({testing::RouterBinary(), "--model=" + dir,
                             "--listen=127.0.0.1:0", "--num-workers=0"},
                            std::chrono::seconds(30));
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(b.names), std::string::npos) << r.output;
    if (b.key == "model_type") {
      EXPECT_NE(r.output.find(SupportedHfFamilies()), std::string::npos)
          << r.output;
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGoldenTest,
                         ::testing::ValuesIn(Families()), [](const auto& info) {
                           return std::string(HfFamilyName(info.param));
                         });

}  // namespace
}  // namespace moe
