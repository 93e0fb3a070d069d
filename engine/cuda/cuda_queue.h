// The CUDA backend's step queue (engine/device_step_queue.h): one non-blocking
// stream, which device collectives (NCCL) enqueue on too, an event per mark,
// and the step's end awaited through the communicator before the stream is
// synchronised (engine/cuda/device_queue.h), so that a collective waiting on
// a lost peer is aborted by the deadline instead of hanging the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/cuda/device_queue.h"
#include "engine/device_step_queue.h"

namespace moe {

class CudaQueue : public DeviceStepQueue, private DeviceQueue {
 public:
  // A stream and events on device `device`.
  static absl::StatusOr<std::unique_ptr<CudaQueue>> Create(int device);
  ~CudaQueue() override;

  cudaStream_t cuda_stream() const { return stream_; }
  // DeviceStepQueue: cudaMalloc or cudaMallocHost (engine/cuda/
  // device_buffer.h, counted), cudaMemcpyAsync device to host, and
  // cudaStreamSynchronize.
  absl::StatusOr<Block> Allocate(Memory where, size_t bytes) override;
  absl::Status Download(const void* src, void* dst, size_t bytes) override;
  absl::Status Synchronize() override;
  void CopyAtFinish(const void* pinned, void* dst, size_t bytes) override;
  Traffic traffic() const override { return traffic_; }

  void* stream() override { return stream_; }
  void Mark(EpMark mark) override;
  double ElapsedUs(EpMark from, EpMark to) const override;
  // Synchronous: the host reads `dst` next.
  absl::Status CopyToHost(const void* src, void* dst, size_t bytes) override;
  // Enqueued only: the stream orders it before the kernels that read it, and
  // the next CopyToHost's synchronisation frees the staging again.
  absl::Status CopyFromHost(const void* src, void* dst, size_t bytes) override;
  absl::Status Finish(Communicator& comm,
                      std::chrono::steady_clock::time_point deadline) override;
  void Drain(Communicator& comm,
             std::chrono::steady_clock::time_point deadline) override;

 private:
  explicit CudaQueue(int device) : device_(device) {}
  absl::Status Init();
  // DeviceQueue: what AwaitQueue and DrainQueue wait through.
  absl::StatusOr<void*> MarkDone() override;
  void ClearError() override { (void)cudaGetLastError(); }

  int device_;
  cudaStream_t stream_ = nullptr;
  std::array<cudaEvent_t, kNumEpMarks> marks_{};
  cudaEvent_t drained_ = nullptr;  // Drain's marker after the queued work
  const void* pending_src_ = nullptr;
  void* pending_dst_ = nullptr;
  size_t pending_bytes_ = 0;
  Traffic traffic_;
};

}  // namespace moe
