#include "proto/connection_hints.h"

#include "gtest/gtest.h"

namespace moe {
namespace {

constexpr char kClosed[] =
    "failed to connect to all addresses; last error: UNAVAILABLE: "
    "ipv4:127.0.0.1:36181: Socket closed";

TEST(ConnectionHints, PlaintextClientClosedOnIsToldAboutTls) {
  EXPECT_EQ(PlaintextRefusalHint(absl::StatusCode::kUnavailable, kClosed),
            " (the server closed a plaintext connection: the port may want "
            "TLS; pass --tls-ca)");
  EXPECT_NE(
      PlaintextRefusalHint(absl::StatusCode::kUnavailable, kClosed, "tls_ca")
          .find("pass tls_ca"),
      std::string::npos);
}

TEST(ConnectionHints, OtherFailuresGetNoHint) {
  EXPECT_EQ(PlaintextRefusalHint(absl::StatusCode::kUnavailable,
                                 "failed to connect to all addresses; last "
                                 "error: UNKNOWN: ipv4:127.0.0.1:1: Failed to "
                                 "connect to remote host: Connection refused"),
            "");
  EXPECT_EQ(PlaintextRefusalHint(absl::StatusCode::kInternal, kClosed), "");
}

TEST(ConnectionHints, TellsClosedFromHandshakeFailed) {
  EXPECT_TRUE(ClosedByPeer(absl::StatusCode::kUnavailable, kClosed));
  EXPECT_FALSE(TlsHandshakeFailed(absl::StatusCode::kUnavailable, kClosed));
  EXPECT_TRUE(TlsHandshakeFailed(
      absl::StatusCode::kUnavailable,
      "failed to connect to all addresses; last error: UNKNOWN: "
      "ipv4:127.0.0.1:1: Ssl handshake failed: SSL_ERROR_SSL: "
      "error:0A000086:SSL routines::certificate verify failed"));
}

}  // namespace
}  // namespace moe
