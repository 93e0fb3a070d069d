// Moving token rows to experts and back: stable sort of routing slots by
// expert, row gathers, and the deterministic weighted combine.
#pragma once

#include <cstdint>

namespace moe::kernels::cpu {

// Stable counting sort of slots by expert. slot_expert[s] < 0 marks a slot
// that is not dispatched. Writes offsets[0..E] and order[offsets[e] ..
// offsets[e+1]) = the slots of expert e in slot (token-major) order.
// Returns the number of dispatched slots.
int64_t SortSlotsByExpert(const int32_t* slot_expert, int64_t num_slots,
                          int64_t num_experts, int64_t* offsets,
                          int64_t* order);

// dst[j][:] = src[src_row[j]][:] * (scale ? scale[j] : 1), rows of `cols`.
void GatherRows(const float* src, int64_t cols, const int64_t* src_row,
                const float* scale, int64_t rows, float* dst, int num_threads);

// y[t][:] = sum over s in [0, slots) with slot_row[t*slots + s] >= 0, in
// slot order, of w[t*slots + s] * expert_out[slot_row[...]][:]; weight 1
// when `w` is null (score_before_experts scaled the input instead).
void CombineSlots(int64_t n, int64_t slots, int64_t cols, const float* w,
                  const int64_t* slot_row, const float* expert_out, float* y,
                  int num_threads);
// The same over bf16 expert outputs (bits), each widened exactly to fp32:
// the bits of widening them first and summing those.
void CombineSlots(int64_t n, int64_t slots, int64_t cols, const float* w,
                  const int64_t* slot_row, const uint16_t* expert_out, float* y,
                  int num_threads);

}  // namespace moe::kernels::cpu
