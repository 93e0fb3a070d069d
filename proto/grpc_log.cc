#include "proto/grpc_log.h"

#include <grpc/grpc.h>
#include <grpc/support/log.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/logging.h"

namespace moe {
namespace {

// Past these sizes the maps drop what is old: a client that opens
// connections and never finishes a handshake, or many peers at once,
// cannot grow them without bound.
constexpr size_t kMaxHandshakes = 4096;
constexpr size_t kMaxShown = 1024;
// gRPC gives up on a server handshake after 120 s by default.
constexpr auto kHandshakeLifetime = std::chrono::minutes(5);

// A TLS (TSI) failure, rather than a peer that closed the socket or a
// handshake cut short by shutdown: only those are refusals worth a line.
bool IsTlsError(absl::string_view error) {
  return absl::StrContains(error, "Ssl handshake failed") ||
         absl::StrContains(error, "SSL_ERROR") ||
         absl::StrContains(error, "tsi_code");
}

absl::string_view HostOf(absl::string_view peer) {
  const size_t colon = peer.rfind(':');
  if (colon == absl::string_view::npos || peer.empty() || peer.back() == ']') {
    return peer;
  }
  return peer.substr(0, colon);
}

}  // namespace

std::string HandshakeRefusals::PeerAddress(absl::string_view uri) {
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (absl::StartsWith(uri, scheme)) {
      uri.remove_prefix(scheme.size());
      break;
    }
  }
  return absl::StrReplaceAll(uri, {{"%5B", "["}, {"%5D", "]"}});
}

std::string HandshakeRefusals::Reason(absl::string_view error) {
  // "UNKNOWN:Ssl handshake failed: SSL_ERROR_SSL: error:0A000086:SSL
  // routines::certificate verify failed {tsi_code:10, ...}", or the raw
  // line's "... SSL routines::certificate verify failed."
  if (const size_t brace = error.find(" {"); brace != absl::string_view::npos) {
    error = error.substr(0, brace);
  }
  for (absl::string_view after : {"SSL routines::", "Ssl handshake failed: ",
                                  "Handshake failed with fatal error "}) {
    if (const size_t at = error.find(after); at != absl::string_view::npos) {
      error = error.substr(at + after.size());
      break;
    }
  }
  while (!error.empty() && (error.back() == '.' || error.back() == ' ')) {
    error.remove_suffix(1);
  }
  std::string reason(error);
  // What each usually means, as this service's flags put it.
  if (absl::StrContains(reason, "wrong version number") ||
      absl::StrContains(reason, "http request")) {
    absl::StrAppend(&reason, " (a plaintext client on this TLS port?)");
  } else if (absl::StrContains(reason, "did not return a certificate")) {
    absl::StrAppend(&reason,
                    " (a client without a certificate: mutual TLS wants its "
                    "--tls-cert and --tls-key)");
  } else if (absl::StrContains(reason, "certificate verify failed")) {
    absl::StrAppend(&reason,
                    " (the client's certificate is not signed by this "
                    "server's --tls-ca)");
  } else if (absl::StrContains(reason, "alert unknown ca") ||
             absl::StrContains(reason, "alert bad certificate") ||
             absl::StrContains(reason, "alert certificate unknown")) {
    absl::StrAppend(&reason,
                    " (the client does not trust this server's certificate: "
                    "check the client's --tls-ca)");
  }
  return reason;
}

HandshakeRefusals::Verdict HandshakeRefusals::OnLine(absl::string_view file,
                                                     absl::string_view message,
                                                     std::thread::id thread,
                                                     Clock::time_point now) {
  Verdict v;
  if (file == "ev_posix.cc") {
    if (!absl::StartsWith(message, "(fd-trace) ")) return v;
    v.drop = true;
    // "(fd-trace) fd_create(9, tcp-server-connection:ipv4:127.0.0.1:47322, 1)"
    constexpr absl::string_view kAccepted = "tcp-server-connection:";
    const size_t at = message.find(kAccepted);
    if (!absl::StartsWith(message, "(fd-trace) fd_create(") ||
        at == absl::string_view::npos) {
      return v;
    }
    absl::string_view uri = message.substr(at + kAccepted.size());
    uri = uri.substr(0, uri.rfind(", "));
    absl::MutexLock lock(&mu_);
    accepted_[thread] = PeerAddress(uri);
    return v;
  }
  if (file == "handshaker.cc") {
    constexpr absl::string_view kManager = "handshake_manager ";
    if (!absl::StartsWith(message, kManager)) return v;
    v.drop = true;
    absl::string_view rest = message.substr(kManager.size());
    const size_t colon = rest.find(": ");
    if (colon == absl::string_view::npos) return v;
    const std::string manager(rest.substr(0, colon));
    const absl::string_view what = rest.substr(colon + 2);
    absl::MutexLock lock(&mu_);
    // The first step of every handshake, logged on the thread that
    // accepted its socket before the accept returns.
    if (absl::StartsWith(what, "error=OK shutdown=0 index=0,")) {
      auto it = accepted_.find(thread);
      if (it == accepted_.end()) return v;
      if (handshakes_.size() >= kMaxHandshakes) {
        for (auto h = handshakes_.begin(); h != handshakes_.end();) {
          h = now - h->second.second > kHandshakeLifetime ? handshakes_.erase(h)
                                                          : std::next(h);
        }
      }
      if (handshakes_.size() < kMaxHandshakes) {
        handshakes_[manager] = {std::move(it->second), now};
      }
      accepted_.erase(it);
      matched_ = true;
      return v;
    }
    constexpr absl::string_view kDone =
        "handshaking complete -- scheduling on_handshake_done with error=";
    if (!absl::StartsWith(what, kDone)) return v;
    const absl::string_view error = what.substr(kDone.size());
    std::string peer;
    if (auto it = handshakes_.find(manager); it != handshakes_.end()) {
      peer = std::move(it->second.first);
      handshakes_.erase(it);
    }
    if (absl::StartsWith(error, "OK") || !IsTlsError(error)) return v;
    v.report = Report(peer, Reason(error), now);
    return v;
  }
  if (file == "ssl_transport_security.cc" &&
      absl::StartsWith(message, "Handshake failed with fatal error")) {
    v.drop = true;
    absl::MutexLock lock(&mu_);
    // Once the tracers' lines have been seen to match, the handshake
    // manager's last line reports this refusal, with the peer.
    if (!matched_) v.report = Report("", Reason(message), now);
  }
  return v;
}

