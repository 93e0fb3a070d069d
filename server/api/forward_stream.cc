#include "server/api/forward_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "moe/v1/moe.grpc.pb.h"  // SerializationTraits for the messages
#include "server/api/rpc_edge.h"

namespace moe {

ForwardStreamReactor::ForwardStreamReactor(grpc::CallbackServerContext* ctx,
                                           const grpc::Status& auth,
                                           Limits limits, Process process)
    : ctx_(ctx),
      limits_{std::max(limits.max_inflight, 1), limits.max_queued_tokens},
      process_(std::move(process)) {
  absl::MutexLock lock(&mu_);
  if (!auth.ok()) {
    finished_ = true;
    Finish(auth);
    return;
  }
  MaybeReadLocked();
}

void ForwardStreamReactor::OnReadDone(bool ok) {
  absl::ReleasableMutexLock lock(&mu_);
  if (!ok) {
    reading_ = false;
    reads_done_ = true;
    MaybeFinishLocked();
    return;
  }
  const int64_t index = read_count_++;
  // The read stays "in progress" (reading_) until the request has been
  // handed to process_: an answer completing meanwhile must not start the
  // next read into the buffers still in use.
  if (!grpc::SerializationTraits<moe::v1::ForwardRequest>::Deserialize(
           &read_buf_, &request_)
           .ok()) {
    reading_ = false;
    reads_done_ = true;
    bad_index_ = index;
    MaybeFinishLocked();
    return;
  }
  entries_.emplace_back();
  Entry* entry = &entries_.back();
  // The entry keeps the request until it is answered: the step reads its
  // rows in place.
  entry->request.Swap(&request_);
  entry->request_id = entry->request.request_id();
  const auto& shape = entry->request.hidden_states().shape();
  entry->tokens = shape.size() == 2 ? std::max<int64_t>(shape[0], 0) : 0;
  outstanding_tokens_ += entry->tokens;
  ++outstanding_;
  lock.Release();
  process_(entry->request, SteadyDeadline(ctx_->deadline()), &entry->response,
           [this, entry](const grpc::Status& s) { Complete(entry, s); });
  absl::MutexLock relock(&mu_);
  reading_ = false;
  MaybeReadLocked();
}

void ForwardStreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  entries_.pop_front();
  if (!ok) broken_ = true;
  WriteNextLocked();
  MaybeReadLocked();
  MaybeFinishLocked();
}

void ForwardStreamReactor::OnDone() {
  bool last;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    last = outstanding_ == 0;
  }
  if (last) delete this;
}

void ForwardStreamReactor::Complete(Entry* entry, const grpc::Status& s) {
  // Nothing else touches the entry until it is marked ready.
  moe::v1::ForwardRequest().Swap(&entry->request);  // its memory goes now
  if (!s.ok()) {
    entry->response.Clear();
    entry->response.set_request_id(entry->request_id);
    entry->response.set_error_code(static_cast<int>(s.error_code()));
    entry->response.set_error_message(s.error_message());
  }
  bool own_buffer = false;
  if (!grpc::SerializationTraits<moe::v1::ForwardResponse>::Serialize(
           entry->response, &entry->wire, &own_buffer)
           .ok()) {
    moe::v1::ForwardResponse failed;
    failed.set_request_id(entry->request_id);
    failed.set_error_code(grpc::StatusCode::INTERNAL);
    failed.set_error_message("response could not be serialized");
    (void)grpc::SerializationTraits<moe::v1::ForwardResponse>::Serialize(
        failed, &entry->wire, &own_buffer);
  }
  entry->response.Clear();
  bool last;
  {
    absl::MutexLock lock(&mu_);
    entry->ready = true;
    --outstanding_;
    outstanding_tokens_ -= entry->tokens;
    last = done_ && outstanding_ == 0;
    if (!done_) {
      WriteNextLocked();
      MaybeReadLocked();  // the stream's queued tokens went down
      MaybeFinishLocked();
    }
  }
  if (last) delete this;
}

void ForwardStreamReactor::MaybeReadLocked() {
  if (reading_ || reads_done_ || broken_ || finished_) return;
  if (static_cast<int>(entries_.size()) >= limits_.max_inflight) {
    return;  // back-pressure
  }
  // Its share of the queue: one more request may pass the bound (its size
  // is unknown until read), so a lone request larger than the bound is
  // still served.
  if (limits_.max_queued_tokens > 0 &&
      outstanding_tokens_ >= limits_.max_queued_tokens) {
    return;
  }
  reading_ = true;
  StartRead(&read_buf_);
}

void ForwardStreamReactor::WriteNextLocked() {
  if (writing_ || broken_ || entries_.empty() || !entries_.front().ready) {
    return;
  }
  writing_ = true;
  StartWrite(&entries_.front().wire);
}

void ForwardStreamReactor::MaybeFinishLocked() {
  if (finished_) return;
  if (broken_) {
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    return;
  }
  if (!reads_done_ || reading_ || !entries_.empty() || outstanding_ != 0) {
    return;
  }
  finished_ = true;
  if (bad_index_ >= 0) {
    Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("ForwardStream message ", bad_index_,
                                     " (counting from 0) is not a valid "
                                     "moe.v1.ForwardRequest; the ",
                                     bad_index_, " before it were answered")));
  } else {
    Finish(grpc::Status::OK);
  }
}

}  // namespace moe
