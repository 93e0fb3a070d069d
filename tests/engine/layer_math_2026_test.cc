// The 2026 layer options (tests/golden/README.md) through the single-process
// engine against the independent reference: router bias with topk_softmax,
// expert biases, the gptoss and silu_clamp activations, sqrtsoftplus,
// norm_min, hash routing; f32, bf16 and FP8 weights; N = 0, 1 and odd
// sizes; the large shapes of the 2026 releases (E = 384, H = I = 2880).
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
  r.status =
      (*moe)->Forward(0, c.x.data(), c.tokens, {}, r.y.data(), &r.routing,
                      nullptr, ids != nullptr ? *ids : c.token_ids);
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

}  // namespace
}  // namespace moe
