// Redundant experts end to end (engine/placement.h): every golden case,
// written as a Hugging Face checkpoint, through a router with 2 and 3 CPU
// workers and --redundant-experts P and 2P gives the same bits and routing
// as the same router without replicas. Also the placement's way in and out:
// `moe-cli stats --save` -> --expert-load -> `moe-cli placement` ->
// --expert-placement, and the flags' refusals.
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/placement.h"
#include "gtest/gtest.h"
#include "tests/testutil/compare.h"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

struct Answer {
  std::vector<float> y;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Serves `dir` with P workers and `extra` router flags; one request of x.
Answer Serve(const std::string& dir, int P,
             const std::vector<std::string>& extra,
             const testing::GoldenCase& c, int64_t layer) {
  testing::LocalCluster cluster;
  testing::LocalCluster::Options co;
  co.model_args = {"--model=" + dir};
  co.workers = P;
  co.router_args = extra;
  Answer a;
  absl::Status s = cluster.Start(co);
  EXPECT_TRUE(s.ok()) << s << cluster.Logs();
  if (!s.ok()) return a;
  ForwardOptions fo;
  fo.routing = true;
  fo.token_ids = c.token_ids;
  auto r = cluster.client().Forward(static_cast<int32_t>(layer), c.x.data(),
                                    c.tokens, c.config.hidden, fo);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << cluster.Logs();
  if (!r.ok()) return a;
  a.y = r->y;
  a.ids = r->expert_ids;
  a.weights = r->weights;
  return a;
}

TEST(RedundantExperts, EveryGoldenCaseKeepsItsBits) {
  for (const std::string& path : testing::RequireGoldenFiles()) {
    auto c = testing::LoadGoldenCase(path);
    ASSERT_TRUE(c.ok()) << c.status();
    SCOPED_TRACE(c->name);
    const testing::HfWriteOptions o;  // the case at its default layer
    auto written = testing::WriteCaseCheckpoint(*c, c->name + "_eplb_", o);
    ASSERT_TRUE(written.ok()) << written.status();
    const std::string& dir = *written;
    const Answer base = Serve(dir, 2, {}, *c, o.layer);
    ASSERT_FALSE(base.y.empty());
    EXPECT_TRUE(testing::AllClose(base.y, c->y, testing::kF32Tol));
    for (int P : {2, 3}) {
      for (int R : {P, 2 * P}) {
        SCOPED_TRACE(absl::StrCat("P=", P, " R=", R));
        const Answer a = Serve(
            dir, P, {absl::StrCat("--redundant-experts=", R)}, *c, o.layer);
        EXPECT_EQ(a.y, base.y) << "bits differ with replicas";
        EXPECT_EQ(a.ids, base.ids);
        EXPECT_EQ(a.weights, base.weights);
      }
    }
    fs::remove_all(dir);
  }
}

TEST(RedundantExperts, LoadFromStatsPlacesReplicasOnTheHotExperts) {
  // A synthetic model whose tokens go mostly to a few experts: its stats,
  // saved, place the next router's replicas.
  const std::vector<std::string> model = {"--synthetic", "--hidden=64",
                                          "--inter=32",  "--experts=8",
                                          "--top-k=2",   "--seed=3"};
  testing::LocalCluster first;
  testing::LocalCluster::Options co;
  co.model_args = model;
  co.workers = 2;
  ASSERT_TRUE(first.Start(co).ok()) << first.Logs();
  // Every token the same row: the same two experts each time.
  const int64_t n = 32, H = 64;
  std::vector<float> x(n * H);
  for (int64_t i = 0; i < n * H; ++i) x[i] = 0.01f * static_cast<float>(i % H);
  ForwardOptions fo;
  fo.routing = true;
  auto r = first.client().Forward(0, x.data(), n, H, fo);
  ASSERT_TRUE(r.ok()) << r.status();
  const int32_t hot = r->expert_ids[0];
  const std::string load = first.dir() + "/load.json";
  auto saved =
      testing::RunCommand({testing::CliBinary(), "stats",
                           "--target=" + first.target(), "--save=" + load},
                          std::chrono::seconds(30));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  EXPECT_NE(saved.output.find("rows per worker"), std::string::npos)
      << saved.output;

  testing::LocalCluster second;
  co.router_args = {"--redundant-experts=2", "--expert-load=" + load};
  ASSERT_TRUE(second.Start(co).ok()) << second.Logs();
  auto shown = testing::RunCommand(
      {testing::CliBinary(), "placement", "--target=" + second.target()},
      std::chrono::seconds(30));
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  auto placement = PlacementFromJson(shown.output);
  ASSERT_TRUE(placement.ok()) << placement.status() << shown.output;
  EXPECT_EQ(placement->redundant, 2);
  ASSERT_EQ(placement->layers.count(0), 1u);
  ASSERT_TRUE(CheckPlacement(placement->layers[0], 8, 2, 2).ok());
  const ReplicaMap m = MakeReplicaMap(placement->layers[0], 8);
  EXPECT_EQ(m.replicas(hot), 2) << shown.output;
  // The same answer as without replicas, and the hot expert's rows split.
  auto again = second.client().Forward(0, x.data(), n, H, fo);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->y, r->y);
  auto stats =
      second.client().GetExpertStats(0, false, std::chrono::seconds(10));
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->rows_per_worker_size(), 2);
  EXPECT_EQ(stats->rows_per_worker(0), stats->rows_per_worker(1))
      << "both tokens' experts are replicated: the rows split evenly";

  // The printed placement pins a third router to the same slots.
  const std::string pinned = second.dir() + "/placement.json";
  std::ofstream(pinned) << shown.output;
  testing::LocalCluster third;
  co.router_args = {"--expert-placement=" + pinned};
  ASSERT_TRUE(third.Start(co).ok()) << third.Logs();
  auto shown3 = testing::RunCommand(
      {testing::CliBinary(), "placement", "--target=" + third.target()},
      std::chrono::seconds(30));
  ASSERT_EQ(shown3.exit_code, 0) << shown3.output;
  EXPECT_EQ(shown3.output, shown.output);
  auto pinned_answer = third.client().Forward(0, x.data(), n, H, fo);
  ASSERT_TRUE(pinned_answer.ok()) << pinned_answer.status();
  EXPECT_EQ(pinned_answer->y, r->y);
}

TEST(RedundantExperts, BadPlacementsAreRefusedNamingTheFlag) {
  const std::string dir = testing::MakeTempDir("eplb_flags_");
  const std::string bad = dir + "/bad.json";
  // Expert 7 in no slot.
  std::ofstream(bad)
      << R"({"redundant_experts":2,"layers":{"0":[[0,1,2,3,4],[5,6,0,1,2]]}})";
  auto run = testing::RunCommand(
      {testing::RouterBinary(), "--synthetic", "--hidden=64", "--inter=32",
       "--experts=8", "--top-k=2", "--listen=127.0.0.1:0", "--num-workers=2",
       "--expert-placement=" + bad},
      std::chrono::seconds(30));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("--expert-placement"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("expert 7 is in no slot"), std::string::npos)
      << run.output;
  run = testing::RunCommand(
      {testing::RouterBinary(), "--synthetic", "--listen=127.0.0.1:0",
       "--num-workers=2", "--redundant-experts=3"},
      std::chrono::seconds(30));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("--redundant-experts"), std::string::npos)
      << run.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe
