// The router's side of a direct step (docs/architecture.md, "Direct
// steps"): small steps skip the workers' two all-to-alls. The router sends
// each worker the rows of exactly the tokens with a slot on its experts, each
// worker returns its slots' expert outputs in slot order
// (EpStep::RunDirect), and the router sums every token's slots in slot order
// with the kernel the workers use, so y has the bits of the all-to-all path.
// A worker with no slot in the step is not sent one.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "comm/communicator.h"

namespace moe {

struct DirectPlan {
  int64_t tokens = 0, slots = 0;
  // [world + 1] offsets into `token`: rank q's tokens, ascending, are
  // token[token_offsets[q] .. token_offsets[q + 1]).
  std::vector<int64_t> token_offsets;
  std::vector<int64_t> token;
  // [world + 1] offsets of each rank's outputs in the rows put together in
  // rank order (rank q returns row_offsets[q + 1] - row_offsets[q] rows).
  std::vector<int64_t> row_offsets;
  // [tokens * slots] the row of each slot's output among them, -1 where the
  // slot is not dispatched: what the weighted sum reads.
  std::vector<int64_t> slot_row;
  // This working space is kept so that a steady step allocates nothing.
  std::vector<int64_t> cursor;
};

// Plans a step of `n` tokens whose slots went to `expert_ids` [n * slots]
// (physical expert slots of `num_experts`, -1: not dispatched; rank q owns
// [SplitBegin(q, world, num_experts), SplitBegin(q + 1, ...))).
void PlanDirectStep(absl::Span<const int32_t> expert_ids, int64_t n,
                    int64_t slots, int world, int64_t num_experts,
                    DirectPlan* plan);

// Rank q's part: the expert ids and weights of its tokens (the slots of
// other ranks -1) and its count matrix [world * num_experts], which has
// only source row q (a direct step moves nothing between ranks).
void DirectRankSlots(const DirectPlan& plan, int q, int world,
                     int64_t num_experts, absl::Span<const int32_t> expert_ids,
                     absl::Span<const float> weights, std::vector<int32_t>* ids,
                     std::vector<float>* rank_weights,
                     std::vector<int64_t>* counts);

// The router's sum: y [plan.tokens, hidden] = every token's slot outputs,
// in slot order, times `weights` [tokens * slots] (null: weight 1, when
// score_before_experts scaled the input instead). `rows` are the ranks'
// outputs put together in rank order (plan.slot_row indexes them), F32 or
// BF16 as `type` says. The kernel of the workers' combine, one thread: y
// has the bits of the all-to-all path.
void SumDirectOutputs(const DirectPlan& plan, int64_t hidden, ElementType type,
                      const void* rows, const float* weights, float* y);

}  // namespace moe
