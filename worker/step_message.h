// The worker's side of the router's Step message: its header and rows read
// by proto/step_codec, run by the StepExecutor, and the outcome written
// into the StepResult message. The one place in worker/ besides the agent
// where a step meets protobuf.
#pragma once

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "engine/stage_times.h"
#include "moe/v1/worker.pb.h"
#include "worker/step_executor.h"

namespace moe {

// Runs `step` as rank comm.rank() of comm.size() and fills `result` (rows,
// times, rows computed); on error `result` is left for the caller to mark.
// INVALID_ARGUMENT naming the field for a malformed step (result_dtype not
// F32 or BF16, rows not [N, hidden]), else StepExecutor::Run's errors.
absl::Status RunStepMessage(StepExecutor& executor, const moe::v1::Step& step,
                            Communicator& comm, moe::v1::StepResult* result);

}  // namespace moe
