// Small address helpers for running across hosts: which local address
// reaches a peer, whether an address or a gRPC peer string is loopback, and
// why a listening address could not be bound.
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

// The error a process exits with when it could not listen on `address`
// (host:port, "[v6]:port", as given to `flag`, e.g. "--listen"). Binds a
// probe socket there the way the servers do (SO_REUSEADDR, never
// SO_REUSEPORT) and names the cause from its errno, e.g. "--listen
// 127.0.0.1:50051: address already in use (another process is listening
// there); pick a free port". `detail` (the server's own words) is added when
// the probe finds no cause. UNAVAILABLE.
absl::Status ListenFailure(absl::string_view flag, absl::string_view address,
                           absl::string_view detail = "");

// OK when `address` binds now; otherwise ListenFailure's error. Servers ask
// before they start, so that a taken port is reported in one clear line
// before (and instead of) gRPC's own multi-line bind error.
absl::Status CheckCanListen(absl::string_view flag, absl::string_view address);

}  // namespace moe
