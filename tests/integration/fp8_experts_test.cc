// A DeepSeek-V3 FP8 checkpoint (F8_E4M3 experts with weight_scale_inv,
// partial edge blocks, quantization_config) kept FP8 in memory, through
// moe-bench and through a router with 2 CPU workers: routing exact, y within
// the golden fp32 tolerance of the dequantised-weight reference.
#include <filesystem>
#include <string>

#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/fp8_checkpoint.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// The deepseek_v3_like golden case with its experts FP8 round-tripped (and
// its reference recomputed on them), written as an FP8 checkpoint, layer 1.
struct Fp8Model {
  testing::GoldenCase c;
  std::string dir;
};

Fp8Model MakeModel(const std::string& prefix) {
  Fp8Model m;
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/deepseek_v3_like.safetensors");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return m;
  m.c = *std::move(c);
  testing::RoundTripExpertsThroughFp8(&m.c);
  m.dir = testing::MakeTempDir(prefix);
  EXPECT_TRUE(testing::WriteFp8Checkpoint(m.c, 1, m.dir).ok());
  return m;
}

TEST(Fp8Experts, MoeBenchCheckpointMatchesTheDequantisedReference) {
  Fp8Model m = MakeModel("fp8_bench_");
  ASSERT_FALSE(m.dir.empty());
  SafetensorsWriter in;
  in.AddF32("x", {m.c.tokens, m.c.config.hidden}, m.c.x);
  ASSERT_TRUE(in.WriteFile(m.dir + "/in.safetensors").ok());
  auto run = testing::RunCommand(
      {MOE_BENCH_BIN, "--model=" + m.dir, "--layer=1", "--weight-dtype=fp8",
       "--threads=2", "--input=" + m.dir + "/in.safetensors",
       "--output=" + m.dir + "/out.safetensors", "--routing"},
      std::chrono::seconds(60));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("fp8 experts"), std::string::npos) << run.output;
  auto out = SafetensorsFile::Open(m.dir + "/out.safetensors");
  ASSERT_TRUE(out.ok()) << out.status();
  auto y = (*out)->ReadF32("y", {m.c.tokens, m.c.config.hidden});
  auto idx = (*out)->ReadI64("top_idx");
  auto w = (*out)->ReadF32("top_w");
  ASSERT_TRUE(y.ok() && idx.ok() && w.ok());
  EXPECT_TRUE(testing::AllClose(*y, m.c.y, testing::kF32Tol));
  std::vector<int32_t> ids(idx->begin(), idx->end());
  EXPECT_TRUE(testing::SameTokenRouting(m.c.top_idx, m.c.top_w, ids, *w,
                                        m.c.tokens, m.c.config.top_k,
                                        m.c.config.top_k));
  fs::remove_all(m.dir);
}

// --weight-dtype fp8, and the default (auto), which must keep the
// checkpoint's FP8 and say so in GetModelInfo.
TEST(Fp8Experts, RouterWithTwoWorkersMatchesTheDequantisedReference) {
  Fp8Model m = MakeModel("fp8_cluster_");
  ASSERT_FALSE(m.dir.empty());
  for (const std::string& flag :
       {"--weight-dtype=fp8", "--weight-dtype=auto"}) {
    SCOPED_TRACE(flag);
    testing::LocalCluster cluster;
    testing::LocalCluster::Options co;
    co.model_args = {"--model=" + m.dir};
    co.workers = 2;
    co.router_args = {flag};
    ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
    auto info = cluster.client().GetModelInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->weight_dtype(), "fp8");
    EXPECT_GT(info->router_rss_bytes(), 0);
    EXPECT_GE(info->router_peak_rss_bytes(), info->router_rss_bytes());
    ForwardOptions fo;
    fo.routing = true;
    auto r = cluster.client().Forward(1, m.c.x.data(), m.c.tokens,
                                      m.c.config.hidden, fo);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    EXPECT_TRUE(testing::AllClose(r->y, m.c.y, testing::kF32Tol));
    EXPECT_TRUE(testing::SameTokenRouting(m.c.top_idx, m.c.top_w, r->expert_ids,
                                          r->weights, m.c.tokens,
                                          m.c.config.top_k, r->slots));
  }
  fs::remove_all(m.dir);
}

// FP8 weights and FP8 dispatch together, the DeepSeek-V3 deployment: the
// rows cross the workers' all-to-all as e4m3 plus one scale per 128
// channels. Routing stays exact (the router routes on unquantised x); y is
// within the FP8 dispatch tolerance of the dequantised-weight reference
// (tests/testutil/compare.h, measured on every golden case).
TEST(Fp8Experts, Fp8DispatchWithTwoWorkersKeepsRoutingAndItsTolerance) {
  Fp8Model m = MakeModel("fp8_dispatch_");
  ASSERT_FALSE(m.dir.empty());
  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + m.dir};
  co.workers = 2;
  co.router_args = {"--weight-dtype=fp8", "--dispatch-dtype=fp8"};
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  ForwardOptions fo;
  fo.routing = true;
  auto r = cluster.client().Forward(1, m.c.x.data(), m.c.tokens,
                                    m.c.config.hidden, fo);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(testing::RmsClose(r->y, m.c.y, testing::kFp8DispatchTol));
  // The quantised rows did change y: the exchange really was FP8.
  EXPECT_FALSE(testing::AllClose(r->y, m.c.y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(m.c.top_idx, m.c.top_w, r->expert_ids,
                                        r->weights, m.c.tokens,
                                        m.c.config.top_k, r->slots));
  fs::remove_all(m.dir);
}

}  // namespace
}  // namespace moe
