// One session's Join stream to the router, as the worker's threads share
// it: the executor's answers, the placement loader's and the heartbeats are
// written under one lock (gRPC allows one writer at a time) until the writes
// are closed; the reader notes the newest generation and heartbeat interval
// it has read, which the others act on.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "moe/v1/worker.grpc.pb.h"

namespace moe {

using JoinReaderWriter =
    grpc::ClientReaderWriter<moe::v1::WorkerMessage, moe::v1::RouterMessage>;

// The generation of an Assignment, Step or PlacementUpdate (0 for anything
// else).
uint64_t GenerationOf(const moe::v1::RouterMessage& msg);

class JoinStream {
 public:
  JoinStream(JoinReaderWriter* stream,
             std::shared_ptr<moe::v1::WorkerControl::Stub> stub,
             std::string collective_host, const std::atomic<bool>* stopping);

  // From any thread; false (and nothing sent) once the writes are closed,
  // or when the stream is broken.
  bool Write(const moe::v1::WorkerMessage& msg);
  // The reader's: the next message, noting its generation and an
  // Assignment's heartbeat interval; false at the end of the stream.
  bool Read(moe::v1::RouterMessage* msg);
  // No writes from now on (heartbeats end); with `writes_done`, tells the
  // router too (the worker leaves). Idempotent.
  void CloseWrites(bool writes_done);
  // True once WritesDone went out.
  bool writes_done() const;
  // Sends a Heartbeat every heartbeat interval until the writes close.
  void RunHeartbeats();

  // The newest generation read so far: the reader runs ahead of the
  // executor, which skips what is older (a backlog queued while stopped).
  uint64_t newest_generation() const { return newest_generation_; }
  int64_t heartbeat_interval_ms() const { return heartbeat_interval_ms_; }
  // The address this session registered for the collective transport.
  const std::string& collective_host() const { return collective_host_; }
  // The router's WorkerControl service (its rendezvous store) on this
  // session's channel.
  const std::shared_ptr<moe::v1::WorkerControl::Stub>& stub() const {
    return stub_;
  }
  // The worker is shutting down.
  bool stopping() const { return *stopping_; }

 private:
  JoinReaderWriter* const stream_;
  const std::shared_ptr<moe::v1::WorkerControl::Stub> stub_;
  const std::string collective_host_;
  const std::atomic<bool>* const stopping_;
  std::atomic<uint64_t> newest_generation_{0};
  std::atomic<int64_t> heartbeat_interval_ms_{500};
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe
