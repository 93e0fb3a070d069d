#include "server/step_runner.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace moe {

absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(
    const RouterModel& model, WorkerPool* pool, RemoteStepOptions remote) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertBackend> backend,
                       model.ForkBackend());
  return std::make_unique<StepRunner>(std::move(backend), pool, remote);
}

StepRunner::StepRunner(std::unique_ptr<ExpertBackend> backend, WorkerPool* pool,
                       RemoteStepOptions remote)
    : backend_(std::move(backend)),
      pool_(pool),
      local_(backend_.get()),
      remote_(remote) {}

absl::Status StepRunner::Run(int64_t layer, const float* x, int64_t n,
                             absl::Span<const int64_t> segment_ends,
                             bool bf16_out,
                             std::chrono::steady_clock::time_point deadline,
                             Output* out, absl::Span<const int64_t> token_ids) {
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
  if (pool_ == nullptr) {
    return local_.Forward(layer, x, n, segment_ends, out->y.data(),
                          &out->routing, &out->times, token_ids);
  }
  StageClock clock;
  MOE_RETURN_IF_ERROR(
      b.RouteTokens(layer, x, n, segment_ends, token_ids, &out->routing));
  out->times.route_us = clock.Lap();
  // A layer with an expert frame (latent projections, branch norms) sends
  // the experts' own rows and gets their weighted sum back, which the frame
  // turns into y before the shared expert is added.
  const bool framed = c.has_expert_frame();
  const float* rows = x;
  if (framed) {
    MOE_ASSIGN_OR_RETURN(rows, b.EnterExperts(layer, x, n));
    routed_.resize(n * c.expert_width());
  }
  // The shared expert runs here while the workers compute.
  auto shared = [&]() -> absl::StatusOr<const float*> {
    if (!c.has_shared() || n == 0) return nullptr;
    shared_out_.resize(n * H);
    MOE_RETURN_IF_ERROR(b.Shared(layer, x, n, shared_out_.data()));
    // A framed layer adds it after the frame, below.
    return framed ? nullptr : shared_out_.data();
  };
  MOE_RETURN_IF_ERROR(
      remote_.Run(*pool_, layer, rows, n, c, out->routing,
                  bf16_out && !c.has_shared() && !framed, deadline, shared,
                  clock, framed ? routed_.data() : out->y.data(), &out->times));
  if (framed) {
    StageClock frame_clock;
    MOE_RETURN_IF_ERROR(
        b.LeaveExperts(layer, routed_.data(), n, out->y.data()));
    if (c.has_shared() && n > 0) {
      for (int64_t i = 0; i < n * H; ++i) out->y[i] += shared_out_[i];
    }
    const double us = frame_clock.Lap();
    out->times.combine_us += us;
    out->times.total_us += us;
  }
  out->worker_rows = remote_.worker_rows();
  return absl::OkStatus();
}

}  // namespace moe
