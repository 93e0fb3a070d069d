// A heap buffer aligned for vector loads, for packed weights.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace moe {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) : size_(bytes) {
    if (bytes > 0) {
      const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
      data_.reset(
          static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded)));
    }
  }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool allocated() const { return data_ != nullptr || size_ == 0; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace moe
