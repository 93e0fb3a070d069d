// One step as it travels from the batcher's staging to the remote step
// (StepRequest), and what it gives back (StepOutput), so that no function
// on the step path takes the step apart into a long parameter list.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/caller_overrides.h"
#include "engine/stage_times.h"
#include "engine/token_router.h"

namespace moe {

struct StepRequest {
  int64_t layer = 0;
  // Holds the rows [n, hidden], staged by the batcher.
  const float* x = nullptr;
  int64_t n = 0;
  // What these three mean for the step: StepRunner::Run.
  absl::Span<const int64_t> segment_ends;
  absl::Span<const int64_t> token_ids;
  bool bf16_out = false;
  std::chrono::steady_clock::time_point deadline;
  // Holds the requests' routing from the caller and shared-expert parts, per
  // segment (engine/caller_overrides.h); null: none, a plain step.
  const CallerOverrides* caller = nullptr;
};

struct StepOutput {
  std::vector<float> y;  // [n, H] in its first n * H values
  Routing routing;
  StageTimes times;
  std::vector<int64_t> worker_rows;  // rows each worker computed
  // [n, H] in its first n * H values when any request wanted the shared
  // experts apart (SharedPart::kSeparate rows; zeros elsewhere).
  std::vector<float> shared;
};

}  // namespace moe
