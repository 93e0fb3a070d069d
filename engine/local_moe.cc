#include "engine/local_moe.h"

#include "absl/strings/str_cat.h"
#include "comm/loopback_communicator.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace moe {

LocalMoe::LocalMoe(ExpertBackend* backend)
    : backend_(backend), loopback_(CreateLoopbackCommunicator()) {}

LocalMoe::~LocalMoe() = default;

absl::StatusOr<std::unique_ptr<LocalMoe>> LocalMoe::Create(
    const ModelSource& source, const std::string& device, WeightDType dtype,
    int threads, int64_t max_tokens, int64_t only_layer) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertBackend> backend,
                       CreateExpertBackend(device, threads));
  LoadOptions opts;
  opts.dtype = dtype;
  opts.num_threads = threads;
  opts.only_layer = only_layer;
  MOE_RETURN_IF_ERROR(backend->Load(source, opts, max_tokens));
  auto moe = std::make_unique<LocalMoe>(backend.get());
  moe->owned_ = std::move(backend);
  return moe;
}

absl::Status LocalMoe::Check(int64_t layer, int64_t n) const {
  const ExpertBackend& b = *backend_;
  MOE_RETURN_IF_ERROR(b.CheckLayer(layer, /*need_gate=*/true,
                                   /*need_shared=*/true,
                                   /*need_all_experts=*/true));
  if (n > b.max_tokens()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(n, " tokens exceed the ", b.max_tokens(),
                     " this engine was sized for"));
  }
  return absl::OkStatus();
}

absl::Status LocalMoe::Forward(int64_t layer, const float* x, int64_t n,
                               absl::Span<const int64_t> segment_ends, float* y,
                               Routing* routing, StageTimes* times,
                               absl::Span<const int64_t> token_ids) {
  MOE_RETURN_IF_ERROR(Check(layer, n));
  StageTimes local;
  StageTimes& t = times != nullptr ? *times : local;
  StageClock clock;
  MOE_RETURN_IF_ERROR(
      backend_->RouteTokens(layer, x, n, segment_ends, token_ids, routing));
  t.route_us = clock.Lap();
  return Step(layer, x, n, y, *routing, t, clock);
}

absl::Status LocalMoe::ForwardBf16(int64_t layer, const uint16_t* x, int64_t n,
                                   absl::Span<const int64_t> segment_ends,
                                   float* y, Routing* routing,
                                   StageTimes* times,
                                   absl::Span<const int64_t> token_ids) {
  MOE_RETURN_IF_ERROR(Check(layer, n));
  StageTimes local;
  StageTimes& t = times != nullptr ? *times : local;
  StageClock clock;
  MOE_ASSIGN_OR_RETURN(
      bool taken,
      backend_->RouteTokensBf16(layer, x, n, segment_ends, token_ids, routing));
  if (!taken) {
    widened_.resize(n * backend_->config().hidden);
    for (size_t i = 0; i < widened_.size(); ++i) widened_[i] = Bf16ToF32(x[i]);
    return Forward(layer, widened_.data(), n, segment_ends, y, routing, times,
                   token_ids);
  }
  t.route_us = clock.Lap();
  // The backend holds the rows, named by x (ExpertBackend::RouteTokensBf16).
  return Step(layer, reinterpret_cast<const float*>(x), n, y, *routing, t,
              clock);
}

absl::Status LocalMoe::Step(int64_t layer, const float* x, int64_t n, float* y,
                            const Routing& routing, StageTimes& t,
                            StageClock& clock) {
  ExpertBackend& b = *backend_;
  const MoeLayerConfig& c = b.config();
  PlanDispatch(routing, n, /*world=*/1, c.num_experts, &expert_ids_, &counts_);
  // A layer with an expert frame (latent projections, branch norms) steps
  // over the experts' own rows and sums into `routed_`, which the frame
  // then turns into y.
  const bool framed = c.has_expert_frame();
  const float* rows = x;
  if (framed) {
    MOE_ASSIGN_OR_RETURN(rows, b.EnterExperts(layer, x, n));
    routed_.resize(n * c.expert_width());
  }
  EpStepInput in;
  in.layer = layer;
  in.tokens = n;
  in.rows = rows;
  in.slots = routing.slots;
  in.expert_ids = expert_ids_;
  in.weights = routing.weight;
  in.counts = counts_;
  t.plan_us = clock.Lap();

  // A device backend sums the shared expert into y itself, so that y
  // crosses to the host once; its time is then part of the combine's.
  bool shared_in_step = false;
  if (c.has_shared() && n > 0 && !framed) {
    MOE_ASSIGN_OR_RETURN(shared_in_step, b.AddSharedToStep(layer));
  }
  EpStepTimes ep;
  MOE_RETURN_IF_ERROR(step_.Run(in, b, *loopback_, /*max_count=*/n,
                                /*x_resident=*/!framed,
                                framed ? routed_.data() : y, &ep));
  if (framed) MOE_RETURN_IF_ERROR(b.LeaveExperts(layer, routed_.data(), n, y));
  t.dispatch_us = ep.dispatch_us;
  t.experts_us = ep.experts_us;
  t.combine_us = ep.combine_us;
  clock.Lap();

  if (c.has_shared() && n > 0 && !shared_in_step) {
    shared_out_.resize(n * c.hidden);
    MOE_RETURN_IF_ERROR(b.Shared(layer, x, n, shared_out_.data()));
    for (int64_t i = 0; i < n * c.hidden; ++i) y[i] += shared_out_[i];
  }
  t.shared_us = clock.Lap();
  t.total_us = t.route_us + t.plan_us + t.dispatch_us + t.experts_us +
               t.combine_us + t.shared_us;
  return absl::OkStatus();
}

}  // namespace moe
