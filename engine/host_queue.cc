#include "engine/host_queue.h"

#include <cstring>

namespace moe {
namespace {

absl::Status Copy(const void* src, void* dst, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

}  // namespace

void HostQueue::Mark(EpMark mark) {
  marks_[static_cast<int>(mark)] = std::chrono::steady_clock::now();
}

double HostQueue::ElapsedUs(EpMark from, EpMark to) const {
  return std::chrono::duration<double, std::micro>(
             marks_[static_cast<int>(to)] - marks_[static_cast<int>(from)])
      .count();
}

absl::Status HostQueue::CopyToHost(const void* src, void* dst, size_t bytes) {
  return Copy(src, dst, bytes);
}

absl::Status HostQueue::CopyFromHost(const void* src, void* dst, size_t bytes) {
  return Copy(src, dst, bytes);
}

}  // namespace moe
