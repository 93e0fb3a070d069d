// moe-loadtest against a real local service, the Prometheus endpoints
// moving under load, and what moe-cli prints about the service.
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/hf_config.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testutil/golden_case.h"
#include "tests/testutil/hf_writer.h"
#include "tests/testutil/http_get.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

using testing::LocalCluster;

using testing::LoadtestBinary;

class LoadtestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new LocalCluster();
    LocalCluster::Options o;
    o.model_args = {"--synthetic", "--hidden=64", "--inter=32",
                    "--experts=8", "--top-k=2",   "--layers=2"};
    o.workers = 2;
    o.router_args = {
        "--metrics-listen=127.0.0.1:0",
        "--metrics-port-file=" + cluster_->dir() + "/metrics_port"};
    ASSERT_TRUE(cluster_->Start(o).ok()) << cluster_->Logs();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  testing::CommandResult Loadtest(std::vector<std::string> args) {
    args.insert(args.begin(),
                {LoadtestBinary(), "--target=" + cluster_->target()});
    return testing::RunCommand(args, std::chrono::seconds(120));
  }
  // stdout only: the progress line goes to stderr, into the same capture;
  // the JSON report is the text from the first '{' on.
  static nlohmann::json Json(const std::string& output) {
    return nlohmann::json::parse(output.substr(output.find("{\n")), nullptr,
                                 false);
  }
  // A safetensors file holding one row x [1, 64], values 0.05·(i % m - m/2).
  static std::string WriteOneRow(const std::string& name, int m) {
    std::vector<float> row(64);
    for (int i = 0; i < 64; ++i)
      row[i] = 0.05f * static_cast<float>(i % m - m / 2);
    SafetensorsWriter w;
    w.AddF32("x", {1, 64}, row);
    const std::string path = cluster_->dir() + "/" + name;
    EXPECT_TRUE(w.WriteFile(path).ok());
    return path;
  }
  // The experts of `layer` that saw tokens during moe-loadtest `args`
  // (their counts reset before and after).
  int ExpertsUsedBy(int32_t layer, std::vector<std::string> args,
                    testing::CommandResult* result) {
    EXPECT_TRUE(cluster_->client()
                    .GetExpertStats(layer, true, std::chrono::seconds(10))
                    .ok());
    *result = Loadtest(std::move(args));
    auto stats = cluster_->client().GetExpertStats(layer, true,
                                                   std::chrono::seconds(10));
    EXPECT_TRUE(stats.ok()) << stats.status();
    int used = 0;
    for (int64_t c : stats->tokens_per_expert()) used += c > 0;
    return used;
  }
  static LocalCluster* cluster_;
};
LocalCluster* LoadtestTest::cluster_ = nullptr;

TEST_F(LoadtestTest, ClosedLoopCountsAddUp) {
  auto r = Loadtest({"-c", "4", "-n", "120", "--tokens=1:9", "--layer=all",
                     "--format=json", "--server-timing"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = Json(r.output);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["requests"], 120);
  EXPECT_EQ(j["ok"].get<int>() + j["errors"].get<int>(), 120);
  int64_t by_code = 0;
  for (auto& [code, n] : j["status_codes"].items()) by_code += n.get<int64_t>();
  EXPECT_EQ(by_code, 120);
  int64_t in_histogram = 0;
  for (auto& b : j["histogram"]) in_histogram += b["count"].get<int64_t>();
  EXPECT_EQ(in_histogram, j["ok"].get<int64_t>());
  const auto& lat = j["latency_ms"];
  EXPECT_LE(lat["min"].get<double>(), lat["p50"].get<double>());
  EXPECT_LE(lat["p50"].get<double>(), lat["p99"].get<double>());
  EXPECT_LE(lat["p99"].get<double>(), lat["max"].get<double>());
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["server_stage_us"]["total"].get<double>(), 0);
}

