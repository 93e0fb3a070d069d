// A step's input put together from its requests, and the step's output
// handed back to them. No lock: each step thread has its own staging.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/batching/batch_request.h"
#include "server/step/step_runner.h"

namespace moe {

// The step's rows, each request decoded from its message straight into one
// buffer reused by every step (steady steps allocate nothing), with the
// requests' row ends and token ids.
class BatchStaging {
 public:
  // Stages `batch` (not empty, one hidden size) in request order and
  // returns its token count.
  int64_t Stage(const Batch& batch);

  // The views it returns stay valid until the next Stage.
  const float* rows() const { return rows_.data(); }
  // Returns where each request's rows end (TokenRouter's segments).
  absl::Span<const int64_t> ends() const { return ends_; }
  // One per row when any request sent token ids (zeros for the rows of a
  // request that did not: a layer that is not hash-routed ignores them),
  // else empty.
  absl::Span<const int64_t> token_ids() const { return token_ids_; }
  // Returns the requests' routing or logits from the caller, logits to keep and
  // shared-expert parts, per segment; null when no request of the step asked
  // for any of them (the step then runs as it always has).
  const CallerOverrides* caller() const {
    return any_caller_ ? &caller_ : nullptr;
  }

 private:
  // Stages the caller overrides of `batch` (n rows) into caller_.
  void StageCaller(const Batch& batch, int64_t n);

  std::vector<float> rows_;
  std::vector<int64_t> ends_;
  std::vector<int64_t> token_ids_;
  bool any_caller_ = false;
  CallerOverrides caller_;
  std::vector<RouteSource> route_;
  std::vector<SharedPart> shared_;
  std::vector<float> logits_;     // [n, E], the kLogits requests' rows
  std::vector<int32_t> experts_;  // [n, k], the kRouting requests' rows
  std::vector<float> weights_;    // [n, k]
};

// Whether every request sends bf16 and wants bf16 back: nothing finer than
// bf16 is wanted, so the step may carry its answers in bf16.
bool AllWantBf16(const Batch& batch);

// Calls each request's `done` with `status` and, when it is OK, its share
// of `out` (the step of `n` tokens that began at `start`): its rows of y
// (a view), its routing, the step's times and its own wait in the queue.
void AnswerBatch(Batch& batch, const absl::Status& status,
                 const StepRunner::Output& out, int64_t n,
                 std::chrono::steady_clock::time_point start);

}  // namespace moe
