// Who can reach the router: its listen addresses, the TLS files that secure
// them, and whether worker registration is closed (a worker token, mutual
// TLS or loopback) or knowingly left open. Pure checks on the flags as
// given; RouterOptions::FromFlags runs them in its order.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "server/router_options.h"

namespace moe {

// Returns INVALID_ARGUMENT for an empty --listen, half a TLS key pair, or
// --tls-ca without the key pair (or, with workers, without --worker-listen).
absl::Status CheckListenAddresses(const RouterFlags& flags);

// Returns INVALID_ARGUMENT when workers would register on an address other than
// loopback with neither --worker-token-file nor --tls-ca, unless
// --insecure-workers is given. Registration hands out ranks, the model spec and
// the rendezvous store.
absl::Status CheckWorkerRegistration(const RouterFlags& flags);

// Returns true for a listen address only this host can reach: 127.0.0.0/8,
// [::1], localhost, or a unix: socket.
bool IsLoopbackAddress(const std::string& address);

}  // namespace moe
