#include "server/api/rpc_edge.h"

#include <string>

namespace moe {

grpc::Status ToGrpcStatus(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

std::chrono::steady_clock::time_point SteadyDeadline(
    std::chrono::system_clock::time_point deadline) {
  using Clock = std::chrono::steady_clock;
  const auto sys_now = std::chrono::system_clock::now();
  const auto far = std::chrono::hours(24);
  if (deadline <= sys_now) return Clock::now();
  if (deadline - sys_now > far) return Clock::now() + far;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(deadline - sys_now);
}

}  // namespace moe
