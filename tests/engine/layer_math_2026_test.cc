// The 2026 layer options (tests/golden/README.md) through the single-process
// engine against the independent reference: router bias with topk_softmax,
// expert biases, the gptoss and silu_clamp activations, sqrtsoftplus,
// norm_min, hash routing; f32, bf16 and FP8 weights; N = 0, 1 and odd
// sizes; the large shapes of the 2026 releases (E = 384, H = I = 2880).
// The second and third waves too: non-gated relu2 experts and LatentMoE
// (Nemotron 3), the router pre-norm, per-expert scales, gelu_tanh and the
// branch norms (Gemma 4), SiTU and the latent norm (Kimi K3).
#include <string>
#include <vector>

#include "engine/local_moe.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/fp8_checkpoint.h"
#include "tests/testutil/reference_moe.h"

namespace moe {
namespace {

using testing::AllClose;
using testing::GoldenCase;
using testing::RandomCase;

MoeLayerConfig GptOss() {
  MoeLayerConfig c;
  c.hidden = 37;
  c.inter = 19;
  c.num_experts = 8;
  c.top_k = 3;
  c.score_func = ScoreFunc::kTopkSoftmax;
  c.route_norm = false;
  c.router_bias = true;
  c.expert_bias = true;
  c.act = Activation::kGptOss;
  c.act_limit = 1.5f;  // small, so that random layers clamp often
  return c;
}

MoeLayerConfig DeepseekV4(int64_t hash_vocab) {
  MoeLayerConfig c;
  c.hidden = 40;
  c.inter = 21;
  c.num_experts = 12;
  c.top_k = 4;
  c.score_func = ScoreFunc::kSqrtSoftplus;
  c.use_bias = hash_vocab == 0;
  c.route_scale = 1.5f;
  c.shared_inter = 21;
  c.act = Activation::kSiluClamp;
  c.act_limit = 1.0f;
  c.hash_vocab = hash_vocab;
  return c;
}

MoeLayerConfig Ernie() {
  MoeLayerConfig c;
  c.hidden = 33;
  c.inter = 17;
  c.num_experts = 10;
  c.top_k = 3;
  c.use_bias = true;  // with softmax scores
  c.norm_min = 0.6f;
  c.shared_inter = 34;
  return c;
}

struct Result {
  absl::Status status;
  std::vector<float> y;
  Routing routing;
};

Result RunLayer(const GoldenCase& c, WeightDType dtype = WeightDType::kF32,
                const std::vector<int64_t>* ids = nullptr) {
  Result r;
  auto source = testing::MakeGoldenSource(c);
  auto moe = LocalMoe::Create(*source, "cpu", dtype, 2,
                              std::max<int64_t>(c.tokens, 1));
  if (!moe.ok()) {
    r.status = moe.status();
    return r;
  }
  r.y.assign(c.tokens * c.config.hidden, -7.0f);
  r.status = (*moe)->Forward(
      0, c.x.data(),
      {.n = c.tokens, .token_ids = ids != nullptr ? *ids : c.token_ids},
      r.y.data(), &r.routing);
  return r;
}

void ExpectMatches(const MoeLayerConfig& config, int64_t n, uint64_t seed,
                   WeightDType dtype = WeightDType::kF32) {
  auto c = RandomCase(config, n, seed);
  if (dtype == WeightDType::kFP8) testing::RoundTripExpertsThroughFp8(&c);
  Result r = RunLayer(c, dtype);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(AllClose(
      r.y, c.y,
      dtype == WeightDType::kBF16 ? testing::kBf16Tol : testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(c.top_idx, c.top_w, r.routing.expert,
                                        r.routing.weight, n, config.top_k,
                                        r.routing.slots));
}

TEST(LayerMath2026, GptOssRouterBiasTopkSoftmaxExpertBiasesAct) {
  for (int64_t n : {0, 1, 2, 37}) {
    SCOPED_TRACE(n);
    ExpectMatches(GptOss(), n, 5 + n);
  }
  MoeLayerConfig before = GptOss();
  before.score_before_experts = true;  // b2 lands before the weighting
  ExpectMatches(before, 23, 9);
}

TEST(LayerMath2026, DeepseekV4SqrtSoftplusSiluClampOnRoutedAndShared) {
  for (int64_t n : {0, 1, 29}) {
    SCOPED_TRACE(n);
    ExpectMatches(DeepseekV4(0), n, 17 + n);
  }
}

TEST(LayerMath2026, ErnieSoftmaxWithBiasAndNormMin) {
  for (int64_t n : {1, 45}) {
    SCOPED_TRACE(n);
    ExpectMatches(Ernie(), n, 31 + n);
  }
}

TEST(LayerMath2026, HashRoutingFollowsTheTableInStoredOrder) {
  for (int64_t n : {0, 1, 40}) {
    SCOPED_TRACE(n);
    ExpectMatches(DeepseekV4(16), n, 41 + n);
  }
  auto c = RandomCase(DeepseekV4(16), 6, 3);
  Result r = RunLayer(c);
  ASSERT_TRUE(r.status.ok()) << r.status;
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(r.routing.expert[t * 4 + j], c.tid2eid[c.token_ids[t] * 4 + j]);
    }
  }
}

TEST(LayerMath2026, HashRoutingRefusesMissingOrBadTokenIds) {
  auto c = RandomCase(DeepseekV4(16), 5, 4);
  const std::vector<int64_t> none, short_ids = {1, 2}, bad = {0, 1, 16, 2, 3};
  Result r = RunLayer(c, WeightDType::kF32, &none);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("token_ids"), absl::string_view::npos)
      << r.status;
  r = RunLayer(c, WeightDType::kF32, &short_ids);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
  r = RunLayer(c, WeightDType::kF32, &bad);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("token_ids[2]"), absl::string_view::npos)
      << r.status;
  // The ids are ignored by a layer that is not hash-routed.
  auto plain = RandomCase(Ernie(), 5, 4);
  EXPECT_TRUE(RunLayer(plain, WeightDType::kF32, &bad).status.ok());
}

