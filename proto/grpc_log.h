// gRPC core's log lines through spdlog, and TLS handshake refusals on this
// process's servers reported once per peer and reason per minute, with the
// peer's address, instead of gRPC's raw "Handshake failed with fatal error
// SSL_ERROR_SSL ..." twice a second per bad client.
//
// gRPC 1.51 reports a failed server handshake without the peer's address:
// neither its error lines nor a custom certificate verifier's request carry
// it. Two of its tracers, low in volume (a few lines per connection), do
// carry what is needed to join them: "fd_trace" names each accepted socket
// "tcp-server-connection:<peer>" on the thread that accepted it, and
// "handshaker" then logs, on that same thread and before the call returns,
// the handshake manager that handshake runs in; the manager's last line
// says how the handshake ended. HandshakeRefusals follows those lines.
// Where they do not match (another gRPC's format, tracers missing), gRPC's
// "Handshake failed" line is reported instead, once per reason per minute,
// as "peer address not reported by gRPC".
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace moe {

// Follows gRPC's log lines (tracers "fd_trace" and "handshaker" on) and
// says which to leave out and what to report in their place. Thread-safe.
class HandshakeRefusals {
 public:
  using Clock = std::chrono::steady_clock;
  // A refusal from the same peer host for the same reason is reported at
  // most once per `every`.
  explicit HandshakeRefusals(Clock::duration every) : every_(every) {}

  struct Verdict {
    bool drop = false;   // a line of the tracers (or one reported instead)
    std::string report;  // a refusal to log as a warning; empty: none
  };
  // One gRPC log line: the base name of the source file that logged it,
  // its text, and the thread it was logged on.
  Verdict OnLine(absl::string_view file, absl::string_view message,
                 std::thread::id thread, Clock::time_point now);

  // "127.0.0.1:4711" from gRPC's "ipv4:127.0.0.1:4711" (and "[::1]:4711"
  // from "ipv6:%5B::1%5D:4711").
  static std::string PeerAddress(absl::string_view uri);
  // The short reason of a handshake error ("certificate verify failed"),
  // with what it usually means when that is known.
  static std::string Reason(absl::string_view error);

 private:
  std::string Report(const std::string& peer, const std::string& reason,
                     Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock::duration every_;
  absl::Mutex mu_;
  // The peer of the socket each thread accepted last, until the handshake
  // manager for it is logged.
  std::map<std::thread::id, std::string> accepted_ ABSL_GUARDED_BY(mu_);
  // Whether a handshake has been matched to its peer: until then gRPC's
  // own "Handshake failed" lines are reported (without the peer).
  bool matched_ ABSL_GUARDED_BY(mu_) = false;
  // Handshake manager (its address, as logged) -> peer and when it began.
  std::map<std::string, std::pair<std::string, Clock::time_point>> handshakes_
      ABSL_GUARDED_BY(mu_);
  struct Shown {
    Clock::time_point at;
    int64_t left_out = 0;
  };
  // (peer host, reason) -> when it was last reported, and how many since.
  std::map<std::pair<std::string, std::string>, Shown> shown_
      ABSL_GUARDED_BY(mu_);
};

// Installs gRPC's log function: its lines go to spdlog at their severity
// (from GRPC_VERBOSITY, default ERROR, as gRPC's own logger would), and
// with `report_handshake_refusals` the two tracers are turned on and TLS
// handshake refusals reported as HandshakeRefusals says. Call once, at
// start, before any channel or server exists.
void RouteGrpcLogsToSpdlog(bool report_handshake_refusals);

}  // namespace moe
