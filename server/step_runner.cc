#include "server/step_runner.h"

#include "absl/strings/str_cat.h"
#include "server/remote_step.h"
#ifdef MOE_HAVE_CUDA
#include "server/cuda/cuda_step_runner.h"
#endif

namespace moe {

absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(
    const RouterModel& model, WorkerPool* pool, int threads,
    int64_t max_batch_tokens) {
  if (model.device() == "cpu") {
    return std::make_unique<CpuStepRunner>(model, pool, threads);
  }
#ifdef MOE_HAVE_CUDA
  return CreateCudaStepRunner(model, pool, max_batch_tokens);
#else
  return absl::UnimplementedError(absl::StrCat(
      "router device ", model.device(), ": this build has no CUDA backend"));
#endif
}

CpuStepRunner::CpuStepRunner(const RouterModel& model, WorkerPool* pool,
                             int threads)
    : model_(model), pool_(pool), threads_(threads), local_(threads) {}

absl::Status CpuStepRunner::Run(int64_t layer, const float* x, int64_t n,
                                absl::Span<const int64_t> segment_ends,
                                std::chrono::steady_clock::time_point deadline,
                                Output* out) {
  const LayerWeights* w = model_.layer(layer);
  if (w == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("layer ", layer, " is not an MoE layer"));
  }
  const MoeLayerConfig& c = w->config;
  const int64_t H = c.hidden;
  out->y.resize(n * H);
  out->times = StageTimes();
  if (pool_ == nullptr) {
    return local_.Forward(*w, x, n, segment_ends, out->y.data(), &out->routing,
                          &out->times);
  }
  StageTimes& t = out->times;
  StageClock clock;
  if (absl::Status s =
          router_.Route(*w, x, n, segment_ends, threads_, &out->routing);
      !s.ok()) {
    return s;
  }
  t.route_us = clock.Lap();
  BuildSteps(layer, x, n, H, c.num_experts, out->routing,
             pool_->state().world_size, &steps_);
  t.plan_us = clock.Lap();

  // The shared expert runs here while the workers compute.
  const bool shared = w->has_shared && n > 0;
  absl::Status shared_status;
  auto overlap = [&] {
    StageClock shared_clock;
    if (shared) {
      shared_out_.resize(n * H);
      shared_status = shared_.RunShared(*w, x, n, shared_out_.data(), threads_);
    }
    t.shared_us = shared_clock.Lap();
  };
  if (absl::Status s = pool_->RunStep(steps_, deadline, overlap, &results_);
      !s.ok()) {
    return s;
  }
  if (!shared_status.ok()) return shared_status;
  const double wall_us = clock.Lap();
  if (absl::Status s = GatherResults(results_, n, H, out->y.data(), &t);
      !s.ok())
    return s;
  if (shared) {
    for (int64_t i = 0; i < n * H; ++i) out->y[i] += shared_out_[i];
  }
  // Worker stages are the slowest worker's own figures; putting the rows
  // together here counts as combine. The total is this step's wall time.
  const double assemble_us = clock.Lap();
  t.combine_us += assemble_us;
  t.total_us = t.route_us + t.plan_us + wall_us + assemble_us;
  return absl::OkStatus();
}

}  // namespace moe
