#include "worker/session_control.h"

#include "absl/time/time.h"

namespace moe {

void SessionControl::Stop() {
  stopping_ = true;
  absl::MutexLock lock(&mu_);
  if (queue_ != nullptr) {
    queue_->Close();  // the executor finishes its message, then leaves
  } else if (ctx_ != nullptr) {
    ctx_->TryCancel();
  }
}

bool SessionControl::Begin(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  ctx_ = ctx;
  reader_done_ = false;
  return true;
}

void SessionControl::SetQueue(BlockingQueue<moe::v1::RouterMessage>* queue) {
  absl::MutexLock lock(&mu_);
  queue_ = queue;
  if (stopping_) queue->Close();  // Shutdown came before the queue
}

void SessionControl::ReaderDone() {
  absl::MutexLock lock(&mu_);
  reader_done_ = true;
  queue_ = nullptr;
}

bool SessionControl::AwaitReaderDone(std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&reader_done_),
                              absl::FromChrono(timeout));
}

void SessionControl::End() {
  absl::MutexLock lock(&mu_);
  ctx_ = nullptr;
}

}  // namespace moe
