#include "server/moe_service.h"

#include <algorithm>
#include <cmath>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/finite_check.h"
#include "core/moe_config.h"
#include "core/process_memory.h"

namespace moe {
namespace {

using Clock = std::chrono::steady_clock;

// What the answer carries beyond the output rows, as the request asked.
struct ResponseParts {
  bool routing = false;
  bool timing = false;
};

void FillResponse(ResponseParts parts, DType out_dtype, int64_t hidden,
                  BatchResult& res, Clock::time_point arrival,
                  moe::v1::ForwardResponse* resp) {
  const int64_t n = res.routing.tokens;
  EncodeMatrix(res.y.data(), n, hidden, ToWireDType(out_dtype),
               resp->mutable_output());
  if (parts.routing) {
    auto* r = resp->mutable_routing();
    r->set_tokens(n);
    r->set_slots(static_cast<int32_t>(res.routing.slots));
    r->mutable_expert_ids()->Assign(res.routing.expert.begin(),
                                    res.routing.expert.end());
    r->mutable_weights()->Assign(res.routing.weight.begin(),
                                 res.routing.weight.end());
  }
  if (parts.timing) {
    auto* t = resp->mutable_timing();
    t->set_queue_us(res.queue_us);
    t->set_route_us(res.times.route_us);
    t->set_plan_us(res.times.plan_us);
    t->set_dispatch_us(res.times.dispatch_us);
    t->set_experts_us(res.times.experts_us);
    t->set_combine_us(res.times.combine_us);
    t->set_shared_us(res.times.shared_us);
    t->set_wire_us(res.times.wire_us);
    if (const WorkerStageTimes& w = res.times.critical_worker; w.rank >= 0) {
      auto* c = t->mutable_critical_worker();
      c->set_rank(w.rank);
      c->set_decode_us(w.decode_us);
      c->set_gather_us(w.gather_us);
      c->set_dispatch_wait_us(w.dispatch_wait_us);
      c->set_experts_us(w.experts_us);
      c->set_combine_wait_us(w.combine_wait_us);
      c->set_sum_us(w.sum_us);
      c->set_step_us(w.step_us);
    }
    t->set_total_us(
        std::chrono::duration<double, std::micro>(Clock::now() - arrival)
            .count());
    t->set_batch_tokens(res.batch_tokens);
    t->set_batch_requests(res.batch_requests);
  }
}

void FillStats(const LayerStats& l, moe::v1::ExpertStats* s) {
  s->set_layer(static_cast<int32_t>(l.layer));
  s->set_steps(l.steps);
  s->set_tokens(l.tokens);
  s->set_dropped_slots(l.dropped_slots);
  s->mutable_tokens_per_expert()->Assign(l.tokens_per_expert.begin(),
                                         l.tokens_per_expert.end());
  s->set_entropy(l.balance.entropy);
  s->set_normalized_entropy(l.balance.normalized_entropy);
  s->set_gini(l.balance.gini);
  s->set_max_over_mean(l.balance.max_over_mean);
  s->set_min_over_mean(l.balance.min_over_mean);
  s->mutable_rows_per_worker()->Assign(l.rows_per_worker.begin(),
                                       l.rows_per_worker.end());
  s->set_worker_max_over_mean(l.worker_max_over_mean);
  for (const std::vector<int32_t>& w : l.placement) {
    s->add_placement()->mutable_experts()->Assign(w.begin(), w.end());
  }
  s->mutable_replicas_per_expert()->Assign(l.replicas_per_expert.begin(),
                                           l.replicas_per_expert.end());
}

// ForwardStream: reads requests as they come and writes responses in
// request order. A failed request answers with its status (and its
// request_id) in the response and the stream goes on. Flow control: at most
// stream_max_inflight requests are read and not yet written back; beyond
// that the stream is not read until the client takes its answers, so a
// client that writes and never reads holds a bounded amount of the router's
// memory (and HTTP/2 flow control stops its writes). A message that does
// not parse as a ForwardRequest stops the reading: the requests before it
// are answered, then the stream ends with INVALID_ARGUMENT naming the
// message's index (from 0).
class StreamReactor
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(MoeServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service),
        ctx_(ctx),
        limit_(std::max(service->options().stream_max_inflight, 1)) {
    absl::MutexLock lock(&mu_);
    if (grpc::Status s = service_->Authorize(*ctx); !s.ok()) {
      finished_ = true;
      Finish(s);
      return;
    }
    MaybeReadLocked();
  }

  void OnReadDone(bool ok) override {
    absl::ReleasableMutexLock lock(&mu_);
    if (!ok) {
      reading_ = false;
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    const int64_t index = read_count_++;
    // The read stays "in progress" (reading_) until the request has been
    // handed to Process: an answer completing meanwhile must not start the
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
    service_->Process(
        "ForwardStream", entry->request, SteadyDeadline(ctx_->deadline()),
        &entry->response,
        [this, entry](const grpc::Status& s) { Complete(entry, s); });
    absl::MutexLock relock(&mu_);
    reading_ = false;
    MaybeReadLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    entries_.pop_front();
    if (!ok) {
      broken_ = true;
    }
    WriteNextLocked();
    MaybeReadLocked();
    MaybeFinishLocked();
  }

  void OnDone() override {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      last = outstanding_ == 0;
    }
    if (last) delete this;
  }

