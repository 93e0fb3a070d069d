// Every Hugging Face family, as a real checkpoint of that family holding its
// golden case (sharded, with dense, MTP and unrelated tensors around it),
// served by a router with 2 CPU worker processes: the model info names the
// family and its MoE layers, routing ids are exact and y is within the fp32
// golden tolerance, also with the case's routing or gate logits sent back
// and its shared experts apart or skipped.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/hf_checkpoint.h"
#include "core/hf_config_family.h"
#include "core/moe_config.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testutil/caller_routing.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// FamilyCases' name for a case made by the reference MoE.
constexpr char kReferenceCase[] = "reference";

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
      {HfFamily::kGlmMoeDsa, "glm45_like"},
      // MiMo-V2-Flash's math is minimax_m2_like's: sigmoid, correction bias,
      // renorm (k > 1), no scale, no shared expert.
      {HfFamily::kMimoV2Flash, "minimax_m2_like"},
      {HfFamily::kKimiK2, "deepseek_v3_like"},
      {HfFamily::kQwen35Moe, "qwen3_next_like"},
      {HfFamily::kQwen3Next, "qwen3_next_like"},
      {HfFamily::kMinimaxM2, "minimax_m2_like"},
      {HfFamily::kLlama4, "llama4_like"},
      {HfFamily::kLlama4Text, "llama4_like"},
      {HfFamily::kErnie45Moe, "ernie45_like"},
      {HfFamily::kErnie45VlMoe, "ernie45_like"},
      {HfFamily::kGptOss, "gptoss_like"},
      {HfFamily::kDeepseekV4, "deepseek_v4_like"},
      {HfFamily::kNemotronH, "nemotron3_latent"},
      {HfFamily::kGemma4, "gemma4_like"},
      {HfFamily::kKimiK3, "kimi_k3_like"},
      {HfFamily::kFlexOlmo, "single_token"},
      {HfFamily::kMellum, "qwen3_moe_like"},
      {HfFamily::kMinimax, "mixtral_like"},
      {HfFamily::kQwen3VlMoe, "qwen3_moe_like"},
      // GraniteMoe's top-k of the logits, softmax over the k, is softmax
      // with the top k renormalised.
      {HfFamily::kGraniteMoe, "mixtral_like"},
      {HfFamily::kArctic, "mixtral_like"},
      // No golden case has an ungated shared expert beside softmax routing
      // and nothing else, nor softmax top-k without renorm and no shared
      // expert: these families serve a reference case (ReferenceConfigs).
      {HfFamily::kAria, kReferenceCase},
      {HfFamily::kJamba, kReferenceCase},
      {HfFamily::kGraniteMoeShared, kReferenceCase},
      {HfFamily::kGraniteMoeHybrid, kReferenceCase},
      {HfFamily::kDbrx, "mixtral_like"},
      {HfFamily::kHunyuanV1Moe, kReferenceCase},
      {HfFamily::kQwen3OmniMoe, "qwen3_moe_like"},
      // deepseek-moe-16b and Ling V1: softmax, renorm, no scale.
      {HfFamily::kDeepseek, "mixtral_like"},
      {HfFamily::kDeepseekV32, "deepseek_v3_like"},
      {HfFamily::kDots1, "deepseek_v3_like"},
      {HfFamily::kGlm4MoeLite, "glm45_like"},
      {HfFamily::kSolarOpen, "glm45_like"},
      {HfFamily::kKimiLinear, "deepseek_v3_like"},
      {HfFamily::kBailingMoe, "mixtral_like"},
      {HfFamily::kBailingMoeV2, "deepseek_v3_like"},
      {HfFamily::kGlm4vMoe, "glm45_like"},
      {HfFamily::kKimiVl, "deepseek_v3_like"},
      {HfFamily::kKimiK25, "deepseek_v3_like"},
      // AFMoE and LFM2-MoE: sigmoid, correction bias, renorm, no groups.
      {HfFamily::kAfmoe, "minimax_m2_like"},
      {HfFamily::kLfm2Moe, "minimax_m2_like"},
      {HfFamily::kExaoneMoe, "deepseek_v3_like"},
      {HfFamily::kPhimoe, "phimoe_like"},
      {HfFamily::kLongcatFlash, "longcat_like"},
      {HfFamily::kCohere2Moe, "cohere2_like"},
      {HfFamily::kJetMoe, "jetmoe_like"},
      {HfFamily::kGrok1, "grok1_like"},
      {HfFamily::kHyV3, "glm45_like"},
      {HfFamily::kBailingMoeV3, "step35_like"},
      {HfFamily::kInternS1, "qwen3_moe_like"},
      {HfFamily::kInternVl, "qwen3_moe_like"},
      {HfFamily::kInternVlChat, "qwen3_moe_like"},
      {HfFamily::kOvis26Moe, "qwen3_moe_like"},
      {HfFamily::kMinimaxVl01, "mixtral_like"},
      {HfFamily::kLfm2Vl, "minimax_m2_like"},
      {HfFamily::kMinicpm, "mixtral_like"},
      {HfFamily::kGemma4Text, "gemma4_like"},
      {HfFamily::kStep3p5, "step35_like"},
      // Step-3's gated share_expert is always there beside softmax routing
      // with nothing else: a reference case.
      {HfFamily::kStep3Text, kReferenceCase},
      {HfFamily::kStep3Vl, kReferenceCase},
      // GraniteMoeSWA: GraniteMoeShared's math, a reference case as theirs.
      {HfFamily::kGraniteMoeSwa, kReferenceCase},
  };
  return *cases;
}

