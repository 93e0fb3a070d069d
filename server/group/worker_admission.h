// Whether a registering worker may join the group, checked before it takes
// a slot (a refused worker does not re-form the group): pure functions of
// what it registered with, its peer address and the workers registered.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace moe {

// What a worker says of itself when it registers (the Register message, as
// the gRPC edge reads it off the wire), as far as admission looks at it.
struct WorkerRegistration {
  std::string host;  // for logs
  int64_t pid = 0;
  std::string device;           // "cpu", "cuda:0"
  std::string collective_host;  // where its peers reach its collective
  // Names its accelerator ("GPU-<uuid>"); it is empty on a CPU.
  std::string device_identity;
  // Is true when its collective stages through host memory (Gloo), so it may
  // share a GPU.
  bool shares_device = false;
};

// Returns FAILED_PRECONDITION for a worker on another host (`peer`, as gRPC
// names it) that advertises a loopback collective address: it would send the
// other workers to themselves, and the group could never form.
absl::Status CheckCollectiveHost(const WorkerRegistration& info,
                                 const std::string& peer);

struct RegisteredWorker {
  const WorkerRegistration* info;
  std::string name;  // as logs name it
};

// Returns FAILED_PRECONDITION when `info` names a device that a registered
// worker on the same host already uses and either of them exchanges over NCCL
// (which runs one rank per GPU).
absl::Status CheckDevice(const WorkerRegistration& info,
                         absl::Span<const RegisteredWorker> registered);

}  // namespace moe
