// The parts of one router session that Shutdown reaches from another
// thread: the stop flag, the session's call (cancelled while nothing has
// been read yet) and its message queue (closed once there is one, so the
// message being handled is finished and those behind it are not started),
// and the reader's end, which the executor waits for when it leaves.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/blocking_queue.h"
#include "moe/v1/worker.pb.h"

namespace moe {

class SessionControl {
 public:
  // Shutdown: the queue is closed (the message being handled is finished,
  // the ones behind it are not started), or before there is one, the call
  // cancelled.
  void Stop();
  bool stopping() const { return stopping_; }
  const std::atomic<bool>* stopping_flag() const { return &stopping_; }
  // False when Stop came first (the session must not start).
  bool Begin(grpc::ClientContext* ctx);
  void SetQueue(BlockingQueue<moe::v1::RouterMessage>* queue);
  // The reader has read its last message.
  void ReaderDone();
  // Waits at most `timeout` for ReaderDone; false if it did not come.
  bool AwaitReaderDone(std::chrono::milliseconds timeout);
  void End();

 private:
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  BlockingQueue<moe::v1::RouterMessage>* queue_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe
