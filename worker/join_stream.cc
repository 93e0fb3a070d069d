#include "worker/join_stream.h"

#include "absl/time/time.h"

namespace moe {

uint64_t GenerationOf(const moe::v1::RouterMessage& msg) {
  if (msg.has_placement()) return msg.placement().generation();
  if (msg.has_assignment()) return msg.assignment().generation();
  if (msg.has_step()) return msg.step().generation();
  return 0;
}

JoinStream::JoinStream(JoinReaderWriter* stream,
                       std::shared_ptr<moe::v1::WorkerControl::Stub> stub,
                       std::string collective_host,
                       const std::atomic<bool>* stopping)
    : stream_(stream),
      stub_(std::move(stub)),
      collective_host_(std::move(collective_host)),
      stopping_(stopping) {}

bool JoinStream::Write(const moe::v1::WorkerMessage& msg) {
  absl::MutexLock lock(&mu_);
  return !closed_ && stream_->Write(msg);
}

bool JoinStream::Read(moe::v1::RouterMessage* msg) {
  if (!stream_->Read(msg)) return false;
  if (msg->has_assignment() && msg->assignment().heartbeat_interval_ms() > 0) {
    heartbeat_interval_ms_ = msg->assignment().heartbeat_interval_ms();
  }
  if (const uint64_t g = GenerationOf(*msg); g > newest_generation_) {
    newest_generation_ = g;
  }
  return true;
}

void JoinStream::CloseWrites(bool writes_done) {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  if (writes_done && !writes_done_) {
    stream_->WritesDone();
    writes_done_ = true;
  }
}

bool JoinStream::writes_done() const {
  absl::MutexLock lock(&mu_);
  return writes_done_;
}

void JoinStream::RunHeartbeats() {
  absl::MutexLock lock(&mu_);
  while (!closed_) {
    // Wakes early when the writes close.
    mu_.AwaitWithTimeout(absl::Condition(&closed_),
                         absl::Milliseconds(heartbeat_interval_ms_.load()));
    if (closed_) break;
    moe::v1::WorkerMessage beat;
    beat.mutable_heartbeat()->set_generation(newest_generation_);
    if (!stream_->Write(beat)) break;
  }
}

}  // namespace moe
