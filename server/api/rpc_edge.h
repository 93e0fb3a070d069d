// What the RPC handlers share at the gRPC edge: absl::Status to
// grpc::Status, and a call's deadline on the steady clock.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/status/status.h"

namespace moe {

grpc::Status ToGrpcStatus(const absl::Status& s);
// Returns a server context's deadline on the steady clock, or the far future if
// the call has none.
std::chrono::steady_clock::time_point SteadyDeadline(
    std::chrono::system_clock::time_point deadline);

}  // namespace moe
