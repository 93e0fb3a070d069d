// moe-router and moe-worker refuse bad flag values at once: a non-zero exit
// within seconds and an error naming the flag, before loading anything.
#include <chrono>
#include <string>
#include <vector>

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
    EXPECT_EQ(r.exit_code, 2) << c.arg << "\n" << r.output;
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
           "--weight-dtype must be auto, f32, bf16, fp8 or mxfp4"},
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
