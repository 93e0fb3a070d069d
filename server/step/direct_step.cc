#include "server/step/direct_step.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace moe {

void DirectStep::Build(const StepContent& common, const Routed& routed,
                       std::vector<StepContent>* steps) {
  const float* x = routed.x;
  const int64_t n = routed.n;
  const absl::Span<const int32_t> expert_ids = routed.expert_ids;
  const absl::Span<const float> weights = routed.weights;
  const int P = routed.world;
  const int64_t experts = routed.experts;
  const int64_t H = common.hidden, S = common.in.slots;
  PlanDirectStep(expert_ids, n, S, P, experts, &plan_);
  const DirectPlan& d = plan_;
  StepContent c = common;
  // The outputs come back per slot and are summed here: the workers never
  // round a result (result_dtype F32), whatever the client asked for.
  c.bf16_result = false;
  c.direct = true;
  steps->resize(P);
  // Each rank has its own buffers, because the steps view them until the group
  // sends.
  rows_.resize(P);
  ids_.resize(P);
  weights_.resize(P);
  counts_.resize(P);
  for (int q = 0; q < P; ++q) {
    const int64_t b = d.token_offsets[q], tokens = d.token_offsets[q + 1] - b;
    std::vector<float>& rows = rows_[q];
    if (rows.size() < static_cast<size_t>(tokens * H)) rows.resize(tokens * H);
    for (int64_t i = 0; i < tokens; ++i) {
      std::memcpy(rows.data() + i * H, x + d.token[b + i] * H,
                  H * sizeof(float));
    }
    DirectRankSlots(d, q, P, experts, expert_ids, weights, &ids_[q],
                    &weights_[q], &counts_[q]);
    c.in.tokens = tokens;
    c.in.rows = rows.data();
    c.in.expert_ids = ids_[q];
    c.in.weights = weights_[q];
    c.in.counts = counts_[q];
    (*steps)[q] = c;
  }
}

absl::Status DirectStep::Sum(const std::vector<StepReply>& replies, int64_t H,
                             const float* weights, float* y) {
  const DirectPlan& d = plan_;
  const int P = static_cast<int>(replies.size());
  if (d.token_offsets.size() != static_cast<size_t>(P) + 1) {
    return absl::InternalError(absl::StrCat("a direct step of ",
                                            d.token_offsets.size() - 1,
                                            " ranks got ", P, " replies"));
  }
  ElementType type = ElementType::kF32;
  bool typed = false;
  for (int q = 0; q < P; ++q) {
    const int64_t rows = d.row_offsets[q + 1] - d.row_offsets[q];
    if (d.token_offsets[q + 1] == d.token_offsets[q]) continue;  // not sent
    ElementType rank_type;
    MOE_RETURN_IF_ERROR(DecodeDirectResult(replies[q], q, rows, H, &rank_type,
                                           &out_, d.row_offsets[q]));
    if (typed && rank_type != type) {
      return absl::InternalError(absl::StrCat(
          "worker rank ", q, " returned its expert outputs in another type"));
    }
    type = rank_type;
    typed = true;
  }
  // The workers' weighted sum, here, in the engine: the same kernel over the
  // same rows in slot order, so y has the bits of the all-to-all path.
  SumDirectOutputs(d, H, type, out_.data(), weights, y);
  return absl::OkStatus();
}

}  // namespace moe
