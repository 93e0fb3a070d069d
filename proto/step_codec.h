// The worker protocol's Step and StepResult messages <-> the engine's plain
// step types (engine/ep_plan.h, engine/ep_step.h) and the step's plain sides
// (proto/step_views.h). The only place where the
// step meets protobuf: the engine never sees a wire type.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/ep_plan.h"
#include "engine/ep_step.h"
#include "engine/stage_times.h"
#include "moe/v1/worker.pb.h"
#include "proto/step_views.h"

namespace moe {

// Router side: `content` into `step`, reusing its buffers. Rows travel as
// BF16 when that is lossless (every value a bf16: a bf16 client's), else
// F32; in.dispatch says how they cross the workers' all-to-all. The
// generation is left 0 and the step id and timeout are content's: the
// router's step channel addresses each step itself (EncodedStep::Address).
void EncodeStep(const StepContent& content, moe::v1::Step* step);

// Worker side: a view of `step` as the engine's input. The spans point into
// `step`, which must outlive `in`; F32 rows are used in place unless
// misaligned, BF16 rows are widened into `scratch` (which only grows).
// INVALID_ARGUMENT naming the field when the rows are not F32 or BF16
// [N, hidden], or dispatch_dtype is not one of DispatchDtype's values.
absl::Status DecodeStep(const moe::v1::Step& step, int64_t hidden,
                        std::vector<float>* scratch, EpStepInput* in);

// Worker side: y [tokens, H] and the step's times into `result`, as the
// step's result_dtype asks (F32 exactly, or BF16 rounded to nearest even).
void EncodeStepResult(const float* y, int64_t tokens, int64_t hidden,
                      const EpStepTimes& times, moe::v1::DType result_dtype,
                      moe::v1::StepResult* result);

// Worker side, a direct step: the expert outputs of `out` into `result`'s
// rows in slot order (for each of the `tokens` tokens, each slot with a
// row), F32 or BF16 as they are, and the step's times.
void EncodeDirectResult(const DirectOutputs& out, int64_t tokens, int64_t slots,
                        int64_t hidden, const EpStepTimes& times,
                        moe::v1::StepResult* result);

// Either side: the worker's stage times of `result`, as rank `rank`'s
// (dispatch and combine split into their packing and waiting pieces).
WorkerStageTimes DecodeStepTimes(const moe::v1::StepResult& result, int rank);

// Router side: `result` as a StepReply whose shape and rows view `result`
// (which must outlive it; `owner` is left for the caller to set), its times
// rank-less.
StepReply ViewStepResult(const moe::v1::StepResult& result);

}  // namespace moe
