// Whether a registering worker may join the group, checked before it takes
// a slot (a refused worker does not re-form the group): pure functions of
// its Register message, its peer address and the workers registered.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "moe/v1/worker.pb.h"

namespace moe {

// FAILED_PRECONDITION for a worker on another host (`peer`, as gRPC names
// it) that advertises a loopback collective address: it would send the
// other workers to themselves, and the group could never form.
absl::Status CheckCollectiveHost(const moe::v1::Register& info,
                                 const std::string& peer);

struct RegisteredWorker {
  const moe::v1::Register* info;
  std::string name;  // as logs name it
};

// FAILED_PRECONDITION when `info` names a device that a registered worker
// on the same host already uses and either of them exchanges over NCCL
// (which runs one rank per GPU).
absl::Status CheckDevice(const moe::v1::Register& info,
                         absl::Span<const RegisteredWorker> registered);

}  // namespace moe
