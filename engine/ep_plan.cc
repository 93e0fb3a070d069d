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

// The peers' ids, checked before anything is sized from them: rank `rank`'s
// shard of them must be its own rows' ids, and every id an expert or -1.
absl::Status CheckAllIds(const EpStepInput& in, int rank, int world,
                         int64_t E) {
  const int64_t S = in.slots;
  const int64_t size = static_cast<int64_t>(in.all_expert_ids.size());
  if (S <= 0 || size % S != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", in.step_id, ": all_expert_ids has ", size,
                     " entries, not a multiple of ", S, " slots"));
  }
  const int64_t total = size / S;
  const int64_t b = SplitBegin(rank, world, total);
  const int64_t e = SplitBegin(rank + 1, world, total);
  if (e - b != in.tokens ||
      !std::equal(in.expert_ids.begin(), in.expert_ids.end(),
                  in.all_expert_ids.begin() + b * S)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", in.step_id, ": rank ", rank,
                     "'s share of all_expert_ids (", e - b, " of ", total,
                     " tokens) is not its ", in.tokens, " rows' expert ids"));
  }
  for (int32_t id : in.all_expert_ids) {
    if (id < -1 || id >= E) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", in.step_id, ": expert id ", id, " outside [-1, ", E, ")"));
    }
  }
  return absl::OkStatus();
}

// One dispatched row per (token, destination rank). Sending: this rank's
// tokens with a slot on rank q, in token order, q by q. Receiving: the same
// list of every source, derived from its ids (`all`), each row read by
// every grouped row of its slots here; the grouped rows keep the
// (expert, source, token, slot) order and the outputs the layout of
// one-row-per-slot, so the bits do not change. Counts were checked against
// the ids (CheckInput, CheckAllIds, the own-slot check), and the histogram
// below against the counts, so no cursor passes its range.

// Sending: each of this rank's tokens once per rank that holds one of its
// slots' experts.
void PlanTokenSends(absl::Span<const int32_t> all, int rank, int world,
                    int64_t E, int64_t total, EpPlan* p) {
  const int64_t n = p->tokens, S = p->slots;
  std::vector<int32_t>& rank_of = p->rank_of;
  rank_of.resize(E);
  for (int q = 0; q < world; ++q) {
    for (int64_t e = SplitBegin(q, world, E); e < SplitBegin(q + 1, world, E);
         ++e) {
      rank_of[e] = q;
    }
  }
  const int64_t own = SplitBegin(rank, world, total);
  p->send_rows.assign(world, 0);
  p->src_row.resize(p->home);  // a dispatched row holds at least one slot
  p->sent = 0;
  for (int q = 0; q < world; ++q) {
    for (int64_t t = 0; t < n; ++t) {
      const int32_t* ids = all.data() + (own + t) * S;
      for (int64_t j = 0; j < S; ++j) {
        if (ids[j] >= 0 && rank_of[ids[j]] == q) {
          p->src_row[p->sent++] = t;
          ++p->send_rows[q];
          break;
        }
      }
    }
  }
  p->src_row.resize(p->sent);  // keeps its capacity
}

// Receiving: per (source, local expert) cursors into the outputs' layout,
// first used to check the ids against the counts.
absl::Status PlanTokenCursors(absl::Span<const int32_t> all, int world,
                              int64_t E, int64_t total, const int64_t* counts,
                              uint64_t step_id, EpPlan* p) {
  const int64_t S = p->slots;
  const int64_t eb = p->expert_begin, local = p->expert_end - eb;
  std::vector<int64_t>& cursor = p->cursor;
  cursor.assign(world * local, 0);
  for (int q = 0; q < world; ++q) {
    for (int64_t i = SplitBegin(q, world, total) * S;
         i < SplitBegin(q + 1, world, total) * S; ++i) {
      const int64_t g = all[i] - eb;
      if (all[i] >= 0 && g >= 0 && g < local) ++cursor[q * local + g];
    }
    for (int64_t g = 0; g < local; ++g) {
      if (cursor[q * local + g] != counts[q * E + eb + g]) {
        return absl::InvalidArgumentError(
            absl::StrCat("step ", step_id, ": plan says rank ", q, " sends ",
                         counts[q * E + eb + g], " rows to expert ", eb + g,
                         ", its expert ids hold ", cursor[q * local + g]));
      }
    }
  }
  int64_t base = 0;
  for (int q = 0; q < world; ++q) {
    for (int64_t g = 0; g < local; ++g) {
      cursor[q * local + g] = base;
      base += counts[q * E + eb + g];
    }
  }
  return absl::OkStatus();
}

// Each arriving token row, read by every grouped row of its slots here.
void PlanTokenReceives(absl::Span<const int32_t> all, int world, int64_t total,
                       EpPlan* p) {
  const int64_t S = p->slots;
  const int64_t eb = p->expert_begin, local = p->expert_end - eb;
  std::vector<int64_t>& cursor = p->cursor;
  std::vector<int64_t>& expert_cursor = p->expert_cursor;
  expert_cursor.assign(p->expert_offsets.begin(), p->expert_offsets.end() - 1);
  p->recv_rows.assign(world, 0);
  p->arrived = 0;
  for (int q = 0; q < world; ++q) {
    for (int64_t t = SplitBegin(q, world, total);
         t < SplitBegin(q + 1, world, total); ++t) {
      const int32_t* ids = all.data() + t * S;
      int64_t row = -1;
      for (int64_t j = 0; j < S; ++j) {
        const int64_t g = ids[j] - eb;
        if (ids[j] < 0 || g < 0 || g >= local) continue;
        if (row < 0) {
          row = p->arrived++;
          ++p->recv_rows[q];
        }
        const int64_t pos = expert_cursor[g]++;
        p->grouped[pos] = row;
        p->out_row[pos] = cursor[q * local + g]++;
      }
    }
  }
}

