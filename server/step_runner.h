// One batched step of a layer, on the router: routing in fp32, then the
// experts in-process (no workers) or on the worker group, the shared expert
// computed while the workers work, and the results put together.
#pragma once

#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/expert_runner.h"
#include "engine/local_moe.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"
#include "server/router_model.h"
#include "server/worker_pool.h"

namespace moe {

class StepRunner {
 public:
  // `pool` null: the router computes the experts (P = 0).
  StepRunner(const RouterModel& model, WorkerPool* pool, int threads);

  struct Output {
    std::vector<float> y;  // [n, H]
    Routing routing;
    StageTimes times;
  };
  // `segment_ends`: the requests batched in this step (see TokenRouter).
  absl::Status Run(int64_t layer, const float* x, int64_t n,
                   absl::Span<const int64_t> segment_ends,
                   std::chrono::steady_clock::time_point deadline, Output* out);

 private:
  absl::Status RunRemote(const LayerWeights& w, const float* x, int64_t n,
                         absl::Span<const int64_t> segment_ends,
                         std::chrono::steady_clock::time_point deadline,
                         Output* out);

  const RouterModel& model_;
  WorkerPool* pool_;
  int threads_;
  LocalMoe local_;
  TokenRouter router_;
  ExpertRunner shared_;
  std::vector<float> shared_out_;
  std::vector<moe::v1::Step> steps_;
  std::vector<moe::v1::StepResult> results_;
};

}  // namespace moe
