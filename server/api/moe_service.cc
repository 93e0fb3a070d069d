#include "server/api/moe_service.h"

#include "absl/strings/str_cat.h"
#include "server/api/forward_response.h"
#include "server/api/forward_stream.h"
#include "server/api/info_responses.h"
#include "server/api/modality_split.h"

namespace moe {

using Clock = std::chrono::steady_clock;

void MoeServiceImpl::Process(const char* method,
                             const moe::v1::ForwardRequest& request,
                             Clock::time_point deadline,
                             moe::v1::ForwardResponse* response,
                             std::function<void(const grpc::Status&)> finish) {
  const Clock::time_point arrival = Clock::now();
  RouterMetrics* metrics = options_.metrics;
  if (metrics != nullptr) metrics->RequestStarted();
  auto done = [metrics, method, arrival,
               finish = std::move(finish)](const grpc::Status& s) {
    if (metrics != nullptr) {
      metrics->RequestDone(
          method, s.error_code(),
          std::chrono::duration<double>(Clock::now() - arrival).count());
    }
    finish(s);
  };
  auto valid =
      ValidateForward(request, options_.model->info(), options_.limits);
  if (!valid.ok()) return done(ToGrpcStatus(valid.status()));
  auto req = std::make_unique<BatchRequest>();
  req->layer = valid->layer;
  req->x = valid->x;
  req->output_dtype = valid->output_dtype;
  req->token_ids = valid->token_ids;
  req->route_source = valid->caller.source;
  req->routing_experts = valid->caller.expert_ids;
  req->routing_weights = valid->caller.weights;
  req->router_logits = valid->caller.logits;
  req->return_router_logits = valid->caller.return_logits;
  req->shared = valid->caller.shared;
  req->arrival = arrival;
  req->deadline = deadline;
  response->set_request_id(request.request_id());
  const int64_t hidden = options_.model->info().layer.hidden;
  // Only what the response needs travels with the callback.
  const ResponseParts parts{
      .routing = request.return_routing(),
      .timing = request.return_timing(),
      .router_logits = request.return_router_logits(),
      .experts = options_.model->info().layer.router_rows(),
      .shared_output = request.shared() == moe::v1::SHARED_SEPARATE};
  req->done = [parts, out = valid->output_dtype, hidden, arrival, response,
               done](const absl::Status& s, BatchResult& res) {
    if (!s.ok()) return done(ToGrpcStatus(s));
    const absl::Status filled =
        FillForwardResponse(parts, out, hidden, res, arrival, response);
    done(filled.ok() ? grpc::Status::OK : ToGrpcStatus(filled));
  };
  if (valid->vision_layer >= 0) {
    // Text and vision rows run their own expert sets, joined before `done`.
    const absl::Status s = SubmitByModality(
        std::move(req), valid->token_types, valid->vision_layer, parts.experts,
        [this](std::unique_ptr<BatchRequest> part) {
          return options_.batcher->Submit(std::move(part));
        });
    if (!s.ok()) done(ToGrpcStatus(s));
    return;
  }
  if (absl::Status s = options_.batcher->Submit(std::move(req)); !s.ok()) {
    done(ToGrpcStatus(s));
  }
}

grpc::Status MoeServiceImpl::Authorize(
    const grpc::ServerContextBase& ctx) const {
  return options_.auth != nullptr ? options_.auth->Check(ctx)
                                  : grpc::Status::OK;
}

grpc::ServerUnaryReactor* MoeServiceImpl::Forward(
    grpc::CallbackServerContext* ctx, const moe::v1::ForwardRequest* request,
    moe::v1::ForwardResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  if (grpc::Status s = Authorize(*ctx); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  Process("Forward", *request, SteadyDeadline(ctx->deadline()), response,
          [reactor](const grpc::Status& s) { reactor->Finish(s); });
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
MoeServiceImpl::ForwardStream(grpc::CallbackServerContext* ctx) {
  return new ForwardStreamReactor(
      ctx, Authorize(*ctx),
      {options_.stream_max_inflight, options_.stream_max_queued_tokens},
      [this](const moe::v1::ForwardRequest& request, Clock::time_point deadline,
             moe::v1::ForwardResponse* response,
             std::function<void(const grpc::Status&)> done) {
        Process("ForwardStream", request, deadline, response, std::move(done));
      });
}

grpc::ServerUnaryReactor* MoeServiceImpl::GetModelInfo(
    grpc::CallbackServerContext* ctx, const moe::v1::GetModelInfoRequest*,
    moe::v1::ModelInfo* info) {
  if (grpc::Status s = Authorize(*ctx); !s.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(s);
    return reactor;
  }
  FillModelInfo(*options_.model, options_.readiness, options_.max_batch_tokens,
                options_.limits.max_request_tokens, options_.device, info);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* MoeServiceImpl::GetExpertStats(
    grpc::CallbackServerContext* ctx, const moe::v1::GetExpertStatsRequest* req,
    moe::v1::ExpertStats* stats) {
  auto* reactor = ctx->DefaultReactor();
  if (grpc::Status s = Authorize(*ctx); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  if (!options_.model->info().HasLayer(req->layer())) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     absl::StrCat("layer: ", req->layer(),
                                  " is not an MoE layer of this model")));
    return reactor;
  }
  FillExpertStats(options_.stats->Snapshot(req->layer(), req->reset()), stats);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* MoeServiceImpl::Rebalance(
    grpc::CallbackServerContext* ctx, const moe::v1::RebalanceRequest*,
    moe::v1::RebalanceResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  if (grpc::Status s = Authorize(*ctx); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  if (options_.rebalancer == nullptr) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "Rebalance places experts on workers: this router has none"));
    return reactor;
  }
  // Answered from the rebalancer's thread once the workers have switched.
  options_.rebalancer->Request(
      [reactor, response](const absl::StatusOr<RebalanceOutcome>& r) {
        if (r.ok()) {
          response->set_epoch(r->epoch);
          response->set_seconds(r->seconds);
        }
        reactor->Finish(r.ok() ? grpc::Status::OK : ToGrpcStatus(r.status()));
      });
  return reactor;
}

}  // namespace moe
