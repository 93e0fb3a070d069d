// The collective the expert-parallel step needs: an all-to-all with per-rank
// sizes. Implemented with Gloo (host memory, TCP), NCCL (device memory) and
// a loopback one for a single process; sizes always come from the router's
// plan, never exchanged (docs/architecture.md, "One step").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace moe {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // True when AllToAllV takes device pointers (NCCL); false for host memory.
  // A device backend over a host communicator stages through pinned memory.
  virtual bool device_memory() const { return false; }

  // Sends send_counts[r] elements to rank r (blocks of `send`, in rank
  // order) and receives recv_counts[r] elements from rank r (blocks of
  // `recv`, in rank order). Every rank must call it, in the same order, with
  // matching sizes. Pointers are in the communicator's memory space (host
  // for Gloo, device for NCCL). Gloo completes before returning; NCCL
  // enqueues on `stream` (a cudaStream_t) and completes with Await. Fails
  // with DEADLINE_EXCEEDED or UNAVAILABLE when a peer does not answer within
  // `timeout`; after a failure the communicator is broken and must be
  // rebuilt.
  virtual absl::Status AllToAllV(
      const void* send, absl::Span<const int64_t> send_counts, void* recv,
      absl::Span<const int64_t> recv_counts, ElementType type,
      std::chrono::milliseconds timeout, void* stream = nullptr) = 0;

  // Waits until device work up to `event` (a cudaEvent_t) is done, failing
  // (and aborting the group) when a collective errs or at `deadline`.
  // Nothing to wait for on the host-side Gloo.
  virtual absl::Status Await(void* event,
                             std::chrono::steady_clock::time_point deadline) {
    return absl::OkStatus();
  }
};

}  // namespace moe
