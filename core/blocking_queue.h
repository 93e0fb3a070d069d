// A closable, bounded multi-producer queue: Push waits while it holds
// `capacity` items, Pop until an item or Close. The bound turns a consumer
// that falls behind into back-pressure on the producer (for the worker's
// router messages: on the stream's reads, and through gRPC's flow control
// on the router's writes) instead of memory growing without limit.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace moe {

template <typename T>
class BlockingQueue {
 public:
  explicit BlockingQueue(size_t capacity)
      : capacity_(capacity == 0 ? 1 : capacity) {}

  // Waits while the queue is full; false (and the item is dropped) once
  // closed, also while waiting.
  bool Push(T item) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BlockingQueue::HasRoomLocked));
    if (closed_) return false;
    items_.push_back(std::move(item));
    return true;
  }
  // The next item; nullopt once closed and drained.
  std::optional<T> Pop() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BlockingQueue::ReadyLocked));
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }
  // Ends every wait: pushes fail from now on, pops drain what is queued.
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  size_t capacity() const { return capacity_; }

 private:
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !items_.empty();
  }
  bool HasRoomLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || items_.size() < capacity_;
  }

  const size_t capacity_;
  absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe
