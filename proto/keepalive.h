// gRPC keepalive on the workers' Join streams, both ends in one place: the
// worker pings the router every second on an idle stream and the router
// pings back, so that a dead link (partition, a vanished host) ends the
// stream within about time + timeout (2 s) and counts as a membership
// change, instead of surfacing at the next step's timeout
// (docs/architecture.md section 2, "Heartbeats").
#pragma once

#include <grpcpp/grpcpp.h>

namespace moe {

inline constexpr int kKeepaliveTimeMs = 1000;
inline constexpr int kKeepaliveTimeoutMs = 1000;

// The router's side: pings its peers and permits theirs (a ping on an idle
// stream every kKeepaliveTimeMs is not answered with GOAWAY).
void AddKeepaliveServerArgs(grpc::ServerBuilder& builder);

// The worker's side: pings the router, also while no call is open.
void AddKeepaliveChannelArgs(grpc::ChannelArguments& args);

}  // namespace moe
