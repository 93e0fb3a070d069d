// How a device backend waits for its step's queue (the CUDA stream), over
// an interface so that the order can be tested on the CPU with a fake queue
// (tests/engine/device_queue_test.cc). A queue may hold a device collective
// (NCCL) that waits forever on a lost peer, so the queue is never
// synchronised directly: first the communicator awaits its end with the
// step's deadline, aborting the group when the deadline passes (which ends
// the collective's kernels); only then can the queue drain without hanging.
#pragma once

#include <chrono>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace moe {

class DeviceQueue {
 public:
  virtual ~DeviceQueue() = default;
  // Records a marker after everything queued so far and returns it (what
  // Communicator::Await waits for: a cudaEvent_t).
  virtual absl::StatusOr<void*> MarkDone() = 0;
  // Waits for everything queued: unbounded, hence only after the
  // communicator has awaited (or aborted) the queue's collectives.
  virtual absl::Status Synchronize() = 0;
  // Forgets an error that a failed piece left behind (the one reported).
  virtual void ClearError() {}
};

// A finished step: its collectives awaited within `deadline`, then the
// queue drained.
inline absl::Status AwaitQueue(DeviceQueue& q, Communicator& comm, void* done,
                               std::chrono::steady_clock::time_point deadline) {
  if (absl::Status s = comm.Await(done, deadline); !s.ok()) return s;
  return q.Synchronize();
}

// After a failed piece: the work queued before the failure still writes the
// step's buffers, so it must end before the next step reuses them, but by
// the step's deadline: a collective still waiting on a peer that left is
// aborted by the communicator then. The error of the piece is the one
// reported; this one's own errors are dropped.
inline void DrainQueue(DeviceQueue& q, Communicator& comm,
                       std::chrono::steady_clock::time_point deadline) {
  absl::StatusOr<void*> done = q.MarkDone();
  if (done.ok()) (void)comm.Await(*done, deadline);
  (void)q.Synchronize();
  q.ClearError();
}

}  // namespace moe
