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
  if (b.config().output_bias && b.OutputBias(layer) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "layer ", layer, " was loaded without its output bias (output.bias)"));
  }
  if (n > b.max_tokens()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(n, " tokens exceed the ", b.max_tokens(),
                     " this engine was sized for"));
  }
  return absl::OkStatus();
}

absl::Status LocalMoe::Forward(int64_t layer, const float* x,
                               const RouteRows& rows, float* y,
                               Routing* routing, const ForwardExtras& extras) {
  MOE_RETURN_IF_ERROR(Check(layer, rows.n));
  StageTimes local;
  StageTimes& t = extras.times != nullptr ? *extras.times : local;
  StageClock clock;
  MOE_RETURN_IF_ERROR(backend_->RouteTokens(layer, x, rows, routing));
  t.route_us = clock.Lap();
  return Step(layer, {x, rows.n, y}, *routing, t, clock,
              {{rows.segment_ends, rows.caller, /*resident=*/false},
               extras.shared_out});
}

absl::Status LocalMoe::ForwardBf16(int64_t layer, const uint16_t* x,
                                   const RouteRows& rows, float* y,
                                   Routing* routing,
                                   const ForwardExtras& extras) {
  MOE_RETURN_IF_ERROR(Check(layer, rows.n));
  StageTimes local;
  StageTimes& t = extras.times != nullptr ? *extras.times : local;
  StageClock clock;
  // Zero experts add w * x on the host, which needs fp32 host rows.
  bool taken = false;
  if (backend_->config().zero_experts == 0) {
    MOE_ASSIGN_OR_RETURN(taken,
                         backend_->RouteTokensBf16(layer, x, rows, routing));
  }
  if (!taken) {
    widened_.resize(rows.n * backend_->config().hidden);
    for (size_t i = 0; i < widened_.size(); ++i) widened_[i] = Bf16ToF32(x[i]);
    return Forward(layer, widened_.data(), rows, y, routing, extras);
  }
  t.route_us = clock.Lap();
  // The backend holds the rows, named by x (ExpertBackend::RouteTokensBf16).
  return Step(
      layer, {reinterpret_cast<const float*>(x), rows.n, y}, *routing, t, clock,
      {{rows.segment_ends, rows.caller, /*resident=*/true}, extras.shared_out});
}

absl::Status LocalMoe::Step(int64_t layer, StepRows step_rows,
                            const Routing& routing, StageTimes& t,
                            StageClock& clock, const SharedPlan& shared) {
  const float* x = step_rows.x;
  const int64_t n = step_rows.n;
  float* y = step_rows.y;
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
  const CallerOverrides* caller = shared.rows.caller;
  const bool apart = SharedApart(caller);
  bool shared_in_step = false;
  if (c.has_shared() && n > 0 && !framed && !apart) {
    MOE_ASSIGN_OR_RETURN(shared_in_step, b.AddSharedToStep(layer));
  }
  EpStepTimes ep;
  MOE_RETURN_IF_ERROR(step_.Run(in, b, *loopback_,
                                {.max_count = n, .x_resident = !framed},
                                framed ? routed_.data() : y, &ep));
  if (framed) MOE_RETURN_IF_ERROR(b.LeaveExperts(layer, routed_.data(), n, y));
  t.dispatch_us = ep.dispatch_us;
  t.experts_us = ep.experts_us;
  t.combine_us = ep.combine_us;
  clock.Lap();

  if (apart) {
    // Per request: only the rows that want the shared experts run them.
    const float* s = nullptr;
    if (c.has_shared() && n > 0 && NeedsShared(caller)) {
      shared_out_.resize(n * c.hidden);
      MOE_RETURN_IF_ERROR(
          SharedForSegments(b, layer, x, n, shared.rows, shared_out_.data()));
      s = shared_out_.data();
    }
    PlaceShared(shared.rows, n, c.hidden, s, y, shared.out);
  } else if (c.has_shared() && n > 0 && !shared_in_step) {
    shared_out_.resize(n * c.hidden);
    MOE_RETURN_IF_ERROR(b.Shared(layer, x, n, shared_out_.data()));
    for (int64_t i = 0; i < n * c.hidden; ++i) y[i] += shared_out_[i];
  }
  if (HasOutputTerms(c)) {
    // The zero experts' w * x, then output_scale and the output bias.
    AddZeroExperts(c, routing, x, y);
    ScaleAndBiasOutput(c, b.OutputBias(layer), n, y,
                       apart ? shared.out : nullptr);
  }
  t.shared_us = clock.Lap();
  t.total_us = t.route_us + t.plan_us + t.dispatch_us + t.experts_us +
               t.combine_us + t.shared_us;
  return absl::OkStatus();
}

absl::Status SharedForSegments(ExpertBackend& backend, int64_t layer,
                               const float* x, int64_t n,
                               const SharedRows& rows, float* out) {
  if (rows.resident || rows.caller == nullptr || rows.caller->shared.empty()) {
    return backend.Shared(layer, x, n, out);
  }
  const CallerOverrides& caller = *rows.caller;
  absl::Span<const int64_t> segment_ends = rows.segment_ends;
  const int64_t H = backend.config().hidden;
  const int64_t single[] = {n};
  if (segment_ends.empty()) segment_ends = single;
  // Runs of consecutive segments that need the shared experts: a request's
  // rows are contiguous, so one call per run.
  int64_t run_begin = -1, begin = 0;
  for (size_t s = 0; s <= segment_ends.size(); ++s) {
    const bool needs =
        s < segment_ends.size() && caller.shared[s] != SharedPart::kSkip;
    if (needs && run_begin < 0) run_begin = begin;
    if (!needs && run_begin >= 0) {
      MOE_RETURN_IF_ERROR(backend.Shared(
          layer, x + run_begin * H, begin - run_begin, out + run_begin * H));
      run_begin = -1;
    }
    if (s < segment_ends.size()) begin = segment_ends[s];
  }
  return absl::OkStatus();
}

}  // namespace moe
