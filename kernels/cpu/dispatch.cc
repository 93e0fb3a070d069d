#include "kernels/cpu/dispatch.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace moe::kernels::cpu {
namespace {

// Rows below which threading costs more than the copy.
constexpr int64_t kParallelRows = 64;

int ThreadsFor(int64_t rows, int num_threads) {
  return rows >= kParallelRows ? std::max(num_threads, 1) : 1;
}

}  // namespace

int64_t SortSlotsByExpert(const int32_t* slot_expert, int64_t num_slots,
                          int64_t num_experts, int64_t* offsets,
                          int64_t* order) {
  std::fill(offsets, offsets + num_experts + 1, int64_t{0});
  for (int64_t s = 0; s < num_slots; ++s) {
    if (slot_expert[s] >= 0) ++offsets[slot_expert[s] + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
  // offsets[e] doubles as the fill cursor, then is restored.
  for (int64_t s = 0; s < num_slots; ++s) {
    if (slot_expert[s] >= 0) order[offsets[slot_expert[s]]++] = s;
  }
  for (int64_t e = num_experts; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
  return offsets[num_experts];
}

void GatherRows(const float* src, int64_t cols, const int64_t* src_row,
                const float* scale, int64_t rows, float* dst, int num_threads) {
#pragma omp parallel for schedule(static) \
    num_threads(ThreadsFor(rows, num_threads))
  for (int64_t j = 0; j < rows; ++j) {
    const float* s = src + src_row[j] * cols;
    float* d = dst + j * cols;
    if (scale == nullptr) {
      std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(float));
    } else {
      const float a = scale[j];
      for (int64_t c = 0; c < cols; ++c) d[c] = s[c] * a;
    }
  }
}

namespace {

inline float Widen(float v) { return v; }
inline float Widen(uint16_t bf16) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16);
}

template <typename T>
void CombineSlotsOf(int64_t n, int64_t slots, int64_t cols, const float* w,
                    const int64_t* slot_row, const T* expert_out, float* y,
                    int num_threads) {
#pragma omp parallel for schedule(static) \
    num_threads(ThreadsFor(n, num_threads))
  for (int64_t t = 0; t < n; ++t) {
    float* yt = y + t * cols;
    std::fill(yt, yt + cols, 0.0f);
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t row = slot_row[t * slots + s];
      if (row < 0) continue;
      const float a = w != nullptr ? w[t * slots + s] : 1.0f;
      const T* o = expert_out + row * cols;
      // The next slot's row (of this token, or the next token's first):
      // rows sit anywhere in expert order, and the hardware prefetcher
      // starts over at each one.
      const int64_t next_slot = t * slots + s + 1;
      const T* next = next_slot < n * slots && slot_row[next_slot] >= 0
                          ? expert_out + slot_row[next_slot] * cols
                          : nullptr;
      constexpr int64_t kLine = 64 / sizeof(T);
      for (int64_t c0 = 0; c0 < cols; c0 += kLine) {
        if (next != nullptr) __builtin_prefetch(next + c0);
        const int64_t c1 = c0 + kLine < cols ? c0 + kLine : cols;
        for (int64_t c = c0; c < c1; ++c) yt[c] += a * Widen(o[c]);
      }
    }
  }
}

}  // namespace

void CombineSlots(int64_t n, int64_t slots, int64_t cols, const float* w,
                  const int64_t* slot_row, const float* expert_out, float* y,
                  int num_threads) {
  CombineSlotsOf(n, slots, cols, w, slot_row, expert_out, y, num_threads);
}

void CombineSlots(int64_t n, int64_t slots, int64_t cols, const float* w,
                  const int64_t* slot_row, const uint16_t* expert_out, float* y,
                  int num_threads) {
  CombineSlotsOf(n, slots, cols, w, slot_row, expert_out, y, num_threads);
}

}  // namespace moe::kernels::cpu
