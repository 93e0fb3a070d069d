// The step's two plain sides, free of protobuf: StepContent, what the router
// sends one rank (EncodeStep writes it into a Step), and StepReply, what the
// rank answered (ViewStepResult reads it off a StepResult: views into the
// received message's bytes); and a reply's rows decoded. The router's step
// code sees only these; proto/step_codec.h converts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "engine/ep_step.h"
#include "engine/stage_times.h"

namespace moe {

// Router side: what one rank's Step carries, as plain values: DecodeStep's
// EpStepInput (rows [tokens, hidden] fp32, slots, expert ids, weights, the
// whole (source, expert) count matrix and every rank's expert ids, its own
// among them; `experts` does not travel) and what the router sets around it.
struct StepContent {
  EpStepInput in;
  int64_t hidden = 0;
  // The worker answers its rows rounded to bf16 (result_dtype BF16).
  bool bf16_result = false;
  bool direct = false;  // Step.direct (engine/direct_plan.h)
  uint64_t placement_epoch = 0;
};

// Router side: one rank's StepResult as plain values. `shape` and `data`
// view the received message, which `owner` (when set) keeps alive: the rows
// are read where they arrived, not copied out first.
struct StepReply {
  uint64_t generation = 0;
  uint64_t step_id = 0;
  int error_code = 0;  // an absl::StatusCode; 0: the step succeeded
  std::string error_message;
  bool collectives_broken = false;
  // The rows' type (nullopt: one this build does not know), shape and
  // bytes.
  std::optional<DType> dtype;
  absl::Span<const int64_t> shape;
  absl::string_view data;
  // The worker's stage times (rank left -1: the caller knows it).
  WorkerStageTimes times;
  std::shared_ptr<const void> owner;
};

// Router side: rank `rank`'s rows of y (F32 or BF16, widened exactly),
// checked against the rows it was sent; INTERNAL for a malformed result.
absl::Status DecodeStepResult(const StepReply& reply, int rank, int64_t tokens,
                              int64_t hidden, float* y);

// Router side, a direct step: rank `rank`'s `rows` expert outputs into
// rows [first_row, first_row + rows) of `dst` (grown to hold them) as they
// travelled, F32 or BF16 (into `*type`; the caller checks that every rank
// agrees); INTERNAL for a malformed result.
absl::Status DecodeDirectResult(const StepReply& reply, int rank, int64_t rows,
                                int64_t hidden, ElementType* type,
                                std::vector<char>* dst, int64_t first_row);

}  // namespace moe
