// Owning buffers in device memory and in pinned host memory (for async
// copies). Every allocation is counted, so tests and benchmarks can check
// that the step path allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace moe {

enum class MemorySpace { kDevice, kPinnedHost };

template <MemorySpace kSpace>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  // An empty buffer (null data) for 0 bytes.
  static absl::StatusOr<CudaBuffer> Allocate(size_t bytes);
  ~CudaBuffer() { Release(); }
  CudaBuffer(CudaBuffer&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  CudaBuffer& operator=(CudaBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      data_ = o.data_;
      size_ = o.size_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  void Release();

  void* data_ = nullptr;
  size_t size_ = 0;
};

using DeviceBuffer = CudaBuffer<MemorySpace::kDevice>;
using PinnedBuffer = CudaBuffer<MemorySpace::kPinnedHost>;

// cudaMalloc and cudaMallocHost calls made through these buffers so far.
int64_t DeviceAllocationCount();

// A load's uploads, dequantisations and zero fills run on the legacy default
// stream (cudaMemcpy, cudaMemset, kernels on stream 0), which no step stream
// (non-blocking) waits for: a load waits for that stream alone before its
// weights serve. Never the whole device: a load may run while another
// backend of the device captures a graph on its step stream, during which
// cudaDeviceSynchronize is an error that also breaks the capture.
absl::Status AwaitLoadStream();

}  // namespace moe
