#include "server/step/step_runner.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace moe {

absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(
    const RouterModel& model, StepGroup* pool, RemoteStepOptions remote) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertBackend> backend,
                       model.ForkBackend());
  return std::make_unique<StepRunner>(std::move(backend), pool, remote);
}

StepRunner::StepRunner(std::unique_ptr<ExpertBackend> backend, StepGroup* pool,
                       RemoteStepOptions remote)
    : backend_(std::move(backend)),
      pool_(pool),
      local_(backend_.get()),
      remote_(remote) {}

absl::Status StepRunner::Run(const StepRequest& request, Output* out) {
  const int64_t layer = request.layer;
  const float* x = request.x;
  const int64_t n = request.n;
  ExpertBackend& b = *backend_;
  if (!b.HasLayer(layer)) {
    return absl::NotFoundError(
        absl::StrCat("layer ", layer, " is not an MoE layer"));
  }
  const MoeLayerConfig& c = b.config();
  const int64_t H = c.hidden;
  // Grows only: a caller reusing `out` pays no allocation or zero-fill
  // for steps no larger than one it has seen.
  if (out->y.size() < static_cast<size_t>(n * H)) out->y.resize(n * H);
  out->times = StageTimes();
  const CallerOverrides* caller = request.caller;
  const bool apart = SharedApart(caller);
  if (apart && out->shared.size() < static_cast<size_t>(n * H)) {
    out->shared.resize(n * H);
  }
  const SharedRows shared_rows{.segment_ends = request.segment_ends,
                               .caller = caller};
  const RouteRows route_rows{.n = n,
                             .segment_ends = request.segment_ends,
                             .token_ids = request.token_ids,
                             .caller = caller};
  if (pool_ == nullptr) {
    return local_.Forward(layer, x, route_rows, out->y.data(), &out->routing,
                          {.shared_out = apart ? out->shared.data() : nullptr,
                           .times = &out->times});
  }
  StageClock clock;
  MOE_RETURN_IF_ERROR(b.RouteTokens(layer, x, route_rows, &out->routing));
  out->times.route_us = clock.Lap();
  // A layer with an expert frame (latent projections, branch norms) sends
  // the experts' own rows and gets their weighted sum back, which the frame
  // turns into y before the shared expert is added.
  const bool framed = c.has_expert_frame();
  const float* rows = x;
  if (framed) {
    MOE_ASSIGN_OR_RETURN(rows, b.EnterExperts(layer, x, n));
  }
  // The shared expert runs here while the workers compute.
  // Requests that want the shared experts apart or skipped: only their
  // rows that need them run them, put in place after the step.
  const bool shared_needed = c.has_shared() && n > 0 && NeedsShared(caller);
  auto shared = [&]() -> absl::StatusOr<const float*> {
    if (!c.has_shared() || n == 0) return nullptr;
    shared_out_.resize(n * H);
    if (apart) {
      if (shared_needed) {
        MOE_RETURN_IF_ERROR(
            SharedForSegments(b, layer, x, n, shared_rows, shared_out_.data()));
      }
      return nullptr;
    }
    MOE_RETURN_IF_ERROR(b.Shared(layer, x, n, shared_out_.data()));
    // A framed layer adds it after the frame, below.
    return framed ? nullptr : shared_out_.data();
  };
  StepRequest rows_request = request;
  rows_request.x = rows;
  if (framed) {
    // The step writes the experts' weighted sum into out->y: lend it
    // routed_'s buffer, and take y's back for the frame's output.
    if (routed_.size() < static_cast<size_t>(n * c.expert_width())) {
      routed_.resize(n * c.expert_width());
    }
    std::swap(out->y, routed_);
  }
  absl::Status step = remote_.Run(*pool_, rows_request, c, shared, clock, out);
  if (framed) std::swap(out->y, routed_);
  MOE_RETURN_IF_ERROR(step);
  if (framed) {
    StageClock frame_clock;
    MOE_RETURN_IF_ERROR(
        b.LeaveExperts(layer, routed_.data(), n, out->y.data()));
    if (c.has_shared() && n > 0 && !apart) {
      for (int64_t i = 0; i < n * H; ++i) out->y[i] += shared_out_[i];
    }
    const double us = frame_clock.Lap();
    out->times.combine_us += us;
    out->times.total_us += us;
  }
  if (apart) {
    PlaceShared(shared_rows, n, H, shared_needed ? shared_out_.data() : nullptr,
                out->y.data(), out->shared.data());
  }
  if (HasOutputTerms(c)) {
    // On the router, after the workers' sum and the shared expert: the zero
    // experts' w * x (never dispatched), then output_scale and the bias.
    if (c.output_bias && b.OutputBias(layer) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("layer ", layer,
                       " was loaded without its output bias (output.bias)"));
    }
    AddZeroExperts(c, out->routing, x, out->y.data());
    ScaleAndBiasOutput(c, b.OutputBias(layer), n, out->y.data(),
                       apart ? out->shared.data() : nullptr);
  }
  out->worker_rows = remote_.worker_rows();
  return absl::OkStatus();
}

}  // namespace moe
