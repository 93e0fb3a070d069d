// The step queue of a backend whose buffers are device memory, with what
// that backend's host logic (engine/device_backend.h) asks of the device
// besides the step's marks and waits: memory, copies queued between pinned
// host memory and the device, and the host waiting for the queue. The CUDA
// stream implements it (engine/cuda/cuda_queue.h); the copy-budget tests
// (tests/engine/copy_budget_test.cc) implement it on the CPU, counting every
// byte and wait, so what a GPU step moves across PCIe is a tested property.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/step_queue.h"

namespace moe {

class DeviceStepQueue : public StepQueue {
 public:
  enum class Memory { kDevice, kPinnedHost };
  // Memory that frees itself when the last owner lets go.
  using Block = std::shared_ptr<void>;

  // Allocates memory when a backend loads (or at a first use that says so),
  // never for a step's copies.
  virtual absl::StatusOr<Block> Allocate(Memory where, size_t bytes) = 0;
  // Queues a copy of device `src` into pinned host `dst`, which the host reads
  // after the next Synchronize or Finish. (The upload is CopyFromHost, queued
  // too.)
  virtual absl::Status Download(const void* src, void* dst, size_t bytes) = 0;
  // The host waits for everything queued: never while a device collective
  // may wait on a peer (engine/cuda/device_queue.h), so only before a
  // step's exchanges or through Finish.
  virtual absl::Status Synchronize() = 0;
  // Copies `bytes` of pinned host memory `pinned` (which the queued work
  // fills) to `dst` once Finish has awaited that work; Drain drops it.
  virtual void CopyAtFinish(const void* pinned, void* dst, size_t bytes) = 0;

  // Counts what crossed between host and device so far, and how often the host
  // waited for the queue (moe-bench reports it per step).
  struct Traffic {
    int64_t h2d_bytes = 0;
    int64_t d2h_bytes = 0;
    int64_t syncs = 0;
  };
  virtual Traffic traffic() const = 0;
  // Counts every wait of the host for the queue so far (CopyToHost,
  // Synchronize, Finish, Drain), never reset: the host logic tells from an
  // unchanged count that an upload it queued may still read its staging.
  virtual int64_t waits() const { return traffic().syncs; }
};

}  // namespace moe
