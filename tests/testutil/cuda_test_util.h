// What the CUDA tests share: host vectors onto the device and back, and the
// row offsets of consecutive expert groups.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/cuda/device_buffer.h"
#include "gtest/gtest.h"

namespace moe::testing {

// A device copy of `v` (at least one byte, so that an empty vector still
// has an address; a failed allocation or copy fails the test).
template <typename T>
DeviceBuffer Upload(const std::vector<T>& v) {
  auto b = DeviceBuffer::Allocate(std::max<size_t>(v.size() * sizeof(T), 1));
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemcpy(b->data(), v.data(), v.size() * sizeof(T),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  return std::move(*b);
}

// The first `n` elements of `b` on the host.
template <typename T>
std::vector<T> Download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(
      cudaMemcpy(v.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost),
      cudaSuccess);
  return v;
}

// Offsets of groups of `counts` rows each, the first starting at `first`.
inline std::vector<int64_t> GroupOffsets(int64_t first,
                                         const std::vector<int64_t>& counts) {
  std::vector<int64_t> o = {first};
  for (int64_t c : counts) o.push_back(o.back() + c);
  return o;
}

}  // namespace moe::testing
