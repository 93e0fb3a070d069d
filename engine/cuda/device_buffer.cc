#include "engine/cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include <atomic>

#include "engine/cuda/cuda_status.h"

namespace moe {
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

int64_t DeviceAllocationCount() { return g_allocations.load(); }

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  MOE_CUDA_OK(cudaMalloc(&b.data_, bytes));
  b.size_ = bytes;
  g_allocations.fetch_add(1);
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  MOE_CUDA_OK(cudaMallocHost(&b.data_, bytes));
  b.size_ = bytes;
  g_allocations.fetch_add(1);
  return b;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

}  // namespace moe
