// The router's reach checks: listen addresses and TLS pairing, and worker
// registration closed unless it is loopback or knowingly left open.
#include "server/router_address_checks.h"

#include <string>

#include "gtest/gtest.h"

namespace moe {
namespace {

// Refused with INVALID_ARGUMENT and a message that contains `part`.
void ExpectRefused(const absl::Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(part), std::string::npos) << status;
}

TEST(RouterAddressChecksTest, ListenNeedsAnAddressAndWholeKeyPair) {
  RouterFlags f;
  EXPECT_TRUE(CheckListenAddresses(f).ok());
  f.listen.clear();
  ExpectRefused(CheckListenAddresses(f), "--listen");

  RouterFlags cert_only;
  cert_only.tls.cert = "c.pem";
  ExpectRefused(CheckListenAddresses(cert_only), "--tls-cert needs --tls-key");
  RouterFlags key_only;
  key_only.tls.key = "k.pem";
  ExpectRefused(CheckListenAddresses(key_only), "--tls-key needs --tls-cert");
}

TEST(RouterAddressChecksTest, MutualTlsNeedsKeyPairAndWorkerPort) {
  RouterFlags f;
  f.tls.ca = "ca.pem";
  ExpectRefused(CheckListenAddresses(f), "needs --tls-cert and --tls-key");
  f.tls.cert = "c.pem";
  f.tls.key = "k.pem";
  ExpectRefused(CheckListenAddresses(f), "needs --worker-listen");
  f.worker_listen = "0.0.0.0:50053";
  EXPECT_TRUE(CheckListenAddresses(f).ok());
  // Without workers there is no worker port to secure.
  f.worker_listen.clear();
  f.num_workers = 0;
  EXPECT_TRUE(CheckListenAddresses(f).ok());
}

TEST(RouterAddressChecksTest, RegistrationOpenOnlyOnLoopbackOrWhenAsked) {
  RouterFlags f;  // --listen 0.0.0.0:50051, two workers, nothing closing it
  ExpectRefused(CheckWorkerRegistration(f), "worker registration on 0.0.0.0");
  f.listen = "localhost:50051";
  EXPECT_TRUE(CheckWorkerRegistration(f).ok());
  // The worker port, when given, is the one that counts.
  f.worker_listen = "10.0.0.7:50053";
  ExpectRefused(CheckWorkerRegistration(f), "(--worker-listen)");
  RouterFlags closed = f;
  closed.worker_token_file = "worker-token";
  EXPECT_TRUE(CheckWorkerRegistration(closed).ok());
  closed = f;
  closed.tls.ca = "ca.pem";
  EXPECT_TRUE(CheckWorkerRegistration(closed).ok());
  closed = f;
  closed.insecure_workers = true;
  EXPECT_TRUE(CheckWorkerRegistration(closed).ok());
  closed = f;
  closed.num_workers = 0;
  EXPECT_TRUE(CheckWorkerRegistration(closed).ok());
}

TEST(RouterAddressChecksTest, LoopbackAddresses) {
  for (const char* a :
       {"127.0.0.1:0", "127.1.2.3:50051", "localhost:50051", "LOCALHOST:1",
        "[::1]:50051", "unix:/tmp/moe.sock", "unix-abstract:moe"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a :
       {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.7:50051",
        "127.example.com:1", "localhost.evil.com:1", "[::1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

}  // namespace
}  // namespace moe
