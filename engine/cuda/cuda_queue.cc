#include "engine/cuda/cuda_queue.h"

#include <cstring>

#include "core/cuda/cuda_status.h"
#include "core/status_macros.h"
#include "engine/cuda/device_buffer.h"

namespace moe {

absl::StatusOr<std::unique_ptr<CudaQueue>> CudaQueue::Create(int device) {
  std::unique_ptr<CudaQueue> q(new CudaQueue(device));
  MOE_RETURN_IF_ERROR(q->Init());
  return q;
}

absl::Status CudaQueue::Init() {
  MOE_CUDA_OK(cudaSetDevice(device_));
  MOE_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : marks_) MOE_CUDA_OK(cudaEventCreate(&e));
  MOE_CUDA_OK(cudaEventCreateWithFlags(&drained_, cudaEventDisableTiming));
  return absl::OkStatus();
}

CudaQueue::~CudaQueue() {
  cudaSetDevice(device_);
  for (cudaEvent_t& e : marks_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (drained_ != nullptr) cudaEventDestroy(drained_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<DeviceStepQueue::Block> CudaQueue::Allocate(Memory where,
                                                           size_t bytes) {
  MOE_CUDA_OK(cudaSetDevice(device_));
  // The buffer frees itself with the block's last owner.
  if (where == Memory::kDevice) {
    MOE_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
    auto* owned = new DeviceBuffer(std::move(b));
    return Block(owned->data(), [owned](void*) { delete owned; });
  }
  MOE_ASSIGN_OR_RETURN(PinnedBuffer b, PinnedBuffer::Allocate(bytes));
  auto* owned = new PinnedBuffer(std::move(b));
  return Block(owned->data(), [owned](void*) { delete owned; });
}

absl::Status CudaQueue::Download(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  MOE_CUDA_OK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  traffic_.d2h_bytes += bytes;
  return absl::OkStatus();
}

void CudaQueue::CopyAtFinish(const void* pinned, void* dst, size_t bytes) {
  pending_src_ = pinned;
  pending_dst_ = dst;
  pending_bytes_ = bytes;
}

void CudaQueue::Mark(EpMark mark) {
  cudaEventRecord(marks_[static_cast<int>(mark)], stream_);
}

double CudaQueue::ElapsedUs(EpMark from, EpMark to) const {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, marks_[static_cast<int>(from)],
                           marks_[static_cast<int>(to)]) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return ms * 1000.0;
}

absl::Status CudaQueue::CopyToHost(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  MOE_CUDA_OK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  traffic_.d2h_bytes += bytes;
  ++traffic_.syncs;
  MOE_CUDA_OK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status CudaQueue::CopyFromHost(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  MOE_CUDA_OK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  traffic_.h2d_bytes += bytes;
  return absl::OkStatus();
}

absl::Status CudaQueue::Finish(Communicator& comm,
                               std::chrono::steady_clock::time_point deadline) {
  const cudaEvent_t done = marks_[static_cast<int>(EpMark::kDone)];
  // A device collective can wait forever on a lost peer: the communicator
  // polls with the deadline and aborts. Then nothing can block the stream.
  MOE_RETURN_IF_ERROR(AwaitQueue(*this, comm, done, deadline));
  if (pending_bytes_ > 0)
    std::memcpy(pending_dst_, pending_src_, pending_bytes_);
  pending_bytes_ = 0;
  return absl::OkStatus();
}

void CudaQueue::Drain(Communicator& comm,
                      std::chrono::steady_clock::time_point deadline) {
  // Work queued before a failure still writes the step's buffers: let it
  // end before the next step reuses them, by the step's deadline (an
  // exchange waiting on a peer that left is aborted then). The error that
  // brought us here is the one reported.
  DrainQueue(*this, comm, deadline);
  pending_bytes_ = 0;
}

absl::StatusOr<void*> CudaQueue::MarkDone() {
  MOE_CUDA_OK(cudaEventRecord(drained_, stream_));
  return static_cast<void*>(drained_);
}

absl::Status CudaQueue::Synchronize() {
  ++traffic_.syncs;
  MOE_CUDA_OK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

}  // namespace moe
