#include "server/router_address_checks.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cli_args.h"

namespace moe {

absl::Status CheckListenAddresses(const RouterFlags& f) {
  if (f.listen.empty()) return BadFlag("listen", "HOST:PORT", "''");
  // Requires both halves of the key pair, or neither.
  if (f.tls.cert.empty() != f.tls.key.empty()) {
    return f.tls.cert.empty()
               ? absl::InvalidArgumentError("--tls-key needs --tls-cert")
               : absl::InvalidArgumentError("--tls-cert needs --tls-key");
  }
  if (!f.tls.ca.empty() && f.tls.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca (mutual TLS with the workers) needs --tls-cert and "
        "--tls-key");
  }
  if (!f.tls.ca.empty() && f.num_workers > 0 && f.worker_listen.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca (mutual TLS with the workers) needs --worker-listen");
  }
  return absl::OkStatus();
}

// Worker registration hands out ranks, the model spec and the rendezvous
// store: closed by a worker token or mutual TLS, or reachable from this
// host only, unless the operator says otherwise.
absl::Status CheckWorkerRegistration(const RouterFlags& f) {
  if (f.num_workers == 0 || f.insecure_workers) return absl::OkStatus();
  if (!f.worker_token_file.empty() || !f.tls.ca.empty()) {
    return absl::OkStatus();
  }
  const std::string& address =
      f.worker_listen.empty() ? f.listen : f.worker_listen;
  if (IsLoopbackAddress(address)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "worker registration on ", address, " (",
      f.worker_listen.empty() ? "--listen" : "--worker-listen",
      ") would be open to anyone who can reach it: they could take a worker "
      "rank with the model spec, or write to the rendezvous store. Give "
      "--worker-token-file (the same file to every moe-worker) or --tls-ca "
      "(mutual TLS on --worker-listen), listen on loopback, or pass "
      "--insecure-workers if the network is closed by other means"));
}

bool IsLoopbackAddress(const std::string& address) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  std::string host = address;
  if (!host.empty() && host[0] == '[') {
    const size_t close = host.find(']');
    if (close == std::string::npos) return false;
    host = host.substr(1, close - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  host = absl::AsciiStrToLower(host);
  return host == "localhost" || host == "::1" ||
         (absl::StartsWith(host, "127.") &&
          host.find_first_not_of("0123456789.") == std::string::npos);
}

}  // namespace moe
