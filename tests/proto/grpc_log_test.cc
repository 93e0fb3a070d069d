#include "proto/grpc_log.h"

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace moe {
namespace {

using Clock = HandshakeRefusals::Clock;

// gRPC 1.51's lines (Debian 12), as logged with the tracers fd_trace and
// handshaker on: an accepted socket, the start of its handshake, its end.
std::string Accepted(const std::string& peer) {
  return "(fd-trace) fd_create(9, tcp-server-connection:" + peer + ", 1)";
}
std::string Started(const std::string& manager) {
  return "handshake_manager " + manager +
         ": error=OK shutdown=0 index=0, args={endpoint=0x55a7a6aa21f0, "
         "args={grpc.compression_enabled_algorithms_bitset=7}, "
         "read_buffer=0x55a7a6aa5de0 (length=0), exit_early=0}";
}
std::string Ended(const std::string& manager, const std::string& error) {
  return "handshake_manager " + manager +
         ": handshaking complete -- scheduling on_handshake_done with error=" +
         error;
}
const char kVerifyFailed[] =
    "UNKNOWN:Ssl handshake failed: SSL_ERROR_SSL: error:0A000086:SSL "
    "routines::certificate verify failed {tsi_code:10, "
    "tsi_error:\"TSI_PROTOCOL_FAILURE\", file_line:393}";
const char kRawLine[] =
    "Handshake failed with fatal error SSL_ERROR_SSL: error:0A000086:SSL "
    "routines::certificate verify failed.";

// One refused handshake from `peer`, accepted on `thread` and failed on
// another (as gRPC does); returns the report, if any.
std::string Refuse(HandshakeRefusals& r, const std::string& peer,
                   const std::string& manager, std::thread::id thread,
                   Clock::time_point now,
                   const std::string& error = kVerifyFailed) {
  const std::thread::id other;  // a different id from any running thread's
  EXPECT_TRUE(r.OnLine("ev_posix.cc", Accepted(peer), thread, now).drop);
  EXPECT_TRUE(r.OnLine("handshaker.cc",
                       "handshake_manager " + manager +
                           ": adding handshaker security [0x1] at index 0",
                       thread, now)
                  .drop);
  EXPECT_TRUE(r.OnLine("handshaker.cc", Started(manager), thread, now).drop);
  EXPECT_TRUE(r.OnLine("ssl_transport_security.cc", kRawLine, other, now).drop);
  const HandshakeRefusals::Verdict v =
      r.OnLine("handshaker.cc", Ended(manager, error), other, now);
  EXPECT_TRUE(v.drop);
  return v.report;
}

TEST(HandshakeRefusals, ReportsThePeerOncePerMinute) {
  HandshakeRefusals r(std::chrono::minutes(1));
  const auto t0 = Clock::now();
  const auto me = std::this_thread::get_id();
  const std::string first = Refuse(r, "ipv4:127.0.0.1:47322", "0xa", me, t0);
  EXPECT_EQ(first,
            "TLS handshake with 127.0.0.1:47322 refused: certificate verify "
            "failed (the client's certificate is not signed by this server's "
            "--tls-ca) (reported at most once per 60 s per peer and reason)");
  // Twice a second for half a minute: nothing, from any port of that host.
  for (int i = 1; i <= 60; ++i) {
    EXPECT_EQ(Refuse(r, "ipv4:127.0.0.1:" + std::to_string(47322 + i), "0xa",
                     me, t0 + std::chrono::milliseconds(500 * i)),
              "");
  }
  // Another host, another reason: reported at once.
  EXPECT_NE(Refuse(r, "ipv4:10.0.0.7:5000", "0xb", me, t0)
                .find("TLS handshake with 10.0.0.7:5000 refused"),
            std::string::npos);
  const std::string plaintext =
      Refuse(r, "ipv4:127.0.0.1:1", "0xc", me, t0,
             "UNKNOWN:Ssl handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL "
             "routines::wrong version number {tsi_code:10}");
  EXPECT_NE(plaintext.find("refused: wrong version number (a plaintext client "
                           "on this TLS port?)"),
            std::string::npos)
      << plaintext;
  // A minute on: reported again, with the count left out.
  const std::string again = Refuse(r, "ipv4:127.0.0.1:50000", "0xa", me,
                                   t0 + std::chrono::seconds(61));
  EXPECT_NE(again.find("; 60 more like it from 127.0.0.1 since the last"),
            std::string::npos)
      << again;
}

TEST(HandshakeRefusals, HandshakesThatSucceedOrAreCutShortAreNotReported) {
  HandshakeRefusals r(std::chrono::minutes(1));
  const auto now = Clock::now();
  const auto me = std::this_thread::get_id();
  EXPECT_EQ(Refuse(r, "ipv4:127.0.0.1:1", "0xa", me, now, "OK"), "");
  // A TCP probe that connects and closes: not a TLS refusal.
  EXPECT_EQ(Refuse(r, "ipv4:127.0.0.1:2", "0xa", me, now,
                   "UNAVAILABLE:Socket closed"),
            "");
}

TEST(HandshakeRefusals, WithoutTheTracersRefusalsGoPerReason) {
  HandshakeRefusals r(std::chrono::minutes(1));
  const auto now = Clock::now();
  const auto me = std::this_thread::get_id();
  const auto first = r.OnLine("ssl_transport_security.cc", kRawLine, me, now);
  EXPECT_TRUE(first.drop);
  EXPECT_EQ(first.report,
            "TLS handshake with a client (peer address not reported by gRPC) "
            "refused: certificate verify failed (the client's certificate is "
            "not signed by this server's --tls-ca) (reported at most once per "
            "60 s per peer and reason)");
  EXPECT_EQ(r.OnLine("ssl_transport_security.cc", kRawLine, me,
                     now + std::chrono::seconds(1))
                .report,
            "");
}

TEST(HandshakeRefusals, OtherLinesPassThrough) {
  HandshakeRefusals r(std::chrono::minutes(1));
  const auto v = r.OnLine("chttp2_server.cc", "something else",
                          std::this_thread::get_id(), Clock::now());
  EXPECT_FALSE(v.drop);
  EXPECT_EQ(v.report, "");
  EXPECT_FALSE(r.OnLine("ssl_transport_security.cc", "Invalid private key.",
                        std::this_thread::get_id(), Clock::now())
                   .drop);
}

TEST(HandshakeRefusals, PeerAddressAndReason) {
  EXPECT_EQ(HandshakeRefusals::PeerAddress("ipv4:127.0.0.1:4711"),
            "127.0.0.1:4711");
  EXPECT_EQ(HandshakeRefusals::PeerAddress("ipv6:%5B::1%5D:4711"),
            "[::1]:4711");
  EXPECT_EQ(HandshakeRefusals::Reason(
                "UNKNOWN:Ssl handshake failed: SSL_ERROR_SSL: error:0A0000C7:"
                "SSL routines::peer did not return a certificate {x:1}"),
            "peer did not return a certificate (a client without a "
            "certificate: mutual TLS wants its --tls-cert and --tls-key)");
  EXPECT_EQ(HandshakeRefusals::Reason("UNKNOWN:Ssl handshake failed: "
                                      "TSI_PROTOCOL_FAILURE {x:1}"),
            "TSI_PROTOCOL_FAILURE");
}

}  // namespace
}  // namespace moe
