// The line the router logs once serving: the plain case, and each part that
// only shows when it applies (TLS, mutual TLS for the workers, the probes'
// port, a dispatch dtype other than auto, bearer tokens).
#include "server/listening_line.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

RouterOptions Options() {
  RouterOptions o;
  o.num_workers = 2;
  o.max_batch_tokens = 4096;
  o.batch_window = std::chrono::microseconds(500);
  o.max_inflight_steps = 2;
  return o;
}

TEST(ListeningLine, PlainRouterWithoutWorkersPortOrProbes) {
  RouterOptions o = Options();
  o.num_workers = 0;
  EXPECT_EQ(ListeningLine(o, {.api = 50051}, false),
            "router listening on port 50051 (0 workers, max batch 4096 "
            "tokens, window 500 us, 2 steps in flight)");
}

TEST(ListeningLine, WorkersAndProbesPortsWithoutTls) {
  EXPECT_EQ(
      ListeningLine(Options(),
                    {.api = 50051, .workers = 50052, .health = 50053}, false),
      "router listening on port 50051 (2 workers on port 50052, max "
      "batch 4096 tokens, window 500 us, 2 steps in flight, health on "
      "port 50053)");
}

TEST(ListeningLine, TlsMutualTlsDispatchDtypeAndTokens) {
  RouterOptions o = Options();
  o.tls.cert = "cert.pem";
  o.tls.key = "key.pem";
  o.tls.ca = "ca.pem";
  o.dispatch_dtype = "fp8";
  o.max_inflight_steps = 3;
  EXPECT_EQ(ListeningLine(o, {.api = 443, .workers = 444}, true),
            "router listening on port 443 (TLS) (2 workers on port 444 "
            "(mutual TLS), max batch 4096 tokens, window 500 us, 3 steps in "
            "flight, --dispatch-dtype fp8, bearer tokens required)");
  // Mutual TLS only where the workers' port serves.
  EXPECT_EQ(ListeningLine(o, {.api = 443}, false),
            "router listening on port 443 (TLS) (2 workers, max batch 4096 "
            "tokens, window 500 us, 3 steps in flight, --dispatch-dtype fp8)");
}

}  // namespace
}  // namespace moe
