// WorkerProcessOptions::FromFlags: every bad flag value is refused with an
// error naming the flag.
#include "worker/worker_options.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe {
namespace {

struct BadCase {
  std::string name;
  std::function<void(WorkerFlags&)> edit;
  std::string message;  // a part of the expected error
};

TEST(WorkerOptionsTest, DefaultsAreValid) {
  auto o = WorkerProcessOptions::FromFlags(WorkerFlags{});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->router, "127.0.0.1:50051");
  EXPECT_GE(o->threads, 1);  // 0: all cores
}

TEST(WorkerOptionsTest, TlsSpellingsAreValid) {
  WorkerFlags f;
  f.tls.ca = "ca.pem";
  f.tls_server_name = "router.example";
  EXPECT_TRUE(WorkerProcessOptions::FromFlags(f).ok());
  f.tls = {"c.pem", "k.pem", ""};
  f.device = "cuda";
  f.threads = 3;
  auto o = WorkerProcessOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->threads, 3);
}

TEST(WorkerOptionsTest, MaxBatchTokensCapsTheRouters) {
  auto o = WorkerProcessOptions::FromFlags(WorkerFlags{});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_batch_tokens, 0);  // the router's
  WorkerFlags f;
  f.max_batch_tokens = 16;
  o = WorkerProcessOptions::FromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->max_batch_tokens, 16);
}

TEST(WorkerOptionsTest, BadValuesNameTheFlag) {
  const std::vector<BadCase> cases = {
      {"router", [](WorkerFlags& f) { f.router = "router"; },
       "--router must be HOST:PORT, got 'router'"},
      {"device", [](WorkerFlags& f) { f.device = "tpu"; },
       "--device must be cpu, cuda or cuda:N, got 'tpu'"},
      {"threads", [](WorkerFlags& f) { f.threads = -1; },
       "--threads must be >= 0 (0: all cores), got -1"},
      {"collective host", [](WorkerFlags& f) { f.collective_host = ""; },
       "--collective-host"},
      {"max batch tokens", [](WorkerFlags& f) { f.max_batch_tokens = -1; },
       "--max-batch-tokens must be >= 0 (0: the router's), got -1"},
      {"cert without key", [](WorkerFlags& f) { f.tls.cert = "c.pem"; },
       "--tls-cert needs --tls-key"},
      {"key without cert", [](WorkerFlags& f) { f.tls.key = "k.pem"; },
       "--tls-key needs --tls-cert"},
      {"server name without TLS",
       [](WorkerFlags& f) { f.tls_server_name = "x"; }, "--tls-server-name"},
  };
  for (const BadCase& c : cases) {
    WorkerFlags f;
    c.edit(f);
    auto o = WorkerProcessOptions::FromFlags(f);
    ASSERT_FALSE(o.ok()) << c.name;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(o.status().message().find(c.message), std::string::npos)
        << c.name << ": " << o.status().message();
  }
}

}  // namespace
}  // namespace moe
