// The router's side of a direct step (engine/direct_plan.h): from the
// routing's physical expert ids, each rank's StepContent with the rows of
// exactly the tokens that have a slot on its experts, and the ranks' slot
// outputs summed here in slot order, so that y has the bits of the
// all-to-all path. RemoteStep chooses when a step is direct.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/direct_plan.h"
#include "proto/step_views.h"

namespace moe {

// Keeps its plan and each rank's buffers between steps: the contents that
// Build writes view them until the group has sent them.
class DirectStep {
 public:
  // Holds what a direct step is built from: x [n, hidden], each token's slots
  // on `experts` physical expert slots (`expert_ids` [n * slots] names them, -1
  // for none) with their `weights`, and the `world` of ranks.
  struct Routed {
    const float* x = nullptr;
    int64_t n = 0;
    absl::Span<const int32_t> expert_ids;
    absl::Span<const float> weights;
    int world = 0;
    int64_t experts = 0;
  };
  // Builds one step per rank of `routed.world` into `steps`: the step `common`
  // (layer, slots, hidden, dispatch, placement epoch, timeout) carrying rank
  // q's tokens of x [n, common.hidden], their slots on its experts (the rest
  // -1) with their weights, and its row of the count matrix.
  void Build(const StepContent& common, const Routed& routed,
             std::vector<StepContent>* steps);

  // Computes y [n, hidden] = the slot outputs of `replies` (one per rank of the
  // last Build; a rank that was sent no token is not read), summed per token in
  // slot order times the routing's `weights` (null: weight 1, when
  // score_before_experts scaled the input instead). INTERNAL for a malformed
  // reply or ranks answering in different types.
  absl::Status Sum(const std::vector<StepReply>& replies, int64_t hidden,
                   const float* weights, float* y);

 private:
  DirectPlan plan_;
  // Holds, per rank, the rows, slots, weights and counts its step views.
  std::vector<std::vector<float>> rows_, weights_;
  std::vector<std::vector<int32_t>> ids_;
  std::vector<std::vector<int64_t>> counts_;
  // Holds the ranks' outputs put together in rank order (plan_.row_offsets).
  std::vector<char> out_;
};

}  // namespace moe
