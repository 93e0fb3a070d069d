// Every listening port of the service is its own: gRPC servers set
// SO_REUSEPORT by default, so a second router started on a port already in
// use starts anyway and the kernel splits the connections between the two.
// Every ServerBuilder of the product goes through RefuseSharedPorts, and a
// bind that fails ends the process with core's ListenFailure (the address,
// the flag that set it and the cause).
#pragma once

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

namespace moe {

// Binds `builder`'s ports without SO_REUSEPORT: a port another process
// listens on makes BuildAndStart fail instead of sharing it.
inline void RefuseSharedPorts(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

}  // namespace moe
