// Internal: helpers of the per-ISA micro-kernels. Included by each ISA's
// translation unit, so everything here has internal linkage: a shared inline
// copy could be resolved by the linker to the AVX-512 build of it on an AVX2
// machine.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/packed_gemm.h"

namespace moe::kernels::cpu::internal {

// dst[kk * rows + r] = a_rows[r][kk] for r < rows, kk < k.
static inline void PackATile(const float* const* a_rows, int rows, int64_t k,
                             float* dst) {
  for (int r = 0; r < rows; ++r) {
    const float* src = a_rows[r];
    float* d = dst + r;
    for (int64_t kk = 0; kk < k; ++kk) d[kk * rows] = src[kk];
  }
}

// Prefetches the cache lines of weight step `kk` of a panel block (32
// values: one line of bf16, two of fp32). Never null: a branch here makes
// GCC keep the accumulators in memory.
template <typename W>
static inline void PrefetchStep(const W* prefetch, int64_t kk) {
  const char* p = reinterpret_cast<const char*>(prefetch + kk * kPanelWidth);
  _mm_prefetch(p, _MM_HINT_T0);
  if constexpr (sizeof(W) == 4) _mm_prefetch(p + 64, _MM_HINT_T0);
}

}  // namespace moe::kernels::cpu::internal
