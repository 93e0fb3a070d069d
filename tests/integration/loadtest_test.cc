// moe-loadtest against a real local service, and the Prometheus endpoints
// moving under load.
#include <cstdio>
#include <fstream>

#include "absl/strings/str_split.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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
