// Small address helpers for running across hosts: which local address
// reaches a peer, and whether an address or a gRPC peer string is loopback.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe {

// The local address of the interface this host would use to reach the host
// of gRPC target `target` ("h:p", "[v6]:p", "dns:///h:p", "ipv4:h:p",
// "ipv6:[v6]:p") (a UDP socket connect()ed to it, then getsockname(); no
// packet is sent). "127.0.0.1" for unix: targets. UNAVAILABLE when the host
// does not resolve or no route reaches it.
absl::StatusOr<std::string> LocalAddressToward(absl::string_view target);

// True for 127.0.0.0/8, ::1, ::ffff:127.x.y.z and "localhost".
bool IsLoopbackHost(absl::string_view host);

// True for a gRPC peer string (ServerContext::peer()) from loopback or a
// unix socket: "ipv4:127.0.0.1:5", "ipv6:[::1]:5", "unix:/path".
bool IsLoopbackPeer(absl::string_view peer);

}  // namespace moe
