#include "worker/step_plan.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/dispatch.h"

namespace moe {

absl::Status PlanStep(const moe::v1::Step& step, int rank, int world, int64_t E,
                      int64_t H, int64_t max_count, StepPlan* p) {
  const auto& rows = step.rows();
  if (rows.dtype() != moe::v1::F32 || rows.shape_size() != 2 ||
      rows.shape(1) != H || rows.shape(0) < 0 ||
      rows.data().size() != static_cast<size_t>(rows.shape(0) * H) * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step ", step.step_id(), ": rows must be F32 [N, ", H, "]"));
  }
  const int64_t n = rows.shape(0), S = step.slots();
  if (S < 0 || step.expert_ids_size() != n * S ||
      step.weights_size() != n * S) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step_id(), ": ", n, " rows with ", S,
                     " slots need that many expert ids and weights, got ",
                     step.expert_ids_size(), " and ", step.weights_size()));
  }
  if (step.counts_size() != world * E) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step_id(), ": counts has ",
                     step.counts_size(), " entries, expected ", world * E));
  }
  for (int64_t c : step.counts()) {
    if (c < 0 || c > max_count) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step.step_id(), ": count ", c, " outside [0, ",
                       max_count, "]"));
    }
  }
  for (int32_t e : step.expert_ids()) {
    if (e < -1 || e >= E) {
      return absl::InvalidArgumentError(absl::StrCat("step ", step.step_id(),
                                                     ": expert id ", e,
                                                     " outside [-1, ", E, ")"));
    }
  }
  p->tokens = n;
  p->slots = S;
  p->expert_begin = SplitBegin(rank, world, E);
  p->expert_end = SplitBegin(rank + 1, world, E);

  // Own slots in expert order, which is also destination-rank order since
  // ranks own contiguous expert ranges; they must match the plan's counts.
  const int64_t num_slots = n * S;
  std::vector<int64_t>& offsets = p->slot_offsets;
  offsets.resize(E + 1);
  p->order.resize(num_slots);
  p->sent = kernels::cpu::SortSlotsByExpert(step.expert_ids().data(), num_slots,
                                            E, offsets.data(), p->order.data());
  p->order.resize(p->sent);
  const int64_t* counts = step.counts().data();
  for (int64_t e = 0; e < E; ++e) {
    if (offsets[e + 1] - offsets[e] != counts[rank * E + e]) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step.step_id(), ": plan says rank ", rank,
                       " sends ", counts[rank * E + e], " rows to expert ", e,
                       ", its slots hold ", offsets[e + 1] - offsets[e]));
    }
  }

  // Exchange sizes straight from the plan.
  p->send_rows.assign(world, 0);
  p->recv_rows.assign(world, 0);
  for (int q = 0; q < world; ++q) {
    for (int64_t e = SplitBegin(q, world, E); e < SplitBegin(q + 1, world, E);
         ++e) {
      p->send_rows[q] += counts[rank * E + e];
    }
    for (int64_t e = p->expert_begin; e < p->expert_end; ++e) {
      p->recv_rows[q] += counts[q * E + e];
    }
  }
  p->received = 0;
  for (int64_t r : p->recv_rows) p->received += r;

  // Received rows are ordered (source, expert); grouped, they are
  // (expert, source).
  const int64_t local = p->expert_end - p->expert_begin;
  p->expert_offsets.assign(local + 1, 0);
  p->grouped.resize(p->received);
  std::vector<int64_t>& cursor = p->cursor;
  cursor.resize(world);
  int64_t base = 0;
  for (int q = 0; q < world; ++q) {
    cursor[q] = base;
    base += p->recv_rows[q];
  }
  int64_t next = 0;
  for (int64_t g = 0; g < local; ++g) {
    for (int q = 0; q < world; ++q) {
      for (int64_t i = 0; i < counts[q * E + p->expert_begin + g]; ++i) {
        p->grouped[next++] = cursor[q]++;
      }
    }
    p->expert_offsets[g + 1] = next;
  }

  p->slot_row.assign(num_slots, -1);
  for (int64_t j = 0; j < p->sent; ++j) p->slot_row[p->order[j]] = j;
  return absl::OkStatus();
}

}  // namespace moe
