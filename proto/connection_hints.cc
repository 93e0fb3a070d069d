#include "proto/connection_hints.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace moe {

bool ClosedByPeer(absl::StatusCode code, absl::string_view message) {
  return code == absl::StatusCode::kUnavailable &&
         (absl::StrContains(message, "Socket closed") ||
          absl::StrContains(message, "Connection reset by peer") ||
          absl::StrContains(message, "Broken pipe"));
}

bool TlsHandshakeFailed(absl::StatusCode code, absl::string_view message) {
  return code == absl::StatusCode::kUnavailable &&
         (absl::StrContains(message, "Ssl handshake failed") ||
          absl::StrContains(message, "Handshake failed") ||
          absl::StrContains(message, "SSL_ERROR"));
}

std::string PlaintextRefusalHint(absl::StatusCode code,
                                 absl::string_view message,
                                 absl::string_view ca_option) {
  if (!ClosedByPeer(code, message)) return "";
  return absl::StrCat(
      " (the server closed a plaintext connection: the port may want TLS; "
      "pass ",
      ca_option, ")");
}

}  // namespace moe
