// The queue a backend runs a step's pieces on, apart from the experts' math
// (ExpertBackend) and from how rows travel (engine/row_transport.h): marks
// the step's points for its times, copies between the backend's memory and
// the host, and the waits at the step's end. The CPU's is the calling thread
// (engine/host_queue.h); CUDA's is a stream (engine/cuda/cuda_queue.h).
#pragma once

#include <chrono>
#include <cstddef>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace moe {

// Points of a step whose times the queue can tell apart afterwards.
// kGathered and kReturned split dispatch and combine into the local work
// (packing rows, the weighted sum) and the time in the all-to-all.
enum class EpMark {
  kStart,
  kGathered,
  kDispatched,
  kComputed,
  kReturned,
  kDone
};
inline constexpr int kNumEpMarks = 6;

class StepQueue {
 public:
  virtual ~StepQueue() = default;

  // Returns the queue device collectives enqueue on (a cudaStream_t), or null.
  virtual void* stream() = 0;
  virtual void Mark(EpMark mark) = 0;
  // Returns the microseconds between two marks of the finished step.
  virtual double ElapsedUs(EpMark from, EpMark to) const = 0;
  // Copies between the backend's memory and (pinned) host memory.
  virtual absl::Status CopyToHost(const void* src, void* dst, size_t bytes) = 0;
  virtual absl::Status CopyFromHost(const void* src, void* dst,
                                    size_t bytes) = 0;
  // Waits for the step's queued work: through `comm` (which can abort a
  // collective that misses `deadline`), then the queue itself.
  virtual absl::Status Finish(
      Communicator& comm, std::chrono::steady_clock::time_point deadline) = 0;
  // After a failed piece: waits for the work already queued, so that the
  // next step's buffers are not written behind its back; by `deadline`,
  // through `comm` (which aborts a collective still waiting then), never
  // on the queue alone.
  virtual void Drain(Communicator& comm,
                     std::chrono::steady_clock::time_point deadline) = 0;
};

}  // namespace moe
