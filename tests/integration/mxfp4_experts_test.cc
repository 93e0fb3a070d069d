// MXFP4 routed experts through real processes: moe-bench and a
// router with 2 CPU workers. Weights that MXFP4 holds exactly meet the fp32
// tolerance; every golden case quantised at load stays within
// kMxfp4WeightTol with routing exact (the gate stays fp32).
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/safetensors.h"
#include "engine/layer_weights.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/mxfp4_case.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// deepseek_v3_like with its routed experts MXFP4 round tripped (reference
// recomputed), written as an fp32 checkpoint at its default layer.
struct ExactModel {
  testing::GoldenCase c;
  std::string dir;
  testing::HfWriteOptions o;
};

ExactModel MakeExactModel(const std::string& prefix) {
  ExactModel m;
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/deepseek_v3_like.safetensors");
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return m;
  m.c = *std::move(c);
  testing::RoundTripRoutedExpertsThroughMxfp4(&m.c);
  auto dir = testing::WriteCaseCheckpoint(m.c, prefix, m.o);
  EXPECT_TRUE(dir.ok()) << dir.status();
  if (dir.ok()) m.dir = *dir;
  return m;
}

TEST(Mxfp4Experts, MoeBenchOnExactWeightsMeetsTheFp32Tolerance) {
  ExactModel m = MakeExactModel("mxfp4_bench_");
  ASSERT_FALSE(m.dir.empty());
  SafetensorsWriter in;
  in.AddF32("x", {m.c.tokens, m.c.config.hidden}, m.c.x);
  ASSERT_TRUE(in.WriteFile(m.dir + "/in.safetensors").ok());
  auto run = testing::RunCommand(
      {MOE_BENCH_BIN, "--model=" + m.dir,
       "--layer=" + std::to_string(m.o.layer), "--weight-dtype=mxfp4",
       "--threads=2", "--input=" + m.dir + "/in.safetensors",
       "--output=" + m.dir + "/out.safetensors", "--routing"},
      std::chrono::seconds(60));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("mxfp4 experts"), std::string::npos) << run.output;
  auto out = SafetensorsFile::Open(m.dir + "/out.safetensors");
  ASSERT_TRUE(out.ok()) << out.status();
  auto y = (*out)->ReadF32("y", {m.c.tokens, m.c.config.hidden});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(testing::AllClose(*y, m.c.y, testing::kF32Tol));
  fs::remove_all(m.dir);
}

TEST(Mxfp4Experts, RouterWithTwoWorkersOnExactWeightsMeetsTheFp32Tolerance) {
  ExactModel m = MakeExactModel("mxfp4_cluster_");
  ASSERT_FALSE(m.dir.empty());
  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + m.dir};
  co.workers = 2;
  co.router_args = {"--weight-dtype=mxfp4"};
  ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->weight_dtype(), "mxfp4");
  EXPECT_EQ(info->expert_weight_bytes(),
            PackedExpertBytes(m.c.config, WeightDType::kMXFP4));
  ForwardOptions fo;
  fo.routing = true;
  auto r =
      cluster.client().Forward(static_cast<int32_t>(m.o.layer), m.c.x.data(),
                               m.c.tokens, m.c.config.hidden, fo);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
  EXPECT_TRUE(testing::AllClose(r->y, m.c.y, testing::kF32Tol));
  EXPECT_TRUE(testing::SameTokenRouting(m.c.top_idx, m.c.top_w, r->expert_ids,
                                        r->weights, m.c.tokens,
                                        m.c.config.top_k, r->slots));
  fs::remove_all(m.dir);
}

// Every golden case, routed experts quantised to MXFP4 at load by the
// workers: within kMxfp4WeightTol of the fp32 reference, routing exact.
// Prints the figures the README's precision table quotes.
TEST(Mxfp4Experts, GoldenCasesQuantisedAtLoadWithTwoWorkers) {
  for (const std::string& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(c->name);
    const testing::HfWriteOptions o;
    auto written = testing::WriteCaseCheckpoint(*c, c->name + "_mx_", o);
    ASSERT_TRUE(written.ok()) << written.status();
    testing::LocalCluster cluster;
    testing::LocalCluster::Options co;
    co.model_args = {"--model=" + *written};
    co.workers = 2;
    co.router_args = {"--weight-dtype=mxfp4"};
    ASSERT_TRUE(cluster.Start(co).ok()) << cluster.Logs();
    ForwardOptions fo;
    fo.routing = true;
    fo.token_ids = c->token_ids;  // a hash-routed case needs them
    auto r =
        cluster.client().Forward(static_cast<int32_t>(o.layer), c->x.data(),
                                 c->tokens, c->config.hidden, fo);
    ASSERT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
    const testing::RmsError e = testing::MeasureRmsError(r->y, c->y);
    std::printf("mxfp4 2 workers %s: relative RMS %.4f, largest %.3f rms\n",
                c->name.c_str(), e.rel_rms, e.max_over_rms);
    EXPECT_TRUE(testing::RmsClose(r->y, c->y, testing::kMxfp4WeightTol));
    if (c->config.routing == RoutingMode::kExpertChoice) {
      EXPECT_TRUE(testing::SameExpertChoice(*c, r->expert_ids, r->weights,
                                            r->tokens, r->slots));
    } else {
      EXPECT_TRUE(testing::SameTokenRouting(c->top_idx, c->top_w, r->expert_ids,
                                            r->weights, c->tokens,
                                            c->config.top_k, r->slots));
    }
    fs::remove_all(*written);
  }
}

}  // namespace
}  // namespace moe