// The layer configs of the families that serve a case made by the test's
// own reference MoE (tests/testutil/reference_moe.h) with their shared
// experts, since no golden case has their math.
MoeLayerConfig ReferenceConfig(HfFamily family) {
  MoeLayerConfig k;
  k.hidden = 64;
  k.inter = 32;
  k.num_experts = 8;
  k.top_k = 2;
  k.score_func = ScoreFunc::kSoftmax;
  k.route_norm = true;
  switch (family) {
    case HfFamily::kAria:
      k.shared_inter = 2 * k.inter;  // moe_num_shared_experts 2
      break;
    case HfFamily::kJamba:
      k.route_norm = false;
      break;
    case HfFamily::kHunyuanV1Moe:
      k.shared_inter = k.inter;  // one shared MLP of the routed width
      break;
    default:
      k.shared_inter = 48;  // shared_intermediate_size
      break;
  }
  return k;
}

absl::StatusOr<testing::GoldenCase> CaseFor(HfFamily family,
                                            const std::string& name) {
  if (name == kReferenceCase) {
    return testing::RandomCase(ReferenceConfig(family), 24, 11,
                               absl::StrCat(HfFamilyName(family), "_ref"));
  }
  return testing::LoadGoldenCase(testing::GoldenDir() + "/" + name +
                                 ".safetensors");
}

std::vector<HfFamily> Families() { return AllHfFamilies(); }

void ExpectServedCase(HfFamily family, HfExpertLayout layout,
                      const absl::StatusOr<testing::GoldenCase>& c);

// Writes `family`'s golden case with its experts in `layout` and serves it
// by a router with 2 workers.
void ExpectServedGolden(HfFamily family, HfExpertLayout layout) {
  auto it = FamilyCases().find(family);
  ASSERT_NE(it, FamilyCases().end())
      << "no golden case chosen for " << HfFamilyName(family);
  auto c = CaseFor(family, it->second);
  ASSERT_TRUE(c.ok()) << c.status();
  const auto families = testing::FamiliesFor(c->config);
  ASSERT_NE(std::find(families.begin(), families.end(), family), families.end())
      << HfFamilyName(family) << " cannot express " << c->name;
  ExpectServedCase(family, layout, c);
}

// Writes `c` as a `family` checkpoint with its experts in `layout` (the
// writer refuses a case the layout's config cannot say) and serves it by a
// router with 2 workers.
void ExpectServedCase(HfFamily family, HfExpertLayout layout,
                      const absl::StatusOr<testing::GoldenCase>& c) {
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir =
      testing::MakeTempDir(std::string(HfFamilyName(family)) + "_");
  testing::HfWriteOptions o;
  o.family = family;
  o.layer = 1;
  o.shards = 3;
  o.layout = layout;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  auto ckpt = HfCheckpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::vector<int64_t> moe_layers = (*ckpt)->info().RequestLayers();

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
  // ERNIE-4.5-VL's layers need each row's type: the case is text.
  if (info->vision_layers().count(static_cast<int32_t>(o.layer)) > 0) {
    fo.token_types.assign(c->tokens, 0);
  }
  auto r = cluster.client().Forward(static_cast<int32_t>(o.layer), c->x.data(),
                                    c->tokens, c->config.hidden, fo);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(testing::AllClose(r->y, c->y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, r->expert_ids,
                                        r->weights, c->tokens, c->config.top_k,
                                        r->slots));
  // The family's checkpoint takes the case's routing and logits back and
  // answers its shared experts apart.
  testing::ExpectCallerRoutingMatches(cluster, *c,
                                      static_cast<int32_t>(o.layer));
  fs::remove_all(dir);
}

