// gpt-oss and DeepSeek-V4 as released (issue 32): MXFP4 routed experts
// (gpt-oss *_blocks/*_scales, V4 fp4 I8 + E8M0 .scale) and V4's FP8 shared
// expert with E8M0 block scales, written from the golden cases whose
// weights those formats hold exactly, served with --weight-dtype auto by
// one process (the router with its experts in it) and by a router with 2
// CPU workers: the experts stay MXFP4, y meets the fp32 tolerance and
// routing is exact. moe-bench's f32 path dequantises them exactly.
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "core/hf_checkpoint.h"
#include "core/safetensors.h"
#include "engine/layer_weights.h"
#include "gtest/gtest.h"
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
};

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
    o_.released = true;
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
    EXPECT_EQ(info->weight_dtype(), "mxfp4");
    const int64_t mx = PackedExpertBytes(c_.config, WeightDType::kMXFP4);
    const int64_t bf16 = PackedExpertBytes(c_.config, WeightDType::kBF16);
    EXPECT_EQ(info->expert_weight_bytes(), mx);
    // 4.25 bits a weight against 16 (biases excepted).
    const double ratio = static_cast<double>(mx) / bf16;
    EXPECT_GT(ratio, 0.26);
    EXPECT_LT(ratio, 0.29);
    std::printf("%s: %d workers, expert bytes %ld mxfp4 / %ld bf16 = %.3f\n",
                GetParam().golden, workers, static_cast<long>(mx),
                static_cast<long>(bf16), ratio);
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
// experts MXFP4 under auto and dequantises them exactly under f32.
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
    EXPECT_NE(run.output.find(std::string(dtype) == "auto" ? "mxfp4 experts"
                                                           : "f32 experts"),
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
                      Released{"deepseek_v4_hash", HfFamily::kDeepseekV4}),
    [](const auto& info) { return std::string(info.param.golden); });

}  // namespace
}  // namespace moe
