#include "engine/direct_plan.h"

#include "core/even_split.h"
#include "kernels/cpu/dispatch.h"

namespace moe {

void PlanDirectStep(absl::Span<const int32_t> expert_ids, int64_t n, int64_t S,
                    int world, int64_t E, DirectPlan* p) {
  p->tokens = n;
  p->slots = S;
  p->token_offsets.assign(world + 1, 0);
  p->row_offsets.assign(world + 1, 0);
  // cursor: [world] the last token counted per rank (a token's slots visit
  // ranks in any order, a rank gets the token once), then [2 * world] the
  // next token and the next row of each rank.
  std::vector<int64_t>& seen = p->cursor;
  seen.assign(world, -1);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t* ids = expert_ids.data() + t * S;
    for (int64_t j = 0; j < S; ++j) {
      if (ids[j] < 0) continue;
      const int q = SplitOwner(ids[j], world, E);
      ++p->row_offsets[q + 1];
      if (seen[q] != t) {
        seen[q] = t;
        ++p->token_offsets[q + 1];
      }
    }
  }
  for (int q = 0; q < world; ++q) {
    p->token_offsets[q + 1] += p->token_offsets[q];
    p->row_offsets[q + 1] += p->row_offsets[q];
  }
  p->token.resize(p->token_offsets[world]);
  p->slot_row.resize(n * S);
  // In token order: each rank's tokens come out ascending and its rows in
  // slot order, the order a worker returns them in (EncodeDirectResult).
  p->cursor.resize(3 * world);
  int64_t* last = p->cursor.data();
  int64_t* next_token = last + world;
  int64_t* next_row = next_token + world;
  for (int q = 0; q < world; ++q) {
    last[q] = -1;
    next_token[q] = p->token_offsets[q];
    next_row[q] = p->row_offsets[q];
  }
  for (int64_t t = 0; t < n; ++t) {
    const int32_t* ids = expert_ids.data() + t * S;
    for (int64_t j = 0; j < S; ++j) {
      if (ids[j] < 0) {
        p->slot_row[t * S + j] = -1;
        continue;
      }
      const int q = SplitOwner(ids[j], world, E);
      if (last[q] != t) {
        last[q] = t;
        p->token[next_token[q]++] = t;
      }
      p->slot_row[t * S + j] = next_row[q]++;
    }
  }
}

void DirectRankSlots(const DirectPlan& p, int q, int world, int64_t E,
                     absl::Span<const int32_t> expert_ids,
                     absl::Span<const float> weights, std::vector<int32_t>* ids,
                     std::vector<float>* rank_weights,
                     std::vector<int64_t>* counts) {
  const int64_t S = p.slots;
  const int64_t b = p.token_offsets[q], e = p.token_offsets[q + 1];
  ids->resize((e - b) * S);
  rank_weights->resize((e - b) * S);
  counts->assign(world * E, 0);
  const int64_t first = SplitBegin(q, world, E),
                end = SplitBegin(q + 1, world, E);
  for (int64_t i = b; i < e; ++i) {
    const int64_t t = p.token[i];
    for (int64_t j = 0; j < S; ++j) {
      const int32_t x = expert_ids[t * S + j];
      const bool mine = x >= first && x < end;
      (*ids)[(i - b) * S + j] = mine ? x : -1;
      (*rank_weights)[(i - b) * S + j] = weights[t * S + j];
      if (mine) ++(*counts)[q * E + x];
    }
  }
}

void SumDirectOutputs(const DirectPlan& p, int64_t H, ElementType type,
                      const void* rows, const float* weights, float* y) {
  if (type == ElementType::kBF16) {
    kernels::cpu::CombineSlots(p.tokens, p.slots, H, weights, p.slot_row.data(),
                               static_cast<const uint16_t*>(rows), y,
                               /*num_threads=*/1);
  } else {
    kernels::cpu::CombineSlots(p.tokens, p.slots, H, weights, p.slot_row.data(),
                               static_cast<const float*>(rows), y,
                               /*num_threads=*/1);
  }
}

}  // namespace moe