class FamilyGoldenTest : public ::testing::TestWithParam<HfFamily> {};

TEST_P(FamilyGoldenTest, RouterAndTwoWorkersMatchTheGoldenCase) {
  ExpectServedGolden(GetParam(), HfExpertLayout::kPerExpert);
}

// The older families as transformers v5 saves them: experts packed into
// mlp.experts.gate_up_proj / down_proj (Mixtral's block_sparse_moe. renamed
// mlp.); Hy3's v5 names, GraniteMoeSWA's block_sparse_moe.experts.*, and
// InternVL's Qwen3-MoE under model.language_model.
TEST(FamilyGoldenPacked, TransformersV5LayoutServesTheGoldenCase) {
  for (HfFamily family :
       {HfFamily::kMixtral, HfFamily::kQwen3Moe, HfFamily::kHyV3,
        HfFamily::kGraniteMoeSwa, HfFamily::kInternVl}) {
    SCOPED_TRACE(HfFamilyName(family));
    ExpectServedGolden(family, HfExpertLayout::kPacked);
  }
}

// Mistral's own layout (params.json + consolidated shards, no config.json):
// Mixtral's golden case, and Mistral-Large-3 as deepseek_v3 with a case of
// its own gate (softmax, groups by their best expert, renorm, routed scale,
// a shared expert), since deepseek_v3_like's sigmoid and correction bias are
// not Mistral-Large-3's math.
MoeLayerConfig MistralLarge3Config() {
  MoeLayerConfig k = ReferenceConfig(HfFamily::kDeepseekV3);
  k.route_scale = 2.5f;
  k.n_groups = 4;
  k.topk_groups = 2;
  k.group_score = GroupScore::kMax;
  k.shared_inter = k.inter;  // moe.num_shared_experts 1
  return k;
}

// The router started on `dir` without workers: its exit and output, for the
// checkpoints it must refuse at start.
testing::CommandResult StartRouterOn(const std::string& dir) {
  return testing::RunCommand({testing::RouterBinary(), "--model=" + dir,
                              "--listen=127.0.0.1:0", "--num-workers=0"},
                             std::chrono::seconds(30));
}

TEST(FamilyGoldenMistral, ConsolidatedLayoutServesTheGoldenCase) {
  {
    SCOPED_TRACE("mixtral");
    ExpectServedCase(HfFamily::kMixtral, HfExpertLayout::kConsolidated,
                     CaseFor(HfFamily::kMixtral, "mixtral_like"));
  }
  {
    SCOPED_TRACE("Mistral-Large-3");
    ExpectServedCase(HfFamily::kDeepseekV3, HfExpertLayout::kConsolidated,
                     testing::RandomCase(MistralLarge3Config(), 24, 13,
                                         "mistral_large_3_ref"));
  }
}

