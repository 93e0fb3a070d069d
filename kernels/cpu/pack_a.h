// Internal: copies a tile of gathered A rows into the contiguous
// k-major layout the micro-kernels broadcast from. Included by the per-ISA
// translation units, so it has internal linkage: a shared inline copy could
// be resolved by the linker to the AVX-512 build of it on an AVX2 machine.
#pragma once

#include <cstdint>

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

}  // namespace moe::kernels::cpu::internal
