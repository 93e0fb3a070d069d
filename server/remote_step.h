// The router's side of a step run on the workers, shared by the CPU and
// GPU routers: each rank's Step message from the routing (its rows, slots
// and the full per-(source, expert) count matrix), and the ranks' results
// put together.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/even_split.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"
#include "moe/v1/worker.pb.h"
#include "server/worker_pool.h"

namespace moe {

void BuildSteps(int64_t layer, const float* x, int64_t n, int64_t hidden,
                int64_t num_experts, const Routing& routing, int world,
                std::vector<moe::v1::Step>* steps);

// Copies rank q's rows into y [n, H] and keeps the slowest worker's stage
// times in `t`. INTERNAL for a malformed result.
absl::Status GatherResults(const std::vector<moe::v1::StepResult>& results,
                           int64_t n, int64_t hidden, float* y, StageTimes* t);

// Everything of a routed step that happens on the worker group: the plan,
// the step on every rank, the shared expert on this thread meanwhile, and
// the results put together. Keeps its message buffers between steps.
class RemoteStep {
 public:
  // Returns the gated shared-expert output [n, H] to add to y, or null.
  using SharedFn = std::function<absl::StatusOr<const float*>()>;

  // `clock` was started with the step and lapped after routing (`t`'s
  // route_us); y is [n, H]. Fills the plan, worker, shared and combine
  // times and the total.
  absl::Status Run(WorkerPool& pool, int64_t layer, const float* x, int64_t n,
                   int64_t hidden, int64_t num_experts, const Routing& routing,
                   std::chrono::steady_clock::time_point deadline,
                   const SharedFn& shared, StageClock& clock, float* y,
                   StageTimes* t);

 private:
  std::vector<moe::v1::Step> steps_;
  std::vector<moe::v1::StepResult> results_;
};

}  // namespace moe