// A params.json the service cannot serve, or a consolidated checkpoint
// missing a tensor, is refused when the router starts, naming the key or
// the tensor (and the file); never served as a near family.
TEST(FamilyRefusal, RouterRefusesABadMistralCheckpointAtStart) {
  const testing::GoldenCase c =
      testing::RandomCase(MistralLarge3Config(), 8, 3, "mistral_large_3_ref");
  const std::string dir = testing::MakeTempDir("refused_mistral_");
  testing::HfWriteOptions o;
  o.family = HfFamily::kDeepseekV3;
  o.layout = HfExpertLayout::kConsolidated;
  struct Bad {
    std::string key, value, names;
  };
  const Bad cases[] = {
      {"moe.num_experts", "", "'moe.num_experts' is missing"},
      {"dim", "", "'dim' is missing"},
      {"moe.use_load_balancing_bias", "true", "'moe.use_load_balancing_bias'"},
      {"moe.num_shared_experts", "0", "is not read by Mixtral"},
      {"quantization", R"({"qformat_weight":"fp8_e4m3"})", "'quantization'"},
      {"tensor", "layers.1.gate.weight", "layers.1.gate.weight"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.key);
    fs::remove_all(dir);
    ASSERT_TRUE(testing::WriteHfCheckpoint(c, o, dir).ok());
    if (b.key == "tensor") {
      ASSERT_TRUE(testing::ReplaceHfTensor(dir, b.value, {}).ok());
    } else {
      ASSERT_TRUE(testing::SetMistralParamsKey(dir, b.key, b.value).ok());
    }
    const testing::CommandResult r = StartRouterOn(dir);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(b.names), std::string::npos) << r.output;
    if (b.key != "tensor") {
      EXPECT_NE(r.output.find("params.json"), std::string::npos) << r.output;
    }
  }
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
      {"model_type", R"("switch_transformers")", "'switch_transformers'"},
      {"architectures", R"(["MixtralForSequenceClassification"])",
       "MixtralForSequenceClassification"},
      {"quantization_config", R"({"quant_method":"awq","bits":4})", "'awq'"},
  };
  for (const Bad& b : cases) {
    SCOPED_TRACE(b.key);
    ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
    ASSERT_TRUE(testing::SetHfConfigKey(dir, b.key, b.value).ok());
    const testing::CommandResult r = StartRouterOn(dir);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(b.names), std::string::npos) << r.output;
    if (b.key == "model_type") {
      EXPECT_NE(r.output.find(SupportedHfFamilies()), std::string::npos)
          << r.output;
    }
  }
  fs::remove_all(dir);
}

// DeepSeek-V4 as released: hash-routed layers 0-1 (deepseek_v4_hash's
// weights at 1) and top-k layers 2-3 (deepseek_v4_like's at 2) in one
// checkpoint, served in one process (workers 0) and by a router with 2
// workers over direct steps and over the all-to-all (direct_step_tokens 0):
// the model info says which layers need token ids, each layer matches its
// own case, and bad token ids are refused without harm to what follows.
struct MixedRun {
  int workers;
  int64_t direct_step_tokens;  // -1: the router's default
};

class DeepseekV4MixedTest : public ::testing::TestWithParam<MixedRun> {};

TEST_P(DeepseekV4MixedTest, EachLayerMatchesItsGoldenCase) {
  const std::string dir = testing::MakeTempDir("deepseek_v4_mixed_");
  auto m = testing::WriteDeepseekV4Mixed(dir, /*released=*/false);
  ASSERT_TRUE(m.ok()) << m.status();
  const testing::GoldenCase* hash = &m->hash;
  const testing::GoldenCase* topk = &m->topk;

  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.workers = GetParam().workers;
  co.direct_step_tokens = GetParam().direct_step_tokens;
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(std::vector<int32_t>(info->moe_layers().begin(),
                                 info->moe_layers().end()),
            (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(std::vector<int32_t>(info->hash_layers().begin(),
                                 info->hash_layers().end()),
            (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(info->hash_vocab(), hash->config.hash_vocab);
  EXPECT_EQ(info->layer_config_json(), MoeLayerConfigToJson(topk->config));
  ASSERT_EQ(info->layer_config_overrides_json().size(), 2u);
  for (int32_t l : {0, 1}) {
    auto c = ParseMoeLayerConfigJson(info->layer_config_overrides_json().at(l));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*c, hash->config) << "layer " << l;
  }

  auto forward = [&](int32_t layer, const testing::GoldenCase& c,
                     std::vector<int64_t> ids) {
    ForwardOptions fo;
    fo.routing = true;
    fo.token_ids = std::move(ids);
    return cluster.client().Forward(layer, c.x.data(), c.tokens,
                                    c.config.hidden, fo);
  };
  auto expect_golden = [&](const testing::GoldenCase& c,
                           const absl::StatusOr<ForwardResult>& r) {
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    EXPECT_TRUE(testing::AllClose(r->y, c.y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, r->expert_ids,
                                          r->weights, c.tokens, c.config.top_k,
                                          r->slots));
  };
  expect_golden(*hash, forward(1, *hash, hash->token_ids));
  expect_golden(*topk, forward(2, *topk, {}));
  // A top-k layer accepts token ids and routes without them.
  expect_golden(*topk,
                forward(2, *topk, std::vector<int64_t>(topk->tokens, 5)));
  EXPECT_TRUE(forward(0, *hash, hash->token_ids).ok());
  EXPECT_TRUE(forward(3, *topk, {}).ok());

  // Bad token ids: INVALID_ARGUMENT naming the field, the layer or row.
  struct Bad {
    int32_t layer;
    std::vector<int64_t> ids;
    std::string names;
  };
  std::vector<int64_t> out_of_range = hash->token_ids;
  out_of_range[3] = hash->config.hash_vocab;
  std::vector<int64_t> negative = hash->token_ids;
  negative[0] = -1;
  const Bad bad[] = {
      {0, {}, "token_ids: required: layer 0 is hash-routed"},
      {1, {}, "token_ids: required: layer 1 is hash-routed"},
      {1, out_of_range, "token_ids[3] (row 3)"},
      {0, negative, "token_ids[0] (row 0)"},
      {1, std::vector<int64_t>(hash->tokens - 1, 0), "token_ids: "},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.names);
    auto r = forward(b.layer, *hash, b.ids);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.names), std::string::npos)
        << r.status();
  }
  // The next requests are answered as before.
  expect_golden(*hash, forward(1, *hash, hash->token_ids));
  expect_golden(*topk, forward(2, *topk, {}));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, DeepseekV4MixedTest,
    ::testing::Values(MixedRun{0, -1}, MixedRun{2, -1}, MixedRun{2, 0}),
    [](const auto& info) {
      return absl::StrCat(info.param.workers, "Workers",
                          info.param.direct_step_tokens == 0 ? "AllToAll" : "");
    });

