// gpt-oss and DeepSeek-V4 as released: MXFP4 routed experts
// (gpt-oss *_blocks/*_scales, V4 fp4 I8 + E8M0 .scale) and V4's FP8 shared
// expert with E8M0 block scales; Kimi K3 as released: MXFP4
// routed experts in compressed-tensors form (weight_packed / weight_scale);
// Nemotron 3 as released: NVIDIA ModelOpt NVFP4 routed experts
// (E2M1 code pairs, E4M3 scales per 16, a global weight_scale_2). Each is
// written from the golden case whose weights those formats hold exactly,
// served with --weight-dtype auto by one process (the router with its
// experts in it) and by a router with 2 CPU workers: the experts stay
// 4-bit, y meets the fp32 tolerance and routing is exact. moe-bench's f32
// path dequantises them exactly.
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "core/hf_checkpoint.h"
#include "core/safetensors.h"
#include "engine/layer_weights.h"
#include "gtest/gtest.h"
#include "kernels/mxfp4_rule.h"
#include "kernels/nvfp4_rule.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

struct Released {
  const char* golden;
  HfFamily family;
  // The routed experts' 4-bit format as released: MXFP4 (the writer's
  // `released`) or NVFP4 (its `nvfp4_experts`).
  WeightDType experts = WeightDType::kMXFP4;
};

// The bytes a 4-bit [rows, cols] weight needs from its shape alone: an E2M1
// code per weight, an 8-bit scale per block of a row, and for NVFP4 the
// tensor's fp32 global scale, which the CPU kernels keep once per output
// row (a fused gate/up weight's halves have different ones). At release
// shapes (cols in the thousands) that is 4.25 (MXFP4) or 4.5 (NVFP4) bits
// a weight: 0.27x or 0.28x of bf16.
int64_t FourBitBytes(WeightDType d, int64_t rows, int64_t cols) {
  const bool nv = d == WeightDType::kNVFP4;
  const int64_t block = nv ? kernels::kNvBlock : kernels::kMxBlock;
  return rows * (cols / 2 + (cols + block - 1) / block + (nv ? 4 : 0));
}

class ReleasedCheckpointTest : public ::testing::TestWithParam<Released> {
 protected:
  void SetUp() override {
    auto c = testing::LoadGoldenCase(testing::GoldenDir() + "/" +
                                     GetParam().golden + ".safetensors");
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    o_.family = GetParam().family;
    o_.layer = 1;
    o_.shards = 3;
    o_.released = GetParam().experts == WeightDType::kMXFP4;
    o_.nvfp4_experts = GetParam().experts == WeightDType::kNVFP4;
    dir_ = testing::MakeTempDir(std::string(GetParam().golden) + "_rel_");
    ASSERT_TRUE(testing::WriteHfCheckpoint(c_, o_, dir_).ok());
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Serves the checkpoint with `workers` workers (0: experts in the
  // router) and checks info, y and routing.
  void Serve(int workers) {
    testing::LocalCluster cluster;
    testing::LocalCluster::Options co;
    co.model_args = {"--model=" + dir_};
    co.workers = workers;
    co.router_args = {"--weight-dtype=auto"};
    ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
    auto info = cluster.client().GetModelInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->family(), HfFamilyName(o_.family));
    const WeightDType four_bit = GetParam().experts;
    EXPECT_EQ(info->weight_dtype(), WeightDTypeName(four_bit));
    const int64_t packed = PackedExpertBytes(c_.config, four_bit);
    EXPECT_EQ(info->expert_weight_bytes(), packed);
    // Against the bytes the shapes need (gated experts have a gate and an
    // up [inter, width] weight, non-gated ones only the up) and bf16's.
    const MoeLayerConfig& k = c_.config;
    const int64_t need =
        (k.gated ? 2 : 1) * FourBitBytes(four_bit, k.inter, k.expert_width()) +
        FourBitBytes(four_bit, k.expert_width(), k.inter);
    const double bf16 = 2.0 * static_cast<double>((k.gated ? 3 : 2) * k.inter) *
                        static_cast<double>(k.expert_width());
    const int64_t got = info->expert_weight_bytes();
    // Padding the inter dimension to the kernels' tile can only add bytes.
    EXPECT_GE(got, need);
    EXPECT_LT(static_cast<double>(got), 1.05 * static_cast<double>(need));
    std::printf(
        "%s: %d workers, expert bytes %ld %s (shapes need %ld) / %.0f "
        "bf16 = %.3f\n",
        GetParam().golden, workers, static_cast<long>(got),
        std::string(WeightDTypeName(four_bit)).c_str(), static_cast<long>(need),
        bf16, static_cast<double>(got) / bf16);
    ForwardOptions fo;
    fo.routing = true;
    fo.token_ids = c_.token_ids;
    auto r =
        cluster.client().Forward(static_cast<int32_t>(o_.layer), c_.x.data(),
                                 c_.tokens, c_.config.hidden, fo);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    EXPECT_TRUE(testing::AllClose(r->y, c_.y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(c_.top_idx, c_.top_w, r->expert_ids,
                                          r->weights, c_.tokens,
                                          c_.config.top_k, r->slots));
  }

  testing::GoldenCase c_;
  testing::HfWriteOptions o_;
  std::string dir_;
};

TEST_P(ReleasedCheckpointTest, OneProcessWithWeightDtypeAuto) { Serve(0); }

TEST_P(ReleasedCheckpointTest, RouterAndTwoWorkersWithWeightDtypeAuto) {
  Serve(2);
}

// moe-bench (one process, no token ids: top-k cases only) keeps the
// experts 4-bit under auto and dequantises them exactly under f32.
TEST_P(ReleasedCheckpointTest, MoeBenchAutoAndF32) {
  if (c_.config.hash_routed()) GTEST_SKIP() << "moe-bench sends no token ids";
  SafetensorsWriter in;
  in.AddF32("x", {c_.tokens, c_.config.hidden}, c_.x);
  ASSERT_TRUE(in.WriteFile(dir_ + "/in.safetensors").ok());
  for (const char* dtype : {"auto", "f32"}) {
    SCOPED_TRACE(dtype);
    auto run = testing::RunCommand(
        {MOE_BENCH_BIN, "--model=" + dir_, "--layer=1",
         std::string("--weight-dtype=") + dtype, "--threads=2",
         "--input=" + dir_ + "/in.safetensors",
         "--output=" + dir_ + "/out.safetensors", "--routing"},
        std::chrono::seconds(60));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const std::string kept =
        std::string(WeightDTypeName(GetParam().experts)) + " experts";
    EXPECT_NE(
        run.output.find(std::string(dtype) == "auto" ? kept : "f32 experts"),
        std::string::npos)
        << run.output;
    auto out = SafetensorsFile::Open(dir_ + "/out.safetensors");
    ASSERT_TRUE(out.ok()) << out.status();
    auto y = (*out)->ReadF32("y", {c_.tokens, c_.config.hidden});
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_TRUE(testing::AllClose(*y, c_.y, testing::kF32Tol));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Released, ReleasedCheckpointTest,
    ::testing::Values(Released{"gptoss_like", HfFamily::kGptOss},
                      Released{"deepseek_v4_like", HfFamily::kDeepseekV4},
                      Released{"deepseek_v4_hash", HfFamily::kDeepseekV4},
                      Released{"kimi_k3_like", HfFamily::kKimiK3},
                      Released{"nemotron3_nvfp4", HfFamily::kNemotronH,
                               WeightDType::kNVFP4}),
    [](const auto& info) { return std::string(info.param.golden); });

}  // namespace
}  // namespace moe