 private:
  struct Entry {
    moe::v1::ForwardRequest request;  // until answered
    std::string request_id;
    int64_t tokens = 0;  // counted in outstanding_tokens_ until answered
    moe::v1::ForwardResponse response;
    grpc::ByteBuffer wire;  // the serialized response, once ready
    bool ready = false;
  };

  void Complete(Entry* entry, const grpc::Status& s) {
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

  void MaybeReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reading_ || reads_done_ || broken_ || finished_) return;
    if (static_cast<int>(entries_.size()) >= limit_) return;  // back-pressure
    // Its share of the queue: one more request may pass the bound (its
    // size is unknown until read), so a lone request larger than the bound
    // is still served.
    const int64_t token_limit = service_->options().stream_max_queued_tokens;
    if (token_limit > 0 && outstanding_tokens_ >= token_limit) return;
    reading_ = true;
    StartRead(&read_buf_);
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || broken_ || entries_.empty() || !entries_.front().ready)
      return;
    writing_ = true;
    StartWrite(&entries_.front().wire);
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
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
      Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("ForwardStream message ", bad_index_,
                                    " (counting from 0) is not a valid "
                                    "moe.v1.ForwardRequest; the ",
                                    bad_index_, " before it were answered")));
    } else {
      Finish(grpc::Status::OK);
    }
  }

  MoeServiceImpl* service_;
  grpc::CallbackServerContext* ctx_;
  const int limit_;
  grpc::ByteBuffer read_buf_;
  moe::v1::ForwardRequest request_;
  absl::Mutex mu_;
  // Read, not yet written; a deque keeps their addresses.
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet completed
  int64_t outstanding_tokens_ ABSL_GUARDED_BY(mu_) = 0;  // their tokens
  int64_t read_count_ ABSL_GUARDED_BY(mu_) = 0;
  // The first message that did not parse.
  int64_t bad_index_ ABSL_GUARDED_BY(mu_) = -1;
  // A read is started or being handled.
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
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
    // With --hold-while-regrouping-ms the request queues like any other and
    // its step waits for the group (WorkerPool::AwaitGroup).
    if (!st.ready && !options_.pool->holds_steps()) {
      return done(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat(
              "not ready: ", st.ready_workers, " of ", st.world_size,
              " workers ready (", st.connected, " connected)", st.stalled,
              st.refusal.empty() ? "" : "; last refused: ", st.refusal)));
    }
  }
  auto req = std::make_unique<BatchRequest>();
  req->layer = valid->layer;
  req->x = valid->x;
  req->output_dtype = valid->output_dtype;
  req->token_ids = valid->token_ids;
  req->arrival = arrival;
  req->deadline = deadline;
  response->set_request_id(request.request_id());
  const int64_t hidden = options_.model->info().layer.hidden;
  // Only what the response needs travels with the callback.
  const ResponseParts parts{request.return_routing(), request.return_timing()};
  req->done = [parts, out = valid->output_dtype, hidden, arrival, response,
               done](const absl::Status& s, BatchResult& res) {
    if (!s.ok()) return done(ToGrpcStatus(s));
    // Finite inputs can still overflow (hidden states near the float
    // limit): never answer OK with a non-finite output.
    if (const int64_t bad =
            FirstNonFiniteRow(res.y.data(), res.routing.tokens, hidden);
        bad >= 0) {
      return done(grpc::Status(
          grpc::StatusCode::OUT_OF_RANGE,
          absl::StrCat("output: token ", bad,
                       " is not finite (NaN or infinity) although the input "
                       "was; its hidden states overflow the computation")));
    }
    FillResponse(parts, out, hidden, res, arrival, response);
    done(grpc::Status::OK);
  };
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
  info->set_expert_weight_bytes(
      PackedExpertBytes(m.layer, options_.model->dtype()));
  info->set_layer_config_json(MoeLayerConfigToJson(m.layer));
  info->set_hash_vocab(m.MaxHashVocab());
  for (int64_t l : m.HashLayers())
    info->add_hash_layers(static_cast<int32_t>(l));
  for (const auto& [l, c] : m.routing_overrides) {
    (*info->mutable_layer_config_overrides_json())[static_cast<int32_t>(l)] =
        MoeLayerConfigToJson(c);
  }
  info->set_max_batch_tokens(options_.max_batch_tokens);
  info->set_max_request_tokens(options_.limits.max_request_tokens);
  info->set_device(options_.device);
  const ProcessMemory mem = ReadProcessMemory();
  info->set_router_rss_bytes(mem.rss_bytes);
  info->set_router_peak_rss_bytes(mem.peak_rss_bytes);
  if (options_.pool != nullptr) {
    const WorkerPool::State st = options_.pool->state();
    info->set_num_workers(st.world_size);
    info->set_ready_workers(st.ready_workers);
    info->set_ready(st.ready);
    info->set_group_workers(st.group_size);
    info->set_degraded(st.degraded());
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
  FillStats(options_.stats->Snapshot(req->layer(), req->reset()), stats);
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
