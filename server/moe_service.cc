#include "server/moe_service.h"

#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/moe_config.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

void FillResponse(const moe::v1::ForwardRequest& req, moe::v1::DType out_dtype,
                  int64_t hidden, BatchResult& res, Clock::time_point arrival,
                  moe::v1::ForwardResponse* resp) {
  const int64_t n = res.routing.tokens;
  EncodeMatrix(res.y.data(), n, hidden, out_dtype, resp->mutable_output());
  if (req.return_routing()) {
    auto* r = resp->mutable_routing();
    r->set_tokens(n);
    r->set_slots(static_cast<int32_t>(res.routing.slots));
    r->mutable_expert_ids()->Assign(res.routing.expert.begin(),
                                    res.routing.expert.end());
    r->mutable_weights()->Assign(res.routing.weight.begin(),
                                 res.routing.weight.end());
  }
  if (req.return_timing()) {
    auto* t = resp->mutable_timing();
    t->set_queue_us(res.queue_us);
    t->set_route_us(res.times.route_us);
    t->set_plan_us(res.times.plan_us);
    t->set_dispatch_us(res.times.dispatch_us);
    t->set_experts_us(res.times.experts_us);
    t->set_combine_us(res.times.combine_us);
    t->set_shared_us(res.times.shared_us);
    t->set_wire_us(res.times.wire_us);
    t->set_total_us(
        std::chrono::duration<double, std::micro>(Clock::now() - arrival)
            .count());
    t->set_batch_tokens(res.batch_tokens);
    t->set_batch_requests(res.batch_requests);
  }
}

// ForwardStream: reads requests as they come (up to a limit in flight) and
// writes responses in request order. A failed request answers with its
// status in the response and the stream goes on.
class StreamReactor : public grpc::ServerBidiReactor<moe::v1::ForwardRequest,
                                                     moe::v1::ForwardResponse> {
 public:
  StreamReactor(MoeServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx) {
    if (grpc::Status s = service_->Authorize(*ctx); !s.ok()) {
      finished_ = true;
      Finish(s);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok) {
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    entries_.emplace_back();
    Entry* entry = &entries_.back();
    ++outstanding_;
    lock.unlock();
    service_->Process(
        "ForwardStream", request_, SteadyDeadline(ctx_->deadline()),
        &entry->response,
        [this, entry](const grpc::Status& s) { Complete(entry, s); });
    lock.lock();
    // The request has been copied out by Process; read the next one unless
    // too many are in flight.
    if (outstanding_ < service_->options().stream_max_inflight) {
      StartRead(&request_);
    } else {
      read_paused_ = true;
    }
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    entries_.pop_front();
    if (!ok) {
      broken_ = true;
    }
    WriteNextLocked();
    MaybeFinishLocked();
  }

  void OnDone() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_ = true;
    if (outstanding_ == 0) {
      lock.unlock();
      delete this;
    }
  }

 private:
  struct Entry {
    moe::v1::ForwardResponse response;
    bool ready = false;
  };

  void Complete(Entry* entry, const grpc::Status& s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!s.ok()) {
      entry->response.Clear();
      entry->response.set_error_code(static_cast<int>(s.error_code()));
      entry->response.set_error_message(s.error_message());
    }
    entry->ready = true;
    --outstanding_;
    if (done_) {
      if (outstanding_ == 0) {
        lock.unlock();
        delete this;
      }
      return;
    }
    if (read_paused_ && !reads_done_) {
      read_paused_ = false;
      StartRead(&request_);
    }
    WriteNextLocked();
    MaybeFinishLocked();
  }

  void WriteNextLocked() {
    if (writing_ || broken_ || entries_.empty() || !entries_.front().ready)
      return;
    writing_ = true;
    StartWrite(&entries_.front().response);
  }

  void MaybeFinishLocked() {
    if (finished_) return;
    if (broken_ || (reads_done_ && entries_.empty() && outstanding_ == 0)) {
      finished_ = true;
      Finish(broken_
                 ? grpc::Status(grpc::StatusCode::CANCELLED, "stream broken")
                 : grpc::Status::OK);
    }
  }

  MoeServiceImpl* service_;
  grpc::CallbackServerContext* ctx_;
  moe::v1::ForwardRequest request_;
  std::mutex mu_;
  std::deque<Entry> entries_;  // in request order; deque keeps addresses
  int outstanding_ = 0;        // submitted, not yet completed
  bool reads_done_ = false;
  bool read_paused_ = false;
  bool writing_ = false;
  bool broken_ = false;
  bool finished_ = false;
  bool done_ = false;
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