std::string HandshakeRefusals::Report(const std::string& peer,
                                      const std::string& reason,
                                      Clock::time_point now) {
  if (shown_.size() >= kMaxShown) {
    for (auto s = shown_.begin(); s != shown_.end();) {
      s = now - s->second.at >= every_ ? shown_.erase(s) : std::next(s);
    }
  }
  // Still full (many peers at once): their refusals share one entry per
  // reason.
  const std::string host(shown_.size() >= kMaxShown ? "" : HostOf(peer));
  auto [it, fresh] = shown_.try_emplace({host, reason});
  Shown& s = it->second;
  if (!fresh && now - s.at < every_) {
    ++s.left_out;
    return "";
  }
  std::string line = absl::StrCat(
      "TLS handshake with ",
      peer.empty() ? "a client (peer address not reported by gRPC)" : peer,
      " refused: ", reason);
  if (s.left_out > 0) {
    absl::StrAppend(&line, "; ", s.left_out, " more like it from ",
                    host.empty() ? "unreported peers" : host,
                    " since the last report");
  }
  absl::StrAppend(
      &line, " (reported at most once per ",
      std::chrono::duration_cast<std::chrono::seconds>(every_).count(),
      " s per peer and reason)");
  s.at = now;
  s.left_out = 0;
  return line;
}

namespace {

gpr_log_severity g_forward_from = GPR_LOG_SEVERITY_ERROR;
bool g_forward_none = false;
bool g_keep_trace_lines = false;
HandshakeRefusals* g_refusals = nullptr;  // never freed: gRPC logs at exit

absl::string_view BaseName(const char* file) {
  absl::string_view f = file != nullptr ? file : "";
  const size_t slash = f.rfind('/');
  return slash == absl::string_view::npos ? f : f.substr(slash + 1);
}

spdlog::level::level_enum LevelOf(gpr_log_severity s) {
  switch (s) {
    case GPR_LOG_SEVERITY_DEBUG:
      return spdlog::level::debug;
    case GPR_LOG_SEVERITY_INFO:
      return spdlog::level::info;
    default:
      return spdlog::level::err;
  }
}

void LogFromGrpc(gpr_log_func_args* args) {
  const absl::string_view file = BaseName(args->file);
  const absl::string_view message =
      args->message != nullptr ? args->message : "";
  if (g_refusals != nullptr) {
    const HandshakeRefusals::Verdict v =
        g_refusals->OnLine(file, message, std::this_thread::get_id(),
                           HandshakeRefusals::Clock::now());
    if (!v.report.empty()) spdlog::warn("{}", v.report);
    if (v.drop && !g_keep_trace_lines) return;
  }
  if (g_forward_none || args->severity < g_forward_from) return;
  spdlog::log(LevelOf(args->severity), "grpc {}:{}: {}", file, args->line,
              message);
}

// GRPC_VERBOSITY as gRPC reads it: DEBUG, INFO, ERROR (the default), NONE.
void ReadVerbosity() {
  const char* v = std::getenv("GRPC_VERBOSITY");
  const std::string verbosity = v != nullptr ? v : "";
  if (absl::EqualsIgnoreCase(verbosity, "DEBUG")) {
    g_forward_from = GPR_LOG_SEVERITY_DEBUG;
  } else if (absl::EqualsIgnoreCase(verbosity, "INFO")) {
    g_forward_from = GPR_LOG_SEVERITY_INFO;
  } else if (absl::EqualsIgnoreCase(verbosity, "NONE")) {
    g_forward_none = true;
  }
}

}  // namespace

void RouteGrpcLogsToSpdlog(bool report_handshake_refusals) {
  ReadVerbosity();
  // Whoever sets GRPC_TRACE wants the tracers' lines, ours included.
  const char* trace = std::getenv("GRPC_TRACE");
  g_keep_trace_lines = trace != nullptr && *trace != '\0';
  gpr_log_severity print =
      g_forward_none ? GPR_LOG_SEVERITY_ERROR : g_forward_from;
  if (report_handshake_refusals) {
    g_refusals = new HandshakeRefusals(std::chrono::minutes(1));
    if (grpc_tracer_set_enabled("fd_trace", 1) != 0 &&
        grpc_tracer_set_enabled("handshaker", 1) != 0) {
      // The tracers log at INFO; LogFromGrpc still forwards only what
      // GRPC_VERBOSITY asks for.
      print = std::min(print, GPR_LOG_SEVERITY_INFO);
    } else {
      spdlog::warn(
          "this gRPC has no fd_trace/handshaker tracers: TLS handshake "
          "refusals are logged without the peer's address");
    }
  }
  // Set before grpc_init, which then keeps it (it reads GRPC_VERBOSITY only
  // while no verbosity is set).
  gpr_set_log_verbosity(print);
  gpr_set_log_function(&LogFromGrpc);
}

}  // namespace moe
