#include "engine/ep_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/even_split.h"
#include "engine/placement.h"
#include "engine/token_router.h"
#include "kernels/cpu/dispatch.h"

namespace moe {
namespace {

absl::Status CheckInput(const EpStepInput& in, int world, int64_t E,
                        int64_t max_count) {
  const int64_t n = in.tokens, S = in.slots;
  if (n < 0 || S < 0 || (n > 0 && in.rows == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", in.step_id, ": ", n, " rows with ", S, " slots"));
  }
  if (static_cast<int64_t>(in.expert_ids.size()) != n * S ||
      static_cast<int64_t>(in.weights.size()) != n * S) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", in.step_id, ": ", n, " rows with ", S,
                     " slots need that many expert ids and weights, got ",
                     in.expert_ids.size(), " and ", in.weights.size()));
  }
  if (static_cast<int64_t>(in.counts.size()) != world * E) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", in.step_id, ": counts has ", in.counts.size(),
                     " entries, expected ", world * E));
  }
  for (int64_t c : in.counts) {
    if (c < 0 || c > max_count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", in.step_id, ": count ", c, " outside [0, ", max_count, "]"));
    }
  }
  for (int32_t e : in.expert_ids) {
    if (e < -1 || e >= E) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", in.step_id, ": expert id ", e, " outside [-1, ", E, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PlanEpStep(const EpStepInput& in, int rank, int world, int64_t E,
                        int64_t max_count, EpPlan* p) {
  if (absl::Status s = CheckInput(in, world, E, max_count); !s.ok()) return s;
  const int64_t n = in.tokens, S = in.slots;
  p->tokens = n;
  p->slots = S;
  p->expert_begin = SplitBegin(rank, world, E);
  p->expert_end = SplitBegin(rank + 1, world, E);
  p->dispatch = world > 1 ? in.dispatch : DispatchDType::kRowType;

  // Own slots in expert order, which is also destination-rank order since
  // ranks own contiguous (physical) expert ranges; they must match the
  // plan's counts.
  const int64_t num_slots = n * S;
  std::vector<int64_t>& offsets = p->slot_offsets;
  offsets.resize(E + 1);
  p->order.resize(num_slots);
  p->sent = kernels::cpu::SortSlotsByExpert(in.expert_ids.data(), num_slots, E,
                                            offsets.data(), p->order.data());
  p->order.resize(p->sent);
  const int64_t* counts = in.counts.data();
  for (int64_t e = 0; e < E; ++e) {
    if (offsets[e + 1] - offsets[e] != counts[rank * E + e]) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", in.step_id, ": plan says rank ", rank,
                       " sends ", counts[rank * E + e], " rows to expert ", e,
                       ", its slots hold ", offsets[e + 1] - offsets[e]));
    }
  }
  p->src_row.resize(p->sent);
  for (int64_t j = 0; j < p->sent; ++j) p->src_row[j] = p->order[j] / S;

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

void PlanDispatch(const Routing& r, int64_t n, int P, int64_t E,
                  std::vector<int32_t>* expert_ids,
                  std::vector<int64_t>* counts, const ReplicaMap* replicas) {
  const int64_t S = r.slots;
  expert_ids->resize(n * S);
  if (replicas == nullptr) {
    counts->assign(P * E, 0);
    for (int q = 0; q < P; ++q) {
      const int64_t b = SplitBegin(q, P, n), e = SplitBegin(q + 1, P, n);
      for (int64_t i = b * S; i < e * S; ++i) {
        const bool go = r.dispatched[i] != 0;
        (*expert_ids)[i] = go ? r.expert[i] : -1;
        if (go) ++(*counts)[q * E + r.expert[i]];
      }
    }
    return;
  }
  const ReplicaMap& m = *replicas;
  const int64_t phys = m.physical;
  counts->assign(P * phys, 0);
  std::vector<int64_t> rows(P, 0);
  auto send = [&](int64_t i, int32_t slot) {
    (*expert_ids)[i] = slot;
    ++rows[m.worker_of[slot]];
    ++(*counts)[SplitOwner(i / S, P, n) * phys + slot];
  };
  // Experts with one replica first: their rows are fixed.
  for (int64_t i = 0; i < n * S; ++i) {
    (*expert_ids)[i] = -1;
    if (r.dispatched[i] != 0 && m.replicas(r.expert[i]) == 1) {
      send(i, m.slot[m.offsets[r.expert[i]]]);
    }
  }
  for (int64_t i = 0; i < n * S; ++i) {
    if (r.dispatched[i] == 0) continue;
    const int64_t e = r.expert[i];
    if (m.replicas(e) == 1) continue;
    int32_t best = m.slot[m.offsets[e]];
    for (int64_t j = m.offsets[e] + 1; j < m.offsets[e + 1]; ++j) {
      const int32_t s = m.slot[j];
      if (rows[m.worker_of[s]] < rows[m.worker_of[best]]) best = s;
    }
    send(i, best);
  }
}

std::vector<int64_t> RowsPerRank(absl::Span<const int64_t> counts, int P,
                                 int64_t E) {
  std::vector<int64_t> rows(P, 0);
  for (int src = 0; src < P; ++src) {
    for (int q = 0; q < P; ++q) {
      for (int64_t e = SplitBegin(q, P, E); e < SplitBegin(q + 1, P, E); ++e) {
        rows[q] += counts[src * E + e];
      }
    }
  }
  return rows;
}

EpBounds StepBounds(const MoeLayerConfig& c, int64_t tokens, int64_t segments) {
  EpBounds b;
  b.tokens = tokens;
  if (c.routing != RoutingMode::kExpertChoice) {
    b.slots = c.top_k;
    b.rows = tokens * c.top_k;
    return b;
  }
  const int64_t E = c.num_experts;
  const double m =
      c.capacity_factor > 0 ? c.capacity_factor : static_cast<double>(c.top_k);
  segments = std::clamp<int64_t>(segments, tokens > 0 ? 1 : 0, tokens);
  b.slots = E;
  b.rows = std::min(E * tokens,
                    E * segments + static_cast<int64_t>(std::ceil(m * tokens)));
  return b;
}

}  // namespace moe