Clock::time_point SteadyDeadline(
    std::chrono::system_clock::time_point deadline) {
  const auto sys_now = std::chrono::system_clock::now();
  const auto far = std::chrono::hours(24);
  if (deadline <= sys_now) return Clock::now();
  if (deadline - sys_now > far) return Clock::now() + far;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(deadline - sys_now);
}

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
  if (options_.pool != nullptr) {
    const WorkerPool::State st = options_.pool->state();
    if (!st.ready) {
      return done(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("not ready: ", st.ready_workers, " of ", st.world_size,
                       " workers ready (", st.connected, " connected)")));
    }
  }
  auto req = std::make_unique<BatchRequest>();
  req->layer = valid->layer;
  req->x = std::move(valid->x);
  req->arrival = arrival;
  req->deadline = deadline;
  response->set_request_id(request.request_id());
  const int64_t hidden = options_.model->info().layer.hidden;
  // Only what the response needs travels with the callback.
  moe::v1::ForwardRequest flags;
  flags.set_return_routing(request.return_routing());
  flags.set_return_timing(request.return_timing());
  req->done = [flags, out = valid->output_dtype, hidden, arrival, response,
               done](const absl::Status& s, BatchResult& res) {
    if (!s.ok()) return done(ToGrpcStatus(s));
    FillResponse(flags, out, hidden, res, arrival, response);
    done(grpc::Status::OK);
  };
  if (!options_.batcher->Submit(std::move(req))) {
    done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "router shutting down"));
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

grpc::ServerBidiReactor<moe::v1::ForwardRequest, moe::v1::ForwardResponse>*
MoeServiceImpl::ForwardStream(grpc::CallbackServerContext* ctx) {
  return new StreamReactor(this, ctx);
}

grpc::ServerUnaryReactor* MoeServiceImpl::GetModelInfo(
    grpc::CallbackServerContext* ctx, const moe::v1::GetModelInfoRequest*,
    moe::v1::ModelInfo* info) {
  if (grpc::Status s = Authorize(*ctx); !s.ok()) {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(s);
    return reactor;
  }
  const ModelInfo& m = options_.model->info();
  info->set_family(m.family);
  info->set_source(m.source);
  info->set_hidden(m.layer.hidden);
  info->set_inter(m.layer.inter);
  info->set_experts(m.layer.num_experts);
  info->set_top_k(m.layer.top_k);
  info->set_shared_inter(m.layer.shared_inter);
  for (int64_t l : m.moe_layers) info->add_moe_layers(static_cast<int32_t>(l));
  info->set_weight_dtype(std::string(WeightDTypeName(options_.model->dtype())));
  info->set_layer_config_json(MoeLayerConfigToJson(m.layer));
  info->set_max_batch_tokens(options_.max_batch_tokens);
  info->set_max_request_tokens(options_.limits.max_request_tokens);
  info->set_device(options_.device);
  if (options_.pool != nullptr) {
    const WorkerPool::State st = options_.pool->state();
    info->set_num_workers(st.world_size);
    info->set_ready_workers(st.ready_workers);
    info->set_ready(st.ready);
  } else {
    info->set_ready(true);
  }
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
  *stats = options_.stats->Snapshot(req->layer(), req->reset());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace moe