// The test's name: the family's model_type, and its model class where
// several families share the model_type (Ling V1 and V2).
std::string FamilyTestName(HfFamily family) {
  std::string name = HfFamilyName(family);
  int sharing = 0;
  for (HfFamily f : AllHfFamilies()) sharing += name == HfFamilyName(f);
  if (sharing > 1) name += absl::StrCat("_", EntryOf(family).architectures[0]);
  // A test name takes letters, digits and '_' only (grok-1).
  for (char& ch : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

// The F32 tensor `name` of the checkpoint in `dir`, found through its index.
absl::StatusOr<std::vector<float>> ReadCheckpointF32(const std::string& dir,
                                                     const std::string& name) {
  std::ifstream f(fs::path(dir) / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(f, nullptr, false);
  if (index.is_discarded() || !index["weight_map"].contains(name)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no tensor ", name));
  }
  const std::string shard = index["weight_map"][name];
  auto file = SafetensorsFile::Open((fs::path(dir) / shard).string());
  if (!file.ok()) return file.status();
  return (*file)->ReadF32(name);
}

// Step-3.5 with each MoE layer's own limits: layer 1 holds step35_like
// (swiglustep 7 routed, 16 shared), layer 2 other weights under
// swiglustep 0.5 routed and plain silu shared. A router with 2 workers,
// over direct steps and the all-to-all, answers each layer by its own
// config, and the model info says so.
class Step3p5PerLayerTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(Step3p5PerLayerTest, EachLayerRunsItsOwnLimits) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/step35_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("step3p5_layers_");
  testing::HfWriteOptions o;
  o.family = HfFamily::kStep3p5;
  o.layer = 1;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  ASSERT_TRUE(
      testing::SetHfConfigKey(dir, "swiglu_limits", "[null, 7, 0.5]").ok());
  ASSERT_TRUE(
      testing::SetHfConfigKey(dir, "swiglu_limits_shared", "[0, 16, 0]").ok());

  // Layer 2's case: the weights written there (read by the names the
  // release spells), its own limits, fresh tokens through the reference.
  testing::GoldenCase l2;
  l2.name = "step3p5_layer2";
  l2.config = c->config;
  l2.config.act_limit = 0.5f;
  l2.config.shared_act = Activation::kSilu;
  l2.config.shared_act_limit = 0.0f;
  const std::string p = "model.layers.2.";
  struct Read {
    const char* name;
    std::vector<float>* into;
  };
  for (const Read& r :
       {Read{"moe.gate.weight", &l2.gate}, Read{"moe.router_bias", &l2.bias},
        Read{"moe.gate_proj.weight", &l2.w1},
        Read{"moe.up_proj.weight", &l2.w3},
        Read{"moe.down_proj.weight", &l2.w2},
        Read{"share_expert.gate_proj.weight", &l2.sw1},
        Read{"share_expert.up_proj.weight", &l2.sw3},
        Read{"share_expert.down_proj.weight", &l2.sw2}}) {
    auto v = ReadCheckpointF32(dir, p + r.name);
    ASSERT_TRUE(v.ok()) << v.status();
    *r.into = *std::move(v);
  }
  l2.tokens = 13;
  l2.x.resize(l2.tokens * l2.config.hidden);
  uint64_t seed = 11;
  for (float& v : l2.x) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v = 3.0f * (static_cast<float>(seed >> 40) / 8388608.0f - 1.0f);
  }
  testing::RunReferenceMoe(l2);
  // Layer 1's limits on layer 2's weights answer otherwise: the limits
  // are what this test tells apart.
  testing::GoldenCase l2_as_l1 = l2;
  l2_as_l1.config = c->config;
  testing::RunReferenceMoe(l2_as_l1);
  ASSERT_FALSE(testing::AllClose(l2_as_l1.y, l2.y, testing::kF32Tol));

  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.workers = 2;
  co.direct_step_tokens = GetParam();
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->layer_config_json(), MoeLayerConfigToJson(c->config));
  ASSERT_EQ(info->layer_config_overrides_json().size(), 1u);
  auto got = ParseMoeLayerConfigJson(info->layer_config_overrides_json().at(2));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, l2.config);
  testing::ExpectServesCase(cluster, *c, 1);
  testing::ExpectServesCase(cluster, l2, 2);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Paths, Step3p5PerLayerTest,
                         ::testing::Values(int64_t{-1}, int64_t{0}),
                         [](const auto& info) {
                           return std::string(info.param == 0 ? "AllToAll"
                                                              : "Default");
                         });

