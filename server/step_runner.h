// One batched step of a layer, on the router: routing in fp32, then the
// experts in-process (no workers) or on the worker group, the shared expert
// computed while the workers work, and the results put together. One
// implementation per router device.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/expert_runner.h"
#include "engine/local_moe.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"
#include "server/remote_step.h"
#include "server/router_model.h"
#include "server/worker_pool.h"

namespace moe {

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  struct Output {
    std::vector<float> y;  // [n, H]
    Routing routing;
    StageTimes times;
  };
  // `segment_ends`: the requests batched in this step (see TokenRouter).
  virtual absl::Status Run(int64_t layer, const float* x, int64_t n,
                           absl::Span<const int64_t> segment_ends,
                           std::chrono::steady_clock::time_point deadline,
                           Output* out) = 0;
};

// A runner for the model's device; `pool` null: the router computes the
// experts (P = 0).
absl::StatusOr<std::unique_ptr<StepRunner>> CreateStepRunner(
    const RouterModel& model, WorkerPool* pool, int threads,
    int64_t max_batch_tokens);

class CpuStepRunner : public StepRunner {
 public:
  CpuStepRunner(const RouterModel& model, WorkerPool* pool, int threads);
  absl::Status Run(int64_t layer, const float* x, int64_t n,
                   absl::Span<const int64_t> segment_ends,
                   std::chrono::steady_clock::time_point deadline,
                   Output* out) override;

 private:
  const RouterModel& model_;
  WorkerPool* pool_;
  int threads_;
  LocalMoe local_;
  TokenRouter router_;
  ExpertRunner shared_;
  std::vector<float> shared_out_;
  RemoteStep remote_;
};

}  // namespace moe