absl::Status PlanTokenRows(absl::Span<const int32_t> all, int rank, int world,
                           int64_t E, const int64_t* counts, uint64_t step_id,
                           EpPlan* p) {
  const int64_t total =
      static_cast<int64_t>(all.size()) / std::max<int64_t>(p->slots, 1);
  PlanTokenSends(all, rank, world, E, total, p);
  if (absl::Status s =
          PlanTokenCursors(all, world, E, total, counts, step_id, p);
      !s.ok()) {
    return s;
  }
  PlanTokenReceives(all, world, total, p);
  return absl::OkStatus();
}

// Own slots in expert order, which is also destination-rank order since
// ranks own contiguous (physical) expert ranges; they must match the
// plan's counts. Expert outputs come back in this order.
absl::Status PlanHomeSlots(const EpStepInput& in, int rank, int64_t E,
                           EpPlan* p) {
  const int64_t num_slots = in.tokens * in.slots;
  std::vector<int64_t>& offsets = p->slot_offsets;
  offsets.resize(E + 1);
  p->order.resize(num_slots);
  p->home = kernels::cpu::SortSlotsByExpert(in.expert_ids.data(), num_slots, E,
                                            offsets.data(), p->order.data());
  p->order.resize(p->home);
  const int64_t* counts = in.counts.data();
  for (int64_t e = 0; e < E; ++e) {
    if (offsets[e + 1] - offsets[e] != counts[rank * E + e]) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", in.step_id, ": plan says rank ", rank,
                       " sends ", counts[rank * E + e], " rows to expert ", e,
                       ", its slots hold ", offsets[e + 1] - offsets[e]));
    }
  }
  p->slot_row.assign(num_slots, -1);
  for (int64_t j = 0; j < p->home; ++j) p->slot_row[p->order[j]] = j;
  return absl::OkStatus();
}

// Expert outputs, straight from the counts: each rank's slots for this
// rank's experts go back to it, grouped here by (expert, source).
void PlanExpertOutputs(const int64_t* counts, int rank, int world, int64_t E,
                       EpPlan* p) {
  p->home_rows.assign(world, 0);
  p->return_rows.assign(world, 0);
  for (int q = 0; q < world; ++q) {
    for (int64_t e = SplitBegin(q, world, E); e < SplitBegin(q + 1, world, E);
         ++e) {
      p->home_rows[q] += counts[rank * E + e];
    }
    for (int64_t e = p->expert_begin; e < p->expert_end; ++e) {
      p->return_rows[q] += counts[q * E + e];
    }
  }
  p->received = 0;
  for (int64_t r : p->return_rows) p->received += r;
  const int64_t local = p->expert_end - p->expert_begin;
  p->expert_offsets.assign(local + 1, 0);
  for (int64_t g = 0; g < local; ++g) {
    int64_t rows = 0;
    for (int q = 0; q < world; ++q) rows += counts[q * E + p->expert_begin + g];
    p->expert_offsets[g + 1] = p->expert_offsets[g] + rows;
  }
  p->grouped.resize(p->received);
  p->out_row.resize(p->received);
}

// One row per slot: the dispatched rows are the outputs' rows, in the
// same (source, expert) order both ways.
void PlanSlotRows(const int64_t* counts, int world, int64_t E, EpPlan* p) {
  const int64_t S = p->slots;
  const int64_t local = p->expert_end - p->expert_begin;
  p->sent = p->home;
  p->src_row.resize(p->sent);
  for (int64_t j = 0; j < p->sent; ++j) p->src_row[j] = p->order[j] / S;
  p->send_rows = p->home_rows;
  p->recv_rows = p->return_rows;
  p->arrived = p->received;
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
        p->out_row[next] = cursor[q];
        p->grouped[next++] = cursor[q]++;
      }
    }
  }
}

}  // namespace

absl::Status PlanEpStep(const EpStepInput& in, int rank, int world, int64_t E,
                        int64_t max_count, bool one_row_per_token, EpPlan* p) {
  if (absl::Status s = CheckInput(in, world, E, max_count); !s.ok()) return s;
  p->tokens = in.tokens;
  p->slots = in.slots;
  p->expert_begin = SplitBegin(rank, world, E);
  p->expert_end = SplitBegin(rank + 1, world, E);
  p->dispatch = world > 1 ? in.dispatch : DispatchDType::kRowType;
  absl::Span<const int32_t> all = in.all_expert_ids;
  p->one_row_per_token = one_row_per_token && (world == 1 || !all.empty());
  if (p->one_row_per_token && !all.empty()) {
    if (absl::Status s = CheckAllIds(in, rank, world, E); !s.ok()) return s;
  }
  if (all.empty()) all = in.expert_ids;  // world 1: every row is this rank's
  if (absl::Status s = PlanHomeSlots(in, rank, E, p); !s.ok()) return s;
  const int64_t* counts = in.counts.data();
  PlanExpertOutputs(counts, rank, world, E, p);
  if (p->one_row_per_token) {
    return PlanTokenRows(all, rank, world, E, counts, in.step_id, p);
  }
  PlanSlotRows(counts, world, E, p);
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
