#include "engine/cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include <atomic>

#include "engine/cuda/cuda_status.h"

namespace moe {
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

int64_t DeviceAllocationCount() { return g_allocations.load(); }

template <MemorySpace kSpace>
absl::StatusOr<CudaBuffer<kSpace>> CudaBuffer<kSpace>::Allocate(size_t bytes) {
  CudaBuffer b;
  if (bytes == 0) return b;
  if constexpr (kSpace == MemorySpace::kDevice) {
    MOE_CUDA_OK(cudaMalloc(&b.data_, bytes));
  } else {
    MOE_CUDA_OK(cudaMallocHost(&b.data_, bytes));
  }
  b.size_ = bytes;
  g_allocations.fetch_add(1);
  return b;
}

template <MemorySpace kSpace>
void CudaBuffer<kSpace>::Release() {
  if (data_ == nullptr) return;
  if constexpr (kSpace == MemorySpace::kDevice) {
    cudaFree(data_);
  } else {
    cudaFreeHost(data_);
  }
  data_ = nullptr;
  size_ = 0;
}

template class CudaBuffer<MemorySpace::kDevice>;
template class CudaBuffer<MemorySpace::kPinnedHost>;

absl::Status AwaitLoadStream() {
  MOE_CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
  return absl::OkStatus();
}

}  // namespace moe
