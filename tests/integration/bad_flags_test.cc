// Every binary refuses a usage error at once: exit 64 (kExitUsage) within
// seconds and an error naming the flag, before loading or connecting to
// anything. moe-router and moe-worker check their flags' values too.
#include <chrono>
#include <string>
#include <vector>

#include "core/flag_help.h"
#include "gtest/gtest.h"
#include "tests/testutil/child_process.h"
#include "tests/testutil/local_cluster.h"

namespace moe {
namespace {

struct BadFlag {
  std::string arg;
  std::string names;  // expected in the output
};

void ExpectRefused(const std::string& binary, std::vector<std::string> base,
                   const std::vector<BadFlag>& cases) {
  for (const BadFlag& c : cases) {
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), base.begin(), base.end());
    argv.push_back(c.arg);
    const auto start = std::chrono::steady_clock::now();
    testing::CommandResult r =
        testing::RunCommand(argv, std::chrono::seconds(20));
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.exit_code, kExitUsage) << c.arg << "\n" << r.output;
    EXPECT_LT(took, std::chrono::seconds(10)) << c.arg;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.arg << "\n"
                                                         << r.output;
  }
}

TEST(BadFlagsTest, RouterRefusesBadValues) {
  ExpectRefused(
      testing::RouterBinary(), {"--synthetic", "--listen=127.0.0.1:0"},
      {
          {"--num-workers=-1", "--num-workers must be between 0 and 1024"},
          {"--device=tpu", "--device must be cpu, cuda or cuda:N, got 'tpu'"},
          {"--weight-dtype=f16",
           "--weight-dtype must be auto, f32, bf16, fp8, mxfp4 or nvfp4"},
          {"--step-timeout-ms=-5", "--step-timeout-ms must be >= 1"},
          {"--max-batch-tokens=0", "--max-batch-tokens must be >= 1"},
          {"--max-request-tokens=100000", "--max-request-tokens must be"},
          {"--batch-window-us=-1", "--batch-window-us must be >= 0"},
          {"--max-inflight-steps=0", "--max-inflight-steps must be >= 1"},
          {"--threads=-1", "--threads must be >= 0"},
          {"--max-concurrent-streams=0", "--max-concurrent-streams"},
          {"--max-message-bytes=-1", "--max-message-bytes"},
          {"--tls-cert=/nonexistent.pem", "--tls-cert needs --tls-key"},
          {"--tls-key=/nonexistent.pem", "--tls-key needs --tls-cert"},
          {"--top-k=99", "top"},
      });
}

TEST(BadFlagsTest, RouterNeedsAModel) {
  ExpectRefused(testing::RouterBinary(), {"--listen=127.0.0.1:0"},
                {{"--num-workers=0", "give --model DIR or --synthetic"}});
}

TEST(BadFlagsTest, WorkerRefusesBadValues) {
  ExpectRefused(
      testing::WorkerBinary(), {"--router=127.0.0.1:1"},
      {
          {"--device=tpu", "--device must be cpu, cuda or cuda:N, got 'tpu'"},
          {"--threads=-1", "--threads must be >= 0"},
          {"--router=nohost", "--router must be HOST:PORT"},
          {"--collective-host=", "--collective-host"},
          {"--max-batch-tokens=-1", "--max-batch-tokens must be >= 0"},
          {"--tls-cert=/nonexistent.pem", "--tls-cert needs --tls-key"},
          {"--tls-key=/nonexistent.pem", "--tls-key needs --tls-cert"},
          {"--tls-server-name=router", "--tls-server-name needs TLS"},
      });
}

// What every binary's parse refuses: an unknown flag (with or without a
// value), a value that is not of its flag's type (`number_flag` takes an
// integer), a flag left without its value, and `more`.
void ExpectUsageErrors(const std::string& binary,
                       const std::vector<std::string>& base,
                       const std::string& number_flag,
                       std::vector<BadFlag> more = {}) {
  std::vector<BadFlag> cases = {
      {"--no-such-flag", "unknown flag --no-such-flag"},
      {"--no-such-flag=1", "unknown flag --no-such-flag"},
      {"--" + number_flag + "=many", "--" + number_flag + ": "},
      {"--" + number_flag, "--" + number_flag + " needs a value"},
  };
  cases.insert(cases.end(), more.begin(), more.end());
  ExpectRefused(binary, base, cases);
}