TEST_F(LoadtestTest, InputReplaysTheFilesRows) {
  // One captured row: every request's tokens are that row, so only its k
  // experts see tokens (synthetic inputs would spread over all 8).
  const std::string path = WriteOneRow("captured.safetensors", 7);
  testing::CommandResult r;
  EXPECT_EQ(ExpertsUsedBy(1,
                          {"-c", "2", "-n", "20", "--tokens=1:9", "--layer=1",
                           "--input=" + path},
                          &r),
            2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rows of another width are refused naming the flag.
  SafetensorsWriter narrow;
  narrow.AddF32("x", {1, 8}, std::vector<float>(8, 1.0f));
  ASSERT_TRUE(narrow.WriteFile(path).ok());
  r = Loadtest({"-n", "1", "--input=" + path});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--input"), std::string::npos) << r.output;
}

// Every request draws fresh rows: 1,000 requests of 8 tokens from a
// 4,096-row capture give expert counts that share no factor above 1 (one
// input per token count would make them all multiples of 1,000), every
// expert the capture routes to runs, and one seed sends the same bytes.
TEST_F(LoadtestTest, InputDrawsFreshRowsForEveryRequest) {
  constexpr int kRows = 4096;
  std::vector<float> rows(kRows * 64);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : rows) v = normal(rng);
  SafetensorsWriter w;
  w.AddF32("x", {kRows, 64}, rows);
  const std::string path = cluster_->dir() + "/capture.safetensors";
  ASSERT_TRUE(w.WriteFile(path).ok());
  // The experts the whole capture routes to, sent once as it is.
  auto& client = cluster_->client();
  ASSERT_TRUE(client.GetExpertStats(1, true, std::chrono::seconds(10)).ok());
  for (int r = 0; r < kRows; r += 256) {
    ASSERT_TRUE(client.Forward(1, rows.data() + r * 64, 256, 64, {}).ok());
  }
  auto captured = client.GetExpertStats(1, true, std::chrono::seconds(10));
  ASSERT_TRUE(captured.ok()) << captured.status();
  // One run's expert counts on layer 1 and its digest.
  auto run = [&](std::vector<std::string> extra, std::vector<int64_t>* counts) {
    std::vector<std::string> args = {
        "-c",         "4",         "-n",       "1000",
        "--tokens=8", "--layer=1", "--digest", "--format=json"};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_TRUE(client.GetExpertStats(1, true, std::chrono::seconds(10)).ok());
    auto r = Loadtest(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto stats = client.GetExpertStats(1, true, std::chrono::seconds(10));
    EXPECT_TRUE(stats.ok()) << stats.status();
    counts->assign(stats->tokens_per_expert().begin(),
                   stats->tokens_per_expert().end());
    auto j = Json(r.output);
    EXPECT_FALSE(j.is_discarded()) << r.output;
    EXPECT_EQ(j.value("ok", 0), 1000) << r.output;
    return j.value("digest", std::string());
  };
  auto common_factor = [](const std::vector<int64_t>& counts) {
    int64_t g = 0;
    for (int64_t c : counts) g = std::gcd(g, c);
    return g;
  };
  std::vector<int64_t> counts, again, other;
  const std::string digest = run({"--input=" + path, "--seed=5"}, &counts);
  ASSERT_EQ(counts.size(), 8u);
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}),
            1000 * 8 * 2);
  EXPECT_EQ(common_factor(counts), 1) << ::testing::PrintToString(counts);
  for (int e = 0; e < 8; ++e) {
    if (captured->tokens_per_expert(e) > 0) {
      EXPECT_GT(counts[e], 0) << "expert " << e << " has captured traffic";
    }
  }
  ASSERT_EQ(digest.size(), 16u);
  EXPECT_EQ(run({"--input=" + path, "--seed=5"}, &again), digest);
  EXPECT_EQ(again, counts);
  EXPECT_NE(run({"--input=" + path, "--seed=6"}, &other), digest);
  // Synthetic inputs are drawn afresh the same way.
  const std::string synthetic = run({"--seed=5"}, &counts);
  EXPECT_EQ(common_factor(counts), 1) << ::testing::PrintToString(counts);
  for (int e = 0; e < 8; ++e) EXPECT_GT(counts[e], 0) << "expert " << e;
  EXPECT_EQ(run({"--seed=5"}, &again), synthetic);
  EXPECT_NE(synthetic, digest);
}

