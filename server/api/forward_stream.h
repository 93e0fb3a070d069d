// One ForwardStream call (part of the MoeService RPC handler): reads
// requests as they come and writes responses in request order. A failed
// request answers with its status (and its request_id) in the response and
// the stream goes on. Flow control: at most `max_inflight` requests are
// read and not yet written back, and (when `max_queued_tokens` > 0) the
// stream's requests submitted and not yet answered hold at most about that
// many tokens; beyond either, the stream is not read until answers drain,
// so a client that writes and never reads holds a bounded amount of the
// router's memory (and HTTP/2 flow control stops its writes). A message
// that does not parse as a ForwardRequest stops the reading: the requests
// before it are answered, then the stream ends with INVALID_ARGUMENT naming
// the message's index (from 0).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "moe/v1/moe.pb.h"

namespace moe {

class ForwardStreamReactor
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  struct Limits {
    int max_inflight = 64;          // at least 1 is used
    int64_t max_queued_tokens = 0;  // 0: no bound
  };
  // Runs one request: fills the response, then calls `done` (possibly on
  // another thread, possibly before returning). The request and response
  // stay alive until then.
  using Process =
      std::function<void(const moe::v1::ForwardRequest& request,
                         std::chrono::steady_clock::time_point deadline,
                         moe::v1::ForwardResponse* response,
                         std::function<void(const grpc::Status&)> done)>;

  // Ends the call at once with `auth` when it is not OK. The reactor
  // deletes itself once gRPC is done with it and every request it handed
  // to `process` has been answered.
  ForwardStreamReactor(grpc::CallbackServerContext* ctx,
                       const grpc::Status& auth, Limits limits,
                       Process process);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  struct Entry {
    moe::v1::ForwardRequest request;  // until answered
    std::string request_id;
    int64_t tokens = 0;  // counted in outstanding_tokens_ until answered
    moe::v1::ForwardResponse response;
    grpc::ByteBuffer wire;  // the serialized response, once ready
    bool ready = false;
  };

  void Complete(Entry* entry, const grpc::Status& s);
  void MaybeReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::CallbackServerContext* const ctx_;
  const Limits limits_;
  const Process process_;
  grpc::ByteBuffer read_buf_;
  moe::v1::ForwardRequest request_;
  absl::Mutex mu_;
  // Holds the requests read and not yet answered; a deque keeps their addresses
  // fixed while steps read them.
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet completed
  int64_t outstanding_tokens_ ABSL_GUARDED_BY(mu_) = 0;  // their tokens
  int64_t read_count_ ABSL_GUARDED_BY(mu_) = 0;
  // Holds the index of the first message that did not parse (-1: none).
  int64_t bad_index_ ABSL_GUARDED_BY(mu_) = -1;
  // Is true while a read is started or being handled.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe
