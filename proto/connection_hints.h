// Hints for connection failures whose gRPC message does not say what went
// wrong. A server that ends a connection during the TLS handshake (a
// plaintext client on a TLS port, a client certificate it does not trust)
// shows at the client only as UNAVAILABLE "Socket closed".
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace moe {

// UNAVAILABLE because the peer closed or reset the connection.
bool ClosedByPeer(absl::StatusCode code, absl::string_view message);

// UNAVAILABLE because this side's TLS handshake failed (its own reason
// follows in the message).
bool TlsHandshakeFailed(absl::StatusCode code, absl::string_view message);

// For a failed call on a plaintext connection: "" when `code`/`message`
// do not look like a TLS port closing on it, else a sentence to append,
// naming `ca_option` (the client's option for the CA, "--tls-ca").
std::string PlaintextRefusalHint(absl::StatusCode code,
                                 absl::string_view message,
                                 absl::string_view ca_option = "--tls-ca");

}  // namespace moe
