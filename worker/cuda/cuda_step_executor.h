// The GPU step executor: bf16 experts uploaded once, NCCL all-to-all, rows
// regrouped by expert on the device, cuBLASLt grouped SwiGLU, and the
// weighted combine in slot order. Compute and communication run on their
// own streams, ordered by events; workspaces are sized at Load from
// --max-batch-tokens and the step path allocates nothing. The host waits
// once per step, for the result, with the step's deadline.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/step_executor.h"

namespace moe {

absl::StatusOr<std::unique_ptr<StepExecutor>> CreateCudaStepExecutor(
    int device);

}  // namespace moe