// A value without its flag would be ignored: the binaries that take flags
// only refuse it.
const BadFlag kStray = {"stray", "unexpected argument 'stray'"};

TEST(UsageErrorTest, Router) {
  ExpectUsageErrors(testing::RouterBinary(),
                    {"--synthetic", "--listen=127.0.0.1:0"}, "threads",
                    {kStray});
}

TEST(UsageErrorTest, Worker) {
  ExpectUsageErrors(testing::WorkerBinary(), {"--router=127.0.0.1:1"},
                    "threads", {kStray});
}

TEST(UsageErrorTest, Cli) {
  ExpectUsageErrors(testing::CliBinary(), {"info", "--target=127.0.0.1:1"},
                    "timeout-ms", {{"frobnicate", "usage: moe-cli"}});
  ExpectRefused(testing::CliBinary(), {"--target=127.0.0.1:1"},
                {{"--layer=0", "usage: moe-cli"}});  // no command
}

TEST(UsageErrorTest, Loadtest) {
  ExpectUsageErrors(testing::LoadtestBinary(), {"--target=127.0.0.1:1"},
                    "concurrency", {kStray, {"--format=xml", "--format"}});
}

TEST(UsageErrorTest, Bench) {
  ExpectUsageErrors(MOE_BENCH_BIN, {"--synthetic"}, "tokens",
                    {kStray, {"--isa=sse9", "--isa sse9"}});
  ExpectRefused(MOE_BENCH_BIN, {},
                {{"--tokens=8", "give --model DIR or --synthetic"}});
}

TEST(UsageErrorTest, GemmBench) {
  ExpectUsageErrors(MOE_GEMM_BENCH_BIN, {}, "rows",
                    {kStray, {"--rows=0", "--rows"}});
}

TEST(UsageErrorTest, WireBench) {
  ExpectUsageErrors(MOE_WIRE_BENCH_BIN, {}, "reps",
                    {kStray, {"--reps=0", "--reps >= 1"}});
}

TEST(UsageErrorTest, AbuseClient) {
  ExpectUsageErrors(MOE_ABUSE_CLIENT_BIN, {"--target=127.0.0.1:1"}, "hidden",
                    {kStray});
}

// --help prints the binary's own flags as users spell them, each with its
// description, and exits 0 (Abseil's printed "No flags matched" and exit 1).
TEST(HelpTest, EveryBinaryListsItsFlagsAndExitsZero) {
  struct Want {
    std::string binary, flag, description;
  };
  for (const Want& w : std::vector<Want>{
           {testing::RouterBinary(), "--num-workers=", "expert workers P"},
           {testing::WorkerBinary(), "--health-listen", "liveness"},
           {testing::CliBinary(), "--target", ""},
           {testing::LoadtestBinary(), "--concurrency", ""},
       }) {
    for (const char* arg : {"--help", "--helpfull"}) {
      testing::CommandResult r =
          testing::RunCommand({w.binary, arg}, std::chrono::seconds(20));
      EXPECT_EQ(r.exit_code, 0) << w.binary << " " << arg << "\n" << r.output;
      EXPECT_NE(r.output.find("  " + w.flag), std::string::npos)
          << w.binary << "\n"
          << r.output;
      EXPECT_NE(r.output.find(w.description), std::string::npos) << w.binary;
      EXPECT_EQ(r.output.find("No flags matched"), std::string::npos);
      // Abseil's own flags are not the binary's options.
      EXPECT_EQ(r.output.find("--flagfile"), std::string::npos) << w.binary;
    }
  }
}

}  // namespace
}  // namespace moe
