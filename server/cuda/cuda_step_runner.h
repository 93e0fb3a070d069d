// The router's step on a GPU: with no workers the whole layer
// (CudaLocalMoe); with workers, the routing and the shared expert on the
// GPU, the routed experts on the worker group.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/step_runner.h"

namespace moe {

absl::StatusOr<std::unique_ptr<StepRunner>> CreateCudaStepRunner(
    const RouterModel& model, WorkerPool* pool, int64_t max_batch_tokens);

}  // namespace moe
