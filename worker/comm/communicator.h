// The collective a worker group needs for expert parallelism: an
// all-to-all with per-rank sizes. Implemented with Gloo (CPU, TCP) and NCCL
// (GPU); sizes always come from the router's plan, never exchanged.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace moe {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // Sends send_counts[r] floats to rank r (blocks of `send`, in rank order)
  // and receives recv_counts[r] floats from rank r (blocks of `recv`, in
  // rank order). Every rank must call it, in the same order, with matching
  // sizes. Fails with DEADLINE_EXCEEDED or UNAVAILABLE when a peer does not
  // answer within `timeout`; after a failure the communicator is broken
  // and must be rebuilt. Pointers are in the communicator's memory space
  // (host for Gloo, device for NCCL).
  virtual absl::Status AllToAllV(const float* send,
                                 absl::Span<const int64_t> send_counts,
                                 float* recv,
                                 absl::Span<const int64_t> recv_counts,
                                 std::chrono::milliseconds timeout) = 0;
};

}  // namespace moe