TEST(LayerMath2026, BadHashTableIsRefusedAtLoad) {
  auto c = RandomCase(DeepseekV4(16), 3, 6);
  c.tid2eid[5] = 12;  // row 1: outside [0, 12)
  Result r = RunLayer(c);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status.message().find("row 1"), absl::string_view::npos)
      << r.status;
  c.tid2eid[5] = c.tid2eid[4];  // row 1 names one expert twice
  r = RunLayer(c);
  EXPECT_NE(r.status.message().find("twice"), absl::string_view::npos)
      << r.status;
}

TEST(LayerMath2026, Bf16AndFp8Weights) {
  ExpectMatches(GptOss(), 21, 51, WeightDType::kBF16);
  ExpectMatches(DeepseekV4(0), 21, 52, WeightDType::kBF16);
  ExpectMatches(GptOss(), 21, 53, WeightDType::kFP8);
  ExpectMatches(DeepseekV4(16), 21, 54, WeightDType::kFP8);
}

TEST(LayerMath2026, KimiSized384ExpertsTopK8) {
  MoeLayerConfig c;
  c.hidden = 48;
  c.inter = 16;
  c.num_experts = 384;
  c.top_k = 8;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.route_scale = 2.827f;
  ExpectMatches(c, 7, 61);
  c.num_experts = 512;  // Qwen3-Next: 512 experts, k = 10
  c.top_k = 10;
  c.score_func = ScoreFunc::kSoftmax;
  c.use_bias = false;
  ExpectMatches(c, 5, 62);
}

TEST(LayerMath2026, GptOssWidthsNotAMultipleOf128) {
  // gpt-oss: H = I = 2880 (45 x 64, but 22.5 x 128: FP8's 128-wide K
  // blocks end in a half block). Then 2880 + 16, a width that is not even
  // a multiple of 32, so the last packed panel is half empty.
  MoeLayerConfig c = GptOss();
  c.hidden = 2880;
  c.inter = 2880;
  c.num_experts = 2;
  c.top_k = 1;
  c.act_limit = 7.0f;
  ExpectMatches(c, 3, 71);
  ExpectMatches(c, 3, 72, WeightDType::kFP8);
  c.hidden = c.inter = 2896;
  ExpectMatches(c, 2, 73);
  ExpectMatches(c, 2, 74, WeightDType::kFP8);
}

// Nemotron 3: sigmoid + bias, renormalised, scaled; non-gated relu2 routed
// experts at a latent width between biased projections; a non-gated
// shared expert on the full-width x. Odd widths everywhere.
MoeLayerConfig Nemotron3() {
  MoeLayerConfig c;
  c.hidden = 45;
  c.inter = 23;
  c.num_experts = 20;
  c.top_k = 6;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.route_scale = 2.5f;
  c.n_groups = 4;
  c.topk_groups = 2;
  c.shared_inter = 37;
  c.act = Activation::kRelu2;
  c.gated = false;
  c.latent = 19;
  c.latent_bias = true;
  return c;
}

// Gemma 4: softmax on the pre-normed x, top-k renormalised times a
// per-expert scale; gelu_tanh experts between branch norms, the dense
// branch as the shared expert between its own.
MoeLayerConfig Gemma4() {
  MoeLayerConfig c;
  c.hidden = 42;
  c.inter = 13;
  c.num_experts = 11;
  c.top_k = 4;
  c.shared_inter = 50;
  c.act = Activation::kGeluTanh;
  c.router_prenorm = true;
  c.per_expert_scale = true;
  c.branch_norms = true;
  return c;
}

// Kimi K3: SiTU (capped gate and up) on routed and shared experts, a
// normed latent sum, 16 of 40 experts.
MoeLayerConfig KimiK3() {
  MoeLayerConfig c;
  c.hidden = 36;
  c.inter = 17;
  c.num_experts = 40;
  c.top_k = 16;
  c.score_func = ScoreFunc::kSigmoid;
  c.use_bias = true;
  c.route_scale = 2.827f;
  c.shared_inter = 34;
  c.act = Activation::kSitu;
  c.act_beta = 0.5f;  // small, so that random gates pass the cap often
  c.act_linear_beta = 0.8f;
  c.latent = 21;
  c.latent_norm = true;
  c.norm_eps = 1e-5f;
  return c;
}

