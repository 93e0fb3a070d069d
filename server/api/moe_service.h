// moe.v1.MoeService on gRPC's callback API: requests wait for their batch
// without holding a thread. The RPC handler is this class (authorization,
// validation, submitting to the batcher, whose admission also checks the
// group's readiness) and its pieces:
// request_validator (a ForwardRequest checked and viewed as plain structs),
// forward_response (the answer from a request's share of a step),
// forward_stream (one ForwardStream call), info_responses (GetModelInfo,
// GetExpertStats) and rpc_edge (status and deadline conversions).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <string>

#include "moe/v1/moe.grpc.pb.h"
#include "server/api/request_validator.h"
#include "server/api/rpc_edge.h"
#include "server/api/token_auth.h"
#include "server/batching/batcher.h"
#include "server/placement/rebalancer.h"
#include "server/step/expert_stats.h"
#include "server/step/group_readiness.h"
#include "server/step/router_metrics.h"
#include "server/step/router_model.h"

namespace moe {

struct MoeServiceOptions {
  const RouterModel* model = nullptr;
  Batcher* batcher = nullptr;
  // GetModelInfo reads its readiness figures here; it is null when there are no
  // workers (P = 0).
  const GroupReadiness* readiness = nullptr;
  ExpertStatsBook* stats = nullptr;
  Rebalancer* rebalancer = nullptr;  // null: no workers
  RouterMetrics* metrics = nullptr;  // may be null
  const TokenAuth* auth = nullptr;   // may be null: no token needed
  ForwardLimits limits;
  int64_t max_batch_tokens = 0;
  std::string device = "cpu";
  // Bounds the requests of one ForwardStream read and not yet written back
  // (queued, computing, or answered and waiting for the client to read): beyond
  // it, the stream is not read until the client drains its answers.
  int stream_max_inflight = 64;
  // Bounds the tokens of one ForwardStream submitted and not yet answered (0:
  // no bound). A stream that writes without pause would otherwise keep the
  // batcher's token queue full on its own, so that every other client's request
  // is refused as over --max-queue-tokens; the router sets half of that queue.
  int64_t stream_max_queued_tokens = 0;
};

// ForwardStream is a raw (ByteBuffer) method, so that a message that does
// not parse ends the stream with INVALID_ARGUMENT naming it: with a typed
// callback stream, gRPC 1.51 reports a message that fails to deserialize as
// a failed read (OnReadDone(false)), the same as the client's half-close.
using MoeServiceBase = moe::v1::MoeService::WithCallbackMethod_Forward<
    moe::v1::MoeService::WithRawCallbackMethod_ForwardStream<
        moe::v1::MoeService::WithCallbackMethod_GetModelInfo<
            moe::v1::MoeService::WithCallbackMethod_GetExpertStats<
                moe::v1::MoeService::WithCallbackMethod_Rebalance<
                    moe::v1::MoeService::Service>>>>>;

class MoeServiceImpl final : public MoeServiceBase {
 public:
  explicit MoeServiceImpl(MoeServiceOptions options)
      : options_(std::move(options)) {}

  grpc::ServerUnaryReactor* Forward(
      grpc::CallbackServerContext* ctx, const moe::v1::ForwardRequest* request,
      moe::v1::ForwardResponse* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ForwardStream(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* GetModelInfo(
      grpc::CallbackServerContext* ctx,
      const moe::v1::GetModelInfoRequest* request,
      moe::v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetExpertStats(
      grpc::CallbackServerContext* ctx,
      const moe::v1::GetExpertStatsRequest* request,
      moe::v1::ExpertStats* response) override;
  grpc::ServerUnaryReactor* Rebalance(
      grpc::CallbackServerContext* ctx,
      const moe::v1::RebalanceRequest* request,
      moe::v1::RebalanceResponse* response) override;

  // Validates and runs one request; fills `response` and then calls `done`
  // (possibly on another thread, possibly before returning). `method`
  // labels the metrics.
  void Process(const char* method, const moe::v1::ForwardRequest& request,
               std::chrono::steady_clock::time_point deadline,
               moe::v1::ForwardResponse* response,
               std::function<void(const grpc::Status&)> done);

  const MoeServiceOptions& options() const { return options_; }
  // OK, or UNAUTHENTICATED when a bearer token is required and missing or
  // wrong.
  grpc::Status Authorize(const grpc::ServerContextBase& ctx) const;

 private:
  MoeServiceOptions options_;
};

}  // namespace moe
