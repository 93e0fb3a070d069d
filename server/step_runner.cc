#include "server/step_runner.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
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
  StageClock clock;
  MOE_RETURN_IF_ERROR(
      router_.Route(*w, x, n, segment_ends, threads_, &out->routing));
  out->times.route_us = clock.Lap();
  // The shared expert runs here while the workers compute.
  auto shared = [&]() -> absl::StatusOr<const float*> {
    if (!w->has_shared || n == 0) return nullptr;
    shared_out_.resize(n * H);
    MOE_RETURN_IF_ERROR(
        shared_.RunShared(*w, x, n, shared_out_.data(), threads_));
    return shared_out_.data();
  };
  return remote_.Run(*pool_, layer, x, n, H, c.num_experts, out->routing,
                     deadline, shared, clock, out->y.data(), &out->times);
}

}  // namespace moe