// ERNIE-4.5-VL in its release layout: layer 1's text experts hold
// ernie45_like, its vision experts (half as wide, numbered after the text
// ones, router gate.weight_1, bias row 1) a case of their own with the same
// shared experts. Router + 2 workers, over direct steps and the all-to-all,
// answer a request whose rows interleave text and image tokens row by row,
// each by its own expert set (vision experts reported as E + e); all-text
// and all-video requests too. Missing token types, a vision layer named
// directly and caller routing with vision rows are refused by name, and the
// next request is answered.
TEST(ErnieVl, TextAndVisionRowsRunTheirOwnExperts) {
  auto text = CaseFor(HfFamily::kErnie45VlMoe, "ernie45_like");
  ASSERT_TRUE(text.ok()) << text.status();
  const MoeLayerConfig& k = text->config;
  MoeLayerConfig vk = k;
  vk.inter = testing::ErnieVlVisionInter(k);
  ASSERT_NE(vk.inter, k.inter);
  testing::GoldenCase vision = testing::RandomCase(vk, 17, 41, "ernie_vision");
  vision.sw1 = text->sw1;
  vision.sw3 = text->sw3;
  vision.sw2 = text->sw2;
  testing::RunReferenceMoe(vision);
  const std::string dir = testing::MakeTempDir("ernie_vl_");
  testing::HfWriteOptions o;
  o.family = HfFamily::kErnie45VlMoe;
  o.layer = 1;
  o.vision_case = &vision;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*text, o, dir).ok());

  // Rows: text, image, text, ... while both last; then the rest of each.
  const int64_t H = k.hidden, E = k.num_experts, K = k.top_k;
  std::vector<float> x, want_y;
  std::vector<int32_t> types;
  std::vector<int64_t> want_ids;
  std::vector<float> want_w;
  for (int64_t t = 0, v = 0; t < text->tokens || v < vision.tokens;) {
    const bool pick_text =
        t < text->tokens && (v >= vision.tokens || (t + v) % 2 == 0);
    const testing::GoldenCase& from = pick_text ? *text : vision;
    const int64_t r = pick_text ? t++ : v++;
    x.insert(x.end(), from.x.begin() + r * H, from.x.begin() + (r + 1) * H);
    want_y.insert(want_y.end(), from.y.begin() + r * H,
                  from.y.begin() + (r + 1) * H);
    for (int64_t j = 0; j < K; ++j) {
      want_ids.push_back(from.top_idx[r * K + j] + (pick_text ? 0 : E));
      want_w.push_back(from.top_w[r * K + j]);
    }
    types.push_back(pick_text ? 0 : 1);
  }
  const int64_t n = static_cast<int64_t>(types.size());

  for (const int64_t direct : {int64_t{-1}, int64_t{0}}) {
    SCOPED_TRACE(direct == 0 ? "all-to-all" : "default");
    testing::LocalCluster cluster;
    testing::LocalCluster::Options co;
    co.model_args = {"--model=" + dir};
    co.workers = 2;
    co.direct_step_tokens = direct;
    ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
    auto info = cluster.client().GetModelInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->family(), "ernie4_5_moe_vl");
    const int64_t layers = o.layer + 2;
    ASSERT_EQ(info->vision_layers().size(), 2u);  // layers 1 and 2
    const int32_t vl = info->vision_layers().at(1);
    EXPECT_EQ(vl, layers + 1);
    EXPECT_EQ(std::vector<int32_t>(info->moe_layers().begin(),
                                   info->moe_layers().end()),
              (std::vector<int32_t>{1, 2}));
    auto vc =
        ParseMoeLayerConfigJson(info->layer_config_overrides_json().at(vl));
    ASSERT_TRUE(vc.ok()) << vc.status();
    EXPECT_EQ(*vc, vk);

    ForwardOptions fo;
    fo.routing = true;
    fo.token_types = types;
    auto r = cluster.client().Forward(1, x.data(), n, H, fo);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    EXPECT_TRUE(testing::AllClose(r->y, want_y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(want_ids, want_w, r->expert_ids,
                                          r->weights, n, K, r->slots));
    // Each expert set's stats count its own rows' slots.
    auto text_stats = cluster.client().GetExpertStats(1, /*reset=*/true);
    auto vision_stats = cluster.client().GetExpertStats(vl, /*reset=*/true);
    ASSERT_TRUE(text_stats.ok() && vision_stats.ok());
    EXPECT_EQ(text_stats->tokens(), text->tokens);
    EXPECT_EQ(vision_stats->tokens(), vision.tokens);

    // Only video rows (type 2), and only text rows.
    ForwardOptions only;
    only.token_types.assign(vision.tokens, 2);
    auto rv =
        cluster.client().Forward(1, vision.x.data(), vision.tokens, H, only);
    ASSERT_TRUE(rv.ok()) << rv.status();
    EXPECT_TRUE(testing::AllClose(rv->y, vision.y, testing::kF32Tol));
    only.token_types.assign(text->tokens, 0);
    auto rt =
        cluster.client().Forward(1, text->x.data(), text->tokens, H, only);
    ASSERT_TRUE(rt.ok()) << rt.status();
    EXPECT_TRUE(testing::AllClose(rt->y, text->y, testing::kF32Tol));

    // Refused by name; the next request is answered.
    ForwardOptions none;
    auto missing = cluster.client().Forward(1, x.data(), n, H, none);
    EXPECT_FALSE(missing.ok());
    EXPECT_NE(missing.status().message().find("token_types"), std::string::npos)
        << missing.status();
    ForwardOptions bad = fo;
    bad.token_types[3] = 7;
    auto bad_type = cluster.client().Forward(1, x.data(), n, H, bad);
    EXPECT_NE(bad_type.status().message().find("token_types[3]"),
              std::string::npos)
        << bad_type.status();
    auto direct_vl = cluster.client().Forward(vl, x.data(), n, H, fo);
    EXPECT_NE(direct_vl.status().message().find("vision experts"),
              std::string::npos)
        << direct_vl.status();
    ForwardOptions replay = fo;
    replay.routing_slots = static_cast<int32_t>(K);
    replay.routing_expert_ids.assign(n * K, 0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < K; ++j) {
        replay.routing_expert_ids[t * K + j] = static_cast<int32_t>(j);
      }
    }
    replay.routing_weights.assign(n * K, 0.1f);
    auto replayed = cluster.client().Forward(1, x.data(), n, H, replay);
    EXPECT_NE(replayed.status().message().find("every row is text"),
              std::string::npos)
        << replayed.status();
    auto again = cluster.client().Forward(1, x.data(), n, H, fo);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(testing::AllClose(again->y, want_y, testing::kF32Tol));
  }
  fs::remove_all(dir);
}

