// The worker group's gRPC edge: the WorkerControl service. It checks each
// call's credentials, reads a Join stream's messages and hands them to the
// group (WorkerGroup) as plain calls, encodes what the group
// sends a member (GroupAssignment, PlacementUpdate) into wire messages, and
// adapts StoreSet and StoreGet to the group's rendezvous store. The only part
// of the worker group that reads or writes worker messages, besides the step
// codecs.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>

#include "core/serving_defaults.h"
#include "moe/v1/worker.grpc.pb.h"
#include "server/api/worker_auth.h"
#include "server/group/worker_group.h"

namespace moe {

// Holds what every Assignment carries besides the group's decisions.
struct WorkerControlOptions {
  moe::v1::ModelSpec model;
  std::chrono::milliseconds collective_timeout{kDefaultStepTimeoutMs};
  // Bounds one collective connect attempt (Assignment.connect_timeout_ms); the
  // worker retries within the generation until collective_timeout.
  std::chrono::milliseconds connect_timeout{2000};
  int64_t max_batch_tokens = 0;
  // The service checks every WorkerControl call against it first; null lets
  // every call through.
  const WorkerAuth* auth = nullptr;
};

// Join is a synchronous method (one thread per worker, P of them); the
// store's methods use the callback API, so a parked StoreGet holds no
// thread.
using WorkerControlBase = moe::v1::WorkerControl::WithCallbackMethod_StoreSet<
    moe::v1::WorkerControl::WithCallbackMethod_StoreGet<
        moe::v1::WorkerControl::Service>>;

class WorkerControlService final : public WorkerControlBase {
 public:
  // `group` outlives the service (and the server that serves it).
  WorkerControlService(WorkerGroup* group, WorkerControlOptions options)
      : group_(group), options_(std::move(options)) {}

  // Register first, then Ready, StepResult, PlacementLoaded and Heartbeat
  // messages until the worker leaves.
  grpc::Status Join(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<moe::v1::RouterMessage, moe::v1::WorkerMessage>*
          stream) override;
  // Serves the rendezvous store of the current generation (rendezvous_store.h).
  // A StoreGet waits without a thread until its keys are set, its timeout
  // passes, its caller cancels, or the generation ends.
  grpc::ServerUnaryReactor* StoreSet(grpc::CallbackServerContext* ctx,
                                     const moe::v1::StoreSetRequest* req,
                                     moe::v1::StoreSetResponse* resp) override;
  grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext* ctx,
                                     const moe::v1::StoreGetRequest* req,
                                     moe::v1::StoreGetResponse* resp) override;

 private:
  class Stream;
  class StoreWait;
  // Hands one message of `member`'s stream to the group.
  void Dispatch(const std::shared_ptr<Stream>& member,
                moe::v1::WorkerMessage& msg);

  WorkerGroup* const group_;
  const WorkerControlOptions options_;
};

// Returns the wire Assignment of `a`, with the edge's settings.
moe::v1::RouterMessage EncodeAssignment(const GroupAssignment& a,
                                        const WorkerControlOptions& options);
// Returns the wire PlacementUpdate of `u`.
moe::v1::RouterMessage EncodePlacement(const PlacementUpdate& u);

}  // namespace moe