// An open loop far beyond what the service answers with one request in
// flight: the report says how far behind it fell, and the figures add up.
TEST_F(LoadtestTest, OpenLoopBehindTheOfferedRateSaysSo) {
  const std::vector<std::string> flood = {"--rps=20000", "-z", "1s",
                                          "--max-outstanding=1", "--tokens=8"};
  auto args = flood;
  args.push_back("--format=json");
  auto r = Loadtest(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = Json(r.output);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  const int64_t scheduled = j["scheduled"], sent = j["sent"],
                never_sent = j["never_sent"], late = j["late"];
  EXPECT_NEAR(scheduled, 20000, 2) << r.output;
  EXPECT_EQ(scheduled, sent + never_sent) << r.output;
  EXPECT_GT(never_sent, 0) << r.output;
  EXPECT_EQ(j["requests"].get<int64_t>(), sent) << r.output;
  EXPECT_GT(late, 0) << r.output;
  EXPECT_LE(late, sent) << r.output;
  EXPECT_GT(j["held_by_cap"].get<int64_t>(), 0) << r.output;
  EXPECT_EQ(j["offered_rps"].get<double>(), 20000);
  EXPECT_LT(j["achieved_rps"].get<double>(), 20000 * 0.5) << r.output;
  EXPECT_NEAR(j["achieved_rps"].get<double>(), sent / 1.0, sent * 0.1);
  // Latency counts from the scheduled time by default: it holds the wait
  // for the send.
  EXPECT_EQ(j["latency_from"], "scheduled");
  EXPECT_GE(j["latency_ms"]["max"].get<double>(),
            j["send_delay_ms"]["max"].get<double>());
  args.push_back("--latency-from=sent");
  auto from_sent = Json(Loadtest(args).output);
  ASSERT_FALSE(from_sent.is_discarded());
  EXPECT_EQ(from_sent["latency_from"], "sent");
  EXPECT_LT(from_sent["latency_ms"]["p50"].get<double>(),
            from_sent["send_delay_ms"]["p50"].get<double>());
  // The text report says all of it in its first lines.
  auto text = Loadtest(flood);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  const size_t first = text.output.find("open loop: offered 20000.0 req/s");
  ASSERT_NE(first, std::string::npos) << text.output;
  const std::string head = text.output.substr(first, 400);
  for (const char* want : {"achieved", "BEHIND THE OFFERED RATE", "never sent",
                           "late by more than 1.0 ms", "scheduled send time"}) {
    EXPECT_NE(head.find(want), std::string::npos) << want << "\n" << head;
  }
  EXPECT_LT(first, text.output.find("latency ms")) << text.output;
}

TEST_F(LoadtestTest, ErrorsAreCountedByCode) {
  auto r = Loadtest({"-c", "2", "-n", "30", "--layer=9", "--format=json"});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // requests failed
  auto j = Json(r.output);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["status_codes"]["NOT_FOUND"], 30);
  EXPECT_EQ(j["errors"], 30);
  ASSERT_FALSE(j["error_messages"].empty());
  EXPECT_NE(j["error_messages"][0].get<std::string>().find("layer"),
            std::string::npos);
  // Tolerated failures keep the exit code at 0.
  auto tolerated =
      Loadtest({"-c", "2", "-n", "10", "--layer=9", "--max-error-rate=1"});
  EXPECT_EQ(tolerated.exit_code, 0) << tolerated.output;
}

TEST_F(LoadtestTest, TextReportAndP99Gate) {
  auto r = Loadtest({"-c", "2", "-z", "1s", "--tokens=4"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* want : {"throughput", "requests/s", "tokens/s", "p50", "p99",
                           "latency histogram", "status codes: OK="}) {
    EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n"
                                                      << r.output;
  }
  // Progress lines go to stderr (a pipe here: whole lines).
  EXPECT_NE(r.output.find("[c=2"), std::string::npos) << r.output;
  auto gate = Loadtest({"-c", "2", "-n", "20", "--max-p99-ms=0.000001"});
  EXPECT_EQ(gate.exit_code, 2) << gate.output;
}

TEST_F(LoadtestTest, CallerRoutingSpreadsOneRowOverTheExperts) {
  // One captured row: the service's gate sends all its tokens to the same k
  // experts; a random routing (or random logits) per request spreads them
  // over all 8, so the experts used show what routed.
  const std::string path = WriteOneRow("one_row.safetensors", 5);
  auto experts_used = [&](const std::string& mode) {
    testing::CommandResult r;
    const int used = ExpertsUsedBy(
        0,
        {"-c", "2", "-n", "60", "--tokens=1:4", "--layer=0", "--input=" + path,
         "--caller-routing=" + mode, "--format=json"},
        &r);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto j = Json(r.output);
    EXPECT_EQ(j["ok"], 60) << r.output;
    EXPECT_EQ(j["caller_routing"], mode) << r.output;
    return used;
  };
  EXPECT_EQ(experts_used("none"), 2);
  EXPECT_EQ(experts_used("routing"), 8);
  EXPECT_EQ(experts_used("logits"), 8);
  // The text report says which; a mode it does not know is refused.
  auto r = Loadtest({"-n", "5", "--caller-routing=routing"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("caller routing: every request sends a random "
                          "routing"),
            std::string::npos)
      << r.output;
  r = Loadtest({"-n", "1", "--caller-routing=gate"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--caller-routing"), std::string::npos) << r.output;
}

TEST_F(LoadtestTest, OpenLoopPoissonSendsTheRequestedCount) {
  auto r =
      Loadtest({"--rps=200", "--arrival=poisson", "-n", "60", "--format=json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = Json(r.output);
  EXPECT_EQ(j["mode"], "open");
  EXPECT_EQ(j["requests"], 60);
  EXPECT_EQ(j["scheduled"], 60);
  EXPECT_EQ(j["sent"], 60);
  EXPECT_EQ(j["never_sent"], 0);
}

TEST_F(LoadtestTest, StreamMode) {
  auto r = Loadtest({"--stream", "-c", "3", "-n", "45", "--format=json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = Json(r.output);
  EXPECT_EQ(j["ok"], 45);
  EXPECT_TRUE(j["stream"].get<bool>());
}

TEST_F(LoadtestTest, SweepWritesOneCsvRowPerLevel) {
  auto r = Loadtest({"--concurrency-range=1:3:2", "-n", "20", "--format=csv"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines;
  for (absl::string_view l : absl::StrSplit(r.output, '\n')) {
    if (l.rfind("Concurrency,", 0) == 0 || (!l.empty() && std::isdigit(l[0]))) {
      lines.emplace_back(l);
    }
  }
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_EQ(lines[1].substr(0, 2), "1,");
  EXPECT_EQ(lines[2].substr(0, 2), "3,");
}

TEST_F(LoadtestTest, MetricsMoveUnderLoad) {
  int port = 0;
  std::ifstream(cluster_->dir() + "/metrics_port") >> port;
  ASSERT_GT(port, 0);
  auto before = testing::HttpGet(port, "/metrics");
  ASSERT_TRUE(before.ok()) << before.status();
  const std::string ok_series =
      R"(moe_requests_total{code="OK",method="Forward"})";
  const double ok0 = std::max(0.0, testing::MetricValue(*before, ok_series));
  const double steps0 =
      std::max(0.0, testing::MetricValue(*before, "moe_step_tokens_count"));
  EXPECT_EQ(testing::MetricValue(*before, "moe_workers_ready"), 2);
  auto r = Loadtest({"-c", "4", "-n", "40"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto after = testing::HttpGet(port, "/metrics");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(testing::MetricValue(*after, ok_series), ok0 + 40);
  EXPECT_GT(testing::MetricValue(*after, "moe_step_tokens_count"), steps0);
  EXPECT_GT(testing::MetricValue(
                *after, R"(moe_stage_duration_seconds_count{stage="experts"})"),
            0);
  EXPECT_NE(after->find("moe_request_duration_seconds_bucket"),
            std::string::npos);
  EXPECT_NE(after->find(R"(moe_layer_load_entropy{layer="0"})"),
            std::string::npos);
}

// Open-loop flood against a router whose queue holds one request: the
// RESOURCE_EXHAUSTED answers are counted apart, with their own latency, and
// none is lost: ok + refused + other errors == requests.
TEST(LoadtestRefusals, FloodRefusalsAreCountedApart) {
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = {"--synthetic", "--hidden=256", "--inter=128",
                  "--experts=8", "--top-k=2",    "--layers=1"};
  o.workers = 0;
  o.router_args = {"--max-batch-tokens=64", "--max-queue-tokens=64"};
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  auto r =
      testing::RunCommand({LoadtestBinary(), "--target=" + cluster.target(),
                           "--rps=3000", "-n", "600", "--tokens=64",
                           "--no_retry", "--max-error-rate=1", "--format=json"},
                          std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find("{\n")), nullptr,
                                 false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  const int64_t requests = j["requests"], ok = j["ok"], errors = j["errors"];
  const int64_t refused = j["refused"]["count"];
  EXPECT_EQ(requests, 600);
  EXPECT_GT(refused, 0) << r.output;
  EXPECT_GT(ok, 0) << r.output;
  EXPECT_EQ(j["status_codes"].value("RESOURCE_EXHAUSTED", int64_t{0}), refused);
  const int64_t other = errors - refused;
  EXPECT_GE(other, 0);
  EXPECT_EQ(ok + refused + other, requests);
  int64_t by_code = 0;
  for (auto& [code, n] : j["status_codes"].items()) by_code += n.get<int64_t>();
  EXPECT_EQ(by_code, requests);
  // The histogram is of the admitted requests that succeeded only.
  int64_t in_histogram = 0;
  for (auto& b : j["histogram"]) in_histogram += b["count"].get<int64_t>();
  EXPECT_EQ(in_histogram, ok);
  EXPECT_LE(j["refused"]["p50_ms"].get<double>(),
            j["refused"]["p99_ms"].get<double>());
  EXPECT_LE(j["refused"]["p99_ms"].get<double>(),
            j["refused"]["max_ms"].get<double>());
  EXPECT_GT(j["refused"]["p50_ms"].get<double>(), 0);
  std::printf(
      "flood: %ld ok, %ld refused (p50 %.2f ms, p99 %.2f ms), %ld "
      "other; admitted p50 %.2f ms, p99 %.2f ms\n",
      static_cast<long>(ok), static_cast<long>(refused),
      j["refused"]["p50_ms"].get<double>(),
      j["refused"]["p99_ms"].get<double>(), static_cast<long>(other),
      j["latency_ms"]["p50"].get<double>(),
      j["latency_ms"]["p99"].get<double>());
}

// ERNIE-4.5-VL (its text experts ernie45_like, its vision experts filler)
// behind a router with 2 workers: moe-loadtest sends every request with
// token types, half the rows image tokens, and every request is answered,
// the text and the vision experts each seeing rows; caller routing with
// image rows is refused before the run, and runs with --vision-fraction=0.
TEST(LoadtestModality, ImageRowsReachTheVisionExperts) {
  auto c = testing::LoadGoldenCase(testing::GoldenDir() +
                                   "/ernie45_like.safetensors");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string dir = testing::MakeTempDir("loadtest_ernie_vl_");
  testing::HfWriteOptions w;
  w.family = HfFamily::kErnie45VlMoe;
  ASSERT_TRUE(testing::WriteHfCheckpoint(*c, w, dir).ok());
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = {"--model=" + dir};
  o.workers = 2;
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  auto info = cluster.client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_EQ(info->vision_layers().count(1), 1u);
  const int32_t vision = info->vision_layers().at(1);
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {LoadtestBinary(),
                                     "--target=" + cluster.target(),
                                     "--layer=1",
                                     "-n",
                                     "40",
                                     "--tokens=8",
                                     "--format=json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::RunCommand(args, std::chrono::seconds(120));
  };
  auto r = run({"--vision_fraction=0.5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find("{\n")), nullptr,
                                 false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["ok"].get<int64_t>(), 40) << r.output;
  for (const int32_t layer : {1, vision}) {
    auto s = cluster.client().GetExpertStats(layer, /*reset=*/true);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_GT(s->tokens(), 0) << "layer " << layer;
  }
  auto refused = run({"--caller-routing=routing"});
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("--vision-fraction=0"), std::string::npos)
      << refused.output;
  auto text = run({"--caller-routing=routing", "--vision_fraction=0"});
  EXPECT_EQ(text.exit_code, 0) << text.output;
}

// moe-cli's info line, plurals and usage; its info on the health-only port
// (told what port it is); health --wait on a port nobody serves gives up
// at its deadline.
TEST(MoeCli, InfoUsageAndTheHealthPort) {
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = {"--synthetic", "--hidden=32", "--inter=16",
                  "--experts=4", "--top-k=1",   "--layers=1"};
  o.workers = 0;
  o.router_args = {"--health-listen=127.0.0.1:0",
                   "--health-port-file=" + cluster.dir() + "/health_port"};
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  auto info = testing::RunCommand(
      {testing::CliBinary(), "info", "--target=" + cluster.target()},
      std::chrono::seconds(20));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(
      info.output.find("layer: H=32 I=16 E=4 k=1 shared=0 latent=none act=silu "
                       "gated=yes weights="),
      std::string::npos)
      << info.output;
  EXPECT_NE(info.output.find("in 1 MoE layer)"), std::string::npos)
      << info.output;
  auto fwd = testing::RunCommand(
      {testing::CliBinary(), "forward", "--target=" + cluster.target(),
       "--layer=0", "--random=1", "--timing"},
      std::chrono::seconds(20));
  ASSERT_EQ(fwd.exit_code, 0) << fwd.output;
  EXPECT_NE(fwd.output.find("layer 0: 1 token x 32"), std::string::npos)
      << fwd.output;
  EXPECT_NE(fwd.output.find("(step of 1 token from 1 request)"),
            std::string::npos)
      << fwd.output;
  auto help = testing::RunCommand({testing::CliBinary(), "--help"},
                                  std::chrono::seconds(20));
  const std::string usage = help.output.substr(0, help.output.find("\n\n"));
  for (const char* flag : {"--routing-file", "--router-logits-file", "--shared",
                           "--return-router-logits", "--token-ids", "--wait"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag << "\n" << usage;
  }
  int health_port = 0;
  std::ifstream(cluster.dir() + "/health_port") >> health_port;
  ASSERT_GT(health_port, 0);
  auto on_health =
      testing::RunCommand({testing::CliBinary(), "info",
                           absl::StrCat("--target=127.0.0.1:", health_port)},
                          std::chrono::seconds(20));
  EXPECT_EQ(on_health.exit_code, 12) << on_health.output;  // UNIMPLEMENTED
  EXPECT_NE(on_health.output.find("health-only port (--health-listen"),
            std::string::npos)
      << on_health.output;
  EXPECT_NE(on_health.output.find("the API is on the router's --listen"),
            std::string::npos)
      << on_health.output;
  // Nothing listens on the health port once the router is gone: --wait
  // asks until its deadline, then fails as a single call would.
  cluster.router().Stop();
  const auto t0 = std::chrono::steady_clock::now();
  auto wait = testing::RunCommand(
      {testing::CliBinary(), "health", "--wait=2s", "--timeout-ms=500",
       absl::StrCat("--target=127.0.0.1:", health_port)},
      std::chrono::seconds(20));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_EQ(wait.exit_code, 14) << wait.output;  // UNAVAILABLE
  EXPECT_GE(took, 2.0);
  EXPECT_LT(took, 8.0);
}

TEST(WorkerMetrics, WorkerEndpointCountsSteps) {
  LocalCluster cluster;
  LocalCluster::Options o;
  o.model_args = {"--synthetic", "--hidden=32", "--inter=16", "--experts=4",
                  "--top-k=1"};
  o.workers = 1;
  ASSERT_TRUE(cluster.Start(o).ok()) << cluster.Logs();
  // One more worker process with metrics; the router wants one, so this one
  // stands by until the first leaves.
  auto w = testing::ChildProcess::Start(
      {testing::WorkerBinary(), "--router=" + cluster.target(), "--threads=1",
       "--metrics-listen=127.0.0.1:0",
       "--metrics-port-file=" + cluster.dir() + "/wport"},
      cluster.dir() + "/standby.log");
  ASSERT_TRUE(w.ok());
  cluster.KillWorker(0, SIGTERM);
  ASSERT_TRUE(cluster.WaitReady(std::chrono::seconds(30)).ok())
      << cluster.Logs();
  std::vector<float> x(5 * 32, 0.25f);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(cluster.client().Forward(0, x.data(), 5, 32, {}).ok());
  int port = 0;
  std::ifstream(cluster.dir() + "/wport") >> port;
  auto text = testing::HttpGet(port, "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(testing::MetricValue(*text, R"(moe_worker_steps_total{code="OK"})"),
            3);
  EXPECT_EQ(testing::MetricValue(*text, "moe_worker_ready"), 1);
  EXPECT_EQ(testing::MetricValue(*text, "moe_worker_expert_rows_sum"),
            15);  // 3 x 5 rows, k = 1
}

}  // namespace
}  // namespace moe