TEST(LayerMath2026b, Nemotron3LatentRelu2) {
  for (int64_t n : {0, 1, 2, 41}) {
    SCOPED_TRACE(n);
    ExpectMatches(Nemotron3(), n, 71 + n);
  }
  MoeLayerConfig no_latent = Nemotron3();  // Nemotron 3 Nano: no latent
  no_latent.latent = 0;
  no_latent.latent_bias = false;
  ExpectMatches(no_latent, 33, 75);
}

TEST(LayerMath2026b, Gemma4PrenormScalesGeluTanhBranchNorms) {
  for (int64_t n : {0, 1, 39}) {
    SCOPED_TRACE(n);
    ExpectMatches(Gemma4(), n, 81 + n);
  }
}

TEST(LayerMath2026b, KimiK3SituLatentNorm) {
  for (int64_t n : {0, 1, 27}) {
    SCOPED_TRACE(n);
    ExpectMatches(KimiK3(), n, 91 + n);
  }
  MoeLayerConfig uncapped_up = KimiK3();  // lambda 0: u passes as it is
  uncapped_up.act_linear_beta = 0.0f;
  ExpectMatches(uncapped_up, 19, 95);
}

TEST(LayerMath2026b, Bf16AndFp8Weights) {
  ExpectMatches(Nemotron3(), 21, 101, WeightDType::kBF16);
  ExpectMatches(Gemma4(), 21, 102, WeightDType::kBF16);
  ExpectMatches(KimiK3(), 21, 103, WeightDType::kBF16);
  ExpectMatches(Nemotron3(), 21, 104, WeightDType::kFP8);
  ExpectMatches(KimiK3(), 21, 105, WeightDType::kFP8);
}

TEST(LayerMath2026b, ExpertChoiceOverALatentLayer) {
  MoeLayerConfig c = Nemotron3();
  c.routing = RoutingMode::kExpertChoice;
  c.n_groups = 0;
  c.topk_groups = 0;
  auto g = RandomCase(c, 30, 111);
  Result r = RunLayer(g);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(AllClose(r.y, g.y, testing::kF32Tol));
}

TEST(LayerMath2026b, OptionCombinationsAreRefusedByName) {
  MoeLayerConfig c = Nemotron3();
  c.gated = true;  // relu2 is the non-gated activation
  EXPECT_NE(c.Validate().message().find("gated"), absl::string_view::npos);
  c = Gemma4();
  c.gated = false;  // non-gated needs relu2
  EXPECT_NE(c.Validate().message().find("gated"), absl::string_view::npos);
  c = Gemma4();
  c.latent_bias = true;
  EXPECT_NE(c.Validate().message().find("latent_bias"),
            absl::string_view::npos);
  c = KimiK3();
  c.branch_norms = true;
  EXPECT_NE(c.Validate().message().find("branch_norms"),
            absl::string_view::npos);
  c = KimiK3();
  c.act_beta = 0.0f;
  EXPECT_NE(c.Validate().message().find("act_beta"), absl::string_view::npos);
  c = Gemma4();
  c.routing = RoutingMode::kExpertChoice;
  EXPECT_NE(c.Validate().message().find("per_expert_scale"),
            absl::string_view::npos);
  c = KimiK3();
  c.score_before_experts = true;
  EXPECT_NE(c.Validate().message().find("score_before_experts"),
            absl::string_view::npos);
}

TEST(LayerMath2026b, MisShapedOrMissingFrameWeightsAreRefusedAtLoad) {
  // A latent projection whose width is not the experts': named, with both
  // shapes.
  WeightTensor t;
  t.name = "backbone.layers.1.mixer.fc2_latent_proj.weight";
  t.shape = {45, 18};
  EXPECT_EQ(CheckWeightTensor(t, Nemotron3(), WeightRole::kLatentW2).message(),
            "backbone.layers.1.mixer.fc2_latent_proj.weight: shape [45, 18], "
            "expected [45, 19] for latent.w2");
  auto g = RandomCase(Gemma4(), 3, 122);
  g.per_expert_scale.clear();  // a tensor the layer needs, absent
  Result r = RunLayer(g);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.status;
  EXPECT_NE(r.status.message().find("per_expert_scale"),
            absl::string_view::npos)
      << r.status;
}

TEST(LayerMath2026b, ConfigJsonRoundTripsTheNewKeys) {
  for (const MoeLayerConfig& c : {Nemotron3(), Gemma4(), KimiK3()}) {
    auto back = ParseMoeLayerConfigJson(MoeLayerConfigToJson(c));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == c) << MoeLayerConfigToJson(c);
  }
}

}  // namespace
}  // namespace moe