// Hunyuan-A13B in its release layout with a per-layer moe_topk list: layer 1
// holds the reference case (k 2), layer 2 its own filler weights routed to 3
// experts. Router + 2 workers answer each layer by its own k, and the model
// info lists layer 2's config as an override.
TEST(HunyuanPerLayer, EachLayerRoutesItsOwnTopK) {
  auto c = CaseFor(HfFamily::kHunyuanV1Moe, kReferenceCase);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("hunyuan_layers_");
  testing::HfWriteOptions o;
  o.family = HfFamily::kHunyuanV1Moe;
  o.layer = 1;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  const int64_t k = c->config.top_k;
  ASSERT_TRUE(
      testing::SetHfConfigKey(dir, "moe_topk",
                              absl::StrCat("[", k, ",", k, ",", k + 1, "]"))
          .ok());
  // Layer 2's case: the weights written there, per expert as released.
  testing::GoldenCase l2;
  l2.name = "hunyuan_layer2";
  l2.config = c->config;
  l2.config.top_k = k + 1;
  const std::string p = "model.layers.2.mlp.";
  auto read = [&](const std::string& name, std::vector<float>* into) {
    auto v = ReadCheckpointF32(dir, p + name);
    ASSERT_TRUE(v.ok()) << v.status();
    into->insert(into->end(), v->begin(), v->end());
  };
  read("gate.wg.weight", &l2.gate);
  for (int64_t e = 0; e < l2.config.num_experts; ++e) {
    const std::string x = absl::StrCat("experts.", e, ".");
    read(x + "gate_proj.weight", &l2.w1);
    read(x + "up_proj.weight", &l2.w3);
    read(x + "down_proj.weight", &l2.w2);
  }
  read("shared_mlp.gate_proj.weight", &l2.sw1);
  read("shared_mlp.up_proj.weight", &l2.sw3);
  read("shared_mlp.down_proj.weight", &l2.sw2);
  if (HasFailure()) return;
  l2.tokens = 13;
  l2.x.resize(l2.tokens * l2.config.hidden);
  uint64_t seed = 5;
  for (float& v : l2.x) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v = 3.0f * (static_cast<float>(seed >> 40) / 8388608.0f - 1.0f);
  }
  testing::RunReferenceMoe(l2);

  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.workers = 2;
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->top_k(), k);
  ASSERT_EQ(info->layer_config_overrides_json().size(), 1u);
  auto got = ParseMoeLayerConfigJson(info->layer_config_overrides_json().at(2));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, l2.config);
  testing::ExpectServesCase(cluster, *c, 1);
  testing::ExpectServesCase(cluster, l2, 2);
  // Caller routing with layer 1's k for layer 2 is refused by name, and the
  // next request is answered.
  ForwardOptions wrong;
  wrong.routing_slots = static_cast<int32_t>(k);
  wrong.routing_expert_ids.assign(l2.tokens * k, 0);
  for (int64_t n = 0; n < l2.tokens; ++n) {
    for (int64_t j = 0; j < k; ++j) {
      wrong.routing_expert_ids[n * k + j] = static_cast<int32_t>(j);
    }
  }
  wrong.routing_weights.assign(l2.tokens * k, 0.5f);
  auto refused = cluster.client().Forward(2, l2.x.data(), l2.tokens,
                                          l2.config.hidden, wrong);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("top_k of 3"), std::string::npos)
      << refused.status();
  ForwardOptions fo;
  auto again =
      cluster.client().Forward(2, l2.x.data(), l2.tokens, l2.config.hidden, fo);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(testing::AllClose(again->y, l2.y, testing::kF32Tol));
  fs::remove_all(dir);
}

// A per-layer limit list of the wrong length is refused at start, naming
// its key.
TEST(Step3p5Refusal, WrongLengthLimitListIsRefusedByName) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/step35_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("step3p5_bad_");
  testing::HfWriteOptions o;
  o.family = HfFamily::kStep3p5;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, o, dir).ok());
  ASSERT_TRUE(
      testing::SetHfConfigKey(dir, "swiglu_limits_shared", "[0, 16]").ok());
  testing::CommandResult r =
      testing::RunCommand({testing::RouterBinary(), "--model=" + dir,
                           "--listen=127.0.0.1:0", "--num-workers=0"},
                          std::chrono::seconds(30));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("'swiglu_limits_shared'"), std::string::npos)
      << r.output;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGoldenTest,
                         ::testing::ValuesIn(Families()), [](const auto& info) {
                           return FamilyTestName(info.param);
                         });

}  // namespace
}  // namespace moe
