// Builds a loop for AVX-512, AVX2 and the baseline and picks one at load
// (GCC function multiversioning): the same source, 4 to 16 values per
// instruction, bit for bit the same answers. For the per-byte passes over
// rows (conversions, checks) in files compiled for the baseline; the GEMM
// kernels have their own per-ISA translation units instead.
#pragma once

#define MOE_VECTOR_CLONES \
  __attribute__((target_clones("arch=skylake-avx512", "avx2", "default")))
